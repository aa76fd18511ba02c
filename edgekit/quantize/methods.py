"""The built-in quantization methods' configs: each a frozen dataclass, the method by its decorator.

A config's fields are every setting of its method, checked when it is built; its class traits
(``registry.QuantConfig``) tell the stages what it needs. The files come from its routes
(``edgekit/quantize/routes/``), one per format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgekit.core.bounds import check_field_types, check_seed
from edgekit.core.errors import UsageError, unknown_name
from edgekit.quantize.registry import QuantConfig, method
from edgekit.core.targets import QUANT_TYPES
from edgekit import formats
from edgekit.data.calibsets import default_calibration
from edgekit.quantize.toolkits.fusion import check_fusion


def _default_formats() -> tuple[str, ...]:
    return formats.default_names()


def _check_formats(names: tuple[str, ...]) -> None:
    formats.check(names)


def _check_quant_type(label: str, value: str | None) -> None:
    if value is not None and value not in QUANT_TYPES:
        raise UsageError(f"unknown {label} {value!r}; choose one of: {', '.join(QUANT_TYPES)}")


def _check_positive(label: str, value, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{label} must be an integer >= 1, got {value!r}")


@method("dynamic", "int8 weights, activations quantized at run time")
@dataclass(frozen=True)
class DynamicConfig(QuantConfig):
    """int8 weights, activations quantized at run time. No calibration data."""

    label = "dynamic quantization"
    run_time_activations = True

    formats: tuple[str, ...] = field(default_factory=_default_formats)
    weight_type: str | None = None  # ONNX: None = the target recipe's
    per_channel: bool | None = None
    reduce_range: bool | None = None
    exclude: tuple[str, ...] = ()  # layers kept in float (ONNX node names / torch module names)
    fusion: str = "no-skip-ln"  # ONNX: graph layout before quantization (see quantize/toolkits/fusion.py)

    def __post_init__(self) -> None:
        check_field_types(self)
        _check_formats(self.formats)
        _check_quant_type("weight type", self.weight_type)
        check_fusion(self.fusion)


CALIBRATE_METHODS = ("minmax", "percentile", "entropy", "mse")


def _packaged_calibration(dataset: str) -> Path:
    return default_calibration(dataset)


@method("static", "int8 weights and activations, calibrated")
@dataclass(frozen=True)
class StaticConfig(QuantConfig):
    """int8 weights and activations, activation ranges from calibration data."""

    label = "static quantization"
    calibrated = True

    # inside the package (any cwd); None: the set edgekit ships for the model's dataset
    calib: Path | None = field(default_factory=lambda: _packaged_calibration("digits"))
    formats: tuple[str, ...] = field(default_factory=_default_formats)
    calibrate_method: str = "minmax"
    percentile: float | None = None  # percentile calibration: the kept share of values (default 99.99)
    calib_bins: int | None = None  # histogram calibrations: bins per tensor (default 2048)
    calib_batch_size: int = 32
    calib_max_samples: int | None = None
    calib_cache: bool = True  # reuse ranges computed before for the same model, data and settings
    # how --calib is read when it is not model-ready arrays (quantize/calibration/images.py, text.py):
    # an image folder's preprocessing ("resize=256,crop=224,..." or a TOML path), a text file's tokenizer
    calib_preprocess: str | None = None
    tokenizer: Path | None = None
    activation_type: str | None = None  # ONNX: None = the target recipe's
    weight_type: str | None = None
    per_channel: bool | None = None
    reduce_range: bool | None = None
    exclude: tuple[str, ...] = ()
    float_stem: bool = True  # ONNX: keep a thin input convolution (<= 32 MACs per output) in float
    op_types: tuple[str, ...] = ()  # ONNX: quantize only these op types (e.g. MatMul,Gemm); empty = all
    fusion: str = "no-skip-ln"  # ONNX: runtime | no-skip-ln (see quantize/toolkits/fusion.py)
    # ONNX: MatMul outputs stay float (DequantizeLinear -> MatMul fuses into MatMulIntegerToFloat); a
    # transformer's FFN output has outlier channels (crest factor ~200) that an 8-bit step cannot hold
    quantize_matmul_outputs: bool = False
    # ONNX: SmoothQuant-style scale migration of outlier channels into the weights, alpha searched on
    # the calibration data (quantize/toolkits/smooth.py)
    smooth: bool = False

    def __post_init__(self) -> None:
        from edgekit.quantize.calibration.calibrators import make_calibration

        check_field_types(self)
        if self.fusion not in ("runtime", "no-skip-ln"):
            raise UsageError(f"static quantization takes --fusion runtime or no-skip-ln, not {self.fusion!r}")
        _check_formats(self.formats)
        if self.calibrate_method not in CALIBRATE_METHODS:
            raise unknown_name("calibration method", self.calibrate_method, CALIBRATE_METHODS)
        _check_positive("calibration batch size", self.calib_batch_size, allow_none=False)
        _check_positive("calibration sample limit", self.calib_max_samples)
        _check_quant_type("activation type", self.activation_type)
        _check_quant_type("weight type", self.weight_type)
        make_calibration(self.calibrate_method, **self.calibration_settings())  # validates the settings
        if self.calib_preprocess is not None:
            from edgekit.userdata.images import parse_preprocess

            parse_preprocess(self.calib_preprocess)  # a bad declaration is refused before any work

    def calibration_settings(self) -> dict:
        return {"percentile": self.percentile, "bins": self.calib_bins}


@method("qat", "fake-quant fine-tuning on the training data, then int8")
@dataclass(frozen=True)
class QatConfig(QuantConfig):
    """Fake-quant fine-tuning on the task's training data, then int8 (TorchScript and QDQ ONNX)."""

    label = "QAT"
    trains = True

    formats: tuple[str, ...] = field(default_factory=_default_formats)
    epochs: int = 3
    lr: float = 5e-4  # Adam, cosine-decayed
    batch_size: int = 64
    seed: int = 0
    per_channel: bool | None = None  # None: the target engine's default (qnnpack: per-tensor)

    def __post_init__(self) -> None:
        check_field_types(self)
        _check_formats(self.formats)

        formats.check_one_qat_api(self.formats)
        _check_positive("QAT epochs", self.epochs, allow_none=False)
        _check_positive("QAT batch size", self.batch_size, allow_none=False)
        if not isinstance(self.lr, (int, float)) or not 0 < self.lr < float("inf"):
            raise UsageError(f"QAT learning rate must be positive, got {self.lr!r}")

        check_seed(self.seed, "QAT seed")

