"""Quantization methods: a config dataclass plus a handler, registered by name.

Adding a method adds a config + handler and one ``register_method`` call; nothing else changes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from edgekit.bounds import check_field_types
from edgekit.errors import UsageError, unknown_name
from edgekit.targets import QUANT_TYPES



def _default_formats() -> tuple[str, ...]:
    from edgekit import formats

    return formats.default_names()


def _check_formats(names: tuple[str, ...]) -> None:
    from edgekit import formats

    formats.check(names)


def _check_quant_type(label: str, value: str | None) -> None:
    if value is not None and value not in QUANT_TYPES:
        raise UsageError(f"unknown {label} {value!r}; choose one of: {', '.join(QUANT_TYPES)}")


def _check_positive(label: str, value, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{label} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class DynamicConfig:
    """int8 weights, activations quantized at run time. No calibration data."""

    formats: tuple[str, ...] = field(default_factory=_default_formats)
    weight_type: str | None = None  # ONNX: None = the target recipe's
    per_channel: bool | None = None
    reduce_range: bool | None = None
    exclude: tuple[str, ...] = ()  # layers kept in float (ONNX node names / torch module names)
    fusion: str = "no-skip-ln"  # ONNX: graph layout before quantization (see quantize/fusion.py)

    def __post_init__(self) -> None:
        from edgekit.quantize.fusion import check_fusion

        check_field_types(self)
        _check_formats(self.formats)
        _check_quant_type("weight type", self.weight_type)
        check_fusion(self.fusion)


CALIBRATE_METHODS = ("minmax", "percentile", "entropy", "mse")


def _packaged_calibration(dataset: str) -> Path:
    from edgekit.data.calibsets import default_calibration

    return default_calibration(dataset)


@dataclass(frozen=True)
class StaticConfig:
    """int8 weights and activations, activation ranges from calibration data."""

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
    fusion: str = "no-skip-ln"  # ONNX: runtime | no-skip-ln (see quantize/fusion.py)
    # ONNX: MatMul outputs stay float (DequantizeLinear -> MatMul fuses into MatMulIntegerToFloat); a
    # transformer's FFN output has outlier channels (crest factor ~200) that an 8-bit step cannot hold
    quantize_matmul_outputs: bool = False
    # ONNX: SmoothQuant-style scale migration of outlier channels into the weights, alpha searched on
    # the calibration data (quantize/smooth.py)
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
            from edgekit.quantize.calibration.images import parse_preprocess

            parse_preprocess(self.calib_preprocess)  # a bad declaration is refused before any work

    def calibration_settings(self) -> dict:
        return {"percentile": self.percentile, "bins": self.calib_bins}


@dataclass(frozen=True)
class QatConfig:
    """Fake-quant fine-tuning on the task's training data, then int8 (TorchScript and QDQ ONNX)."""

    formats: tuple[str, ...] = field(default_factory=_default_formats)
    epochs: int = 3
    lr: float = 5e-4  # Adam, cosine-decayed
    batch_size: int = 64
    seed: int = 0
    per_channel: bool | None = None  # None: the target engine's default (qnnpack: per-tensor)

    def __post_init__(self) -> None:
        check_field_types(self)
        _check_formats(self.formats)
        from edgekit import formats

        formats.check_one_qat_api(self.formats)
        _check_positive("QAT epochs", self.epochs, allow_none=False)
        _check_positive("QAT batch size", self.batch_size, allow_none=False)
        if not isinstance(self.lr, (int, float)) or not 0 < self.lr < float("inf"):
            raise UsageError(f"QAT learning rate must be positive, got {self.lr!r}")
        from edgekit.bounds import check_seed

        check_seed(self.seed, "QAT seed")


@dataclass(frozen=True)
class Method:
    name: str
    config_type: type
    handler: Callable  # (QuantJob, config) -> list[Produced]
    summary: str = ""


_METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    _METHODS[method.name] = method
    return method


def method_names() -> list[str]:
    _load_builtin()
    return sorted(_METHODS)


def get_method(name: str) -> Method:
    _load_builtin()
    if name not in _METHODS:
        raise unknown_name("quantization method", name, _METHODS)
    return _METHODS[name]


def make_config(name: str, **options: Any):
    """Build the method's config from options; options the method does not take are an error."""
    method = get_method(name)
    known = {f.name for f in dataclasses.fields(method.config_type)}
    given = {k: v for k, v in options.items() if v is not None}
    extra = sorted(set(given) - known)
    if extra:
        raise UsageError(f"method {name!r} does not take option(s): {', '.join(extra)}")
    return method.config_type(**given)


def method_for_config(config: Any) -> Method:
    """The registered method whose config type ``config`` is an instance of (exactly that type:
    a subclass is a different method, registered on its own)."""
    _load_builtin()
    for method in _METHODS.values():
        if type(config) is method.config_type:
            return method
    names = ", ".join(f"{m.config_type.__name__} ({m.name})" for m in sorted(_METHODS.values(), key=lambda m: m.name))
    got = f"the class {config.__name__} (call it: {config.__name__}(...))" if isinstance(config, type) \
        else f"{type(config).__name__} {' '.join(repr(config).split())[:80]}"
    raise UsageError(f"not a quantization config: {got}; give one of {names}, or a method name")


_BUILTIN: list[Method] = []


def _load_builtin() -> None:
    # always: a method registered by a user first must not keep the built-in ones out
    if _BUILTIN:
        return
    from edgekit.quantize import handlers

    _BUILTIN.extend([
        Method("dynamic", DynamicConfig, handlers.dynamic, "int8 weights, activations quantized at run time"),
        Method("static", StaticConfig, handlers.static, "int8 weights and activations, calibrated"),
        Method("qat", QatConfig, handlers.qat, "fake-quant fine-tuning on the training data, then int8"),
    ])
    for method in _BUILTIN:
        register_method(method)
