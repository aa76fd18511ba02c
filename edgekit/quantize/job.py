"""What a quantization handler works with: the float model, its ONNX export, calibration ranges."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator

from edgekit.errors import EdgekitError, UsageError
from edgekit.quantize.calibration.cache import files_fingerprint
from edgekit.sources.model_source import ModelSource
from edgekit.targets import Target


@dataclass
class QuantJob:
    source: ModelSource
    target: Target
    work: Path  # where handlers write their files (the artifact being built)
    provenance: dict = field(default_factory=dict)
    progress: Callable | None = None  # CalibrationProgress -> None
    calibration_info: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # shown to the user and kept in the manifest
    out: Path | None = None  # where handlers write model files (default: ``work``)
    reference_model: object = None  # a handler's own float yardstick (QAT: the fine-tuned network)
    onnx_exporter: dict = field(default_factory=dict)  # which exporter made the float ONNX, and why
    _ranges: dict = field(default_factory=dict)
    _fused: dict = field(default_factory=dict)
    memo: dict = field(default_factory=dict)  # work shared by the formats of one run (e.g. one QAT fine-tune)
    # how the run's --calib is read (images: "preprocess"; text: "tokenizer"), from its StaticConfig
    calib_reading: dict = field(default_factory=dict)

    @property
    def dest(self) -> Path:
        return self.out if self.out is not None else self.work

    # -- scratch space (removed before the artifact is finalized) ------------------------------
    @cached_property
    def scratch(self) -> Path:
        path = self.work / ".scratch"
        path.mkdir(exist_ok=True)
        return path

    # -- the float model -----------------------------------------------------------------------
    @property
    def manifest(self):
        return self.source.manifest

    @cached_property
    def _model(self):
        return self.source.load_torch()

    def float_model(self):
        """A fresh copy each call: quantizers rewrite modules in place."""
        import copy

        return copy.deepcopy(self._model)

    def example_inputs(self, batch: int = 2) -> tuple:
        from edgekit.formats.reference import example_tensors

        return example_tensors(self.source.inputs, batch)

    @cached_property
    def _float_onnx(self) -> Path:
        if self.source.onnx_path is not None:
            return self.source.onnx_path
        from edgekit.formats.onnx_export import export_onnx

        path = self.scratch / "float.onnx"
        try:
            done = export_onnx(
                self.float_model(), self.example_inputs(), self.source.inputs, self.source.outputs,
                path, self.target.onnx_opset, family=self.source.model_info.get("name", ""),
            )
            self.onnx_exporter = {"onnx_exporter": done.route, "onnx_exporter_choice": done.choice}
        except EdgekitError:  # already one line: a state dict that does not fit, a config transformers refuses
            raise
        except Exception as exc:  # the exporter raises many types; name the model and the first line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"cannot export {self.source.label} to ONNX: {first}") from None
        return path

    def float_onnx(self) -> Path:
        return self._float_onnx

    @cached_property
    def _prepared(self) -> Path:
        from edgekit.quantize.toolkits.ort_backend import preprocess

        return preprocess(self.float_onnx(), self.scratch / "prepared.onnx")

    def prepared_onnx(self) -> Path:
        """The float ONNX model after ORT's pre-processing: what is calibrated and quantized."""
        return self._prepared

    def fused_onnx(self, fusion: str) -> tuple[Path, dict]:
        """The prepared model in a fusion layout (``quantize/toolkits/fusion.py``), built once per layout."""
        from edgekit.quantize.toolkits.fusion import apply_fusion

        if fusion not in self._fused:
            self._fused[fusion] = apply_fusion(self.prepared_onnx(), self.scratch / f"graph-{fusion}.onnx", fusion,
                                               self.float_onnx())
        return self._fused[fusion]

    # -- recipes and calibration ---------------------------------------------------------------
    def recipe(self, config):
        from edgekit.quantize.toolkits.recipes import onnx_recipe

        recipe = onnx_recipe(
            self.target,
            activation_type=getattr(config, "activation_type", None),
            weight_type=getattr(config, "weight_type", None),
            per_channel=getattr(config, "per_channel", None),
            reduce_range=getattr(config, "reduce_range", None),
        )
        for warning in recipe.warnings:
            if warning not in self.warnings:
                self.warnings.append(warning)
        return recipe

    def open_calibration(self, calib, batch_size: int = 32, max_samples: int | None = None, reading: dict | None = None):
        """The calibration set ``calib`` for this model: arrays, images or text (``calibration/data.py``)."""
        return open_source_calibration(self.source, calib, batch_size, max_samples,
                                       self.calib_reading if reading is None else reading)

    def calibration(self, config):
        return self.open_calibration(config.calib, config.calib_batch_size, config.calib_max_samples,
                                     calibration_reading(config))

    def activation_ranges(self, config) -> dict:
        """Per-tensor ranges of the prepared ONNX model, from the calibration cache or a pass."""
        from edgekit.fileio import sha256_file
        from edgekit.quantize.calibration import cache as calib_cache
        from edgekit.quantize.calibration.calibrators import describe, make_calibration, make_calibrator
        from edgekit.quantize.calibration.onnx_ranges import collect_ranges

        settings = make_calibration(config.calibrate_method, **config.calibration_settings())
        memo = (config.calibrate_method, repr(settings), str(config.calib), config.calib_batch_size, config.calib_max_samples)
        if memo in self._ranges:
            return self._ranges[memo]
        calib = self.calibration(config)
        prepared = self.prepared_onnx()
        about = describe(config.calibrate_method, settings)
        key = calib_cache.cache_key(sha256_file(prepared), calib_cache.data_fingerprint(calib),
                                    config.calibrate_method, about)
        cache = calib_cache.CalibrationCache()
        hit = cache.load(key) if config.calib_cache else None
        if hit is not None:
            ranges, samples = hit
        else:
            total = calib.count()
            ranges, samples = collect_ranges(
                prepared, calib.feeds(), make_calibrator(config.calibrate_method, settings), total, self.progress
            )
            if config.calib_cache:
                cache.store(key, ranges, samples, {"model": self.source.label, **about, "samples": samples})
        self.calibration_info = {
            "source": str(Path(config.calib)),
            **_file_names(calib),
            "data_sha256": files_fingerprint(calib.files),
            "samples": samples,
            "batch_size": config.calib_batch_size,
            **({"reading": calib.settings} if getattr(calib, "settings", None) else {}),
            **about,
            "cache": ("hit" if hit is not None else "stored") if config.calib_cache else "off",
            "cache_key": key,
            "mask_tensors": sorted(n for n, r in ranges.items() if r.mask_like),
        }
        self._ranges[memo] = ranges
        return ranges

    def note_calibration(self, config, calib) -> None:
        """Record the calibration data a quantizer used, unless a calibration pass already did."""
        if not self.calibration_info:
            self.calibration_info = {"source": str(config.calib), **_file_names(calib),
                                     "data_sha256": files_fingerprint(calib.files),
                                     "samples": calib.count(), "batch_size": config.calib_batch_size,
                                     **({"reading": calib.settings} if getattr(calib, "settings", None) else {})}

    def input_ranges(self) -> dict:
        """Calibrated ranges of the model inputs (empty when nothing was calibrated)."""
        names = {spec.name for spec in self.source.inputs}
        out = {}
        for ranges in self._ranges.values():
            out.update({k: v for k, v in ranges.items() if k in names})
        return out

    def torch_batches(self, calib) -> Iterator[tuple]:
        import torch

        for feed in calib.feeds():
            yield tuple(torch.from_numpy(feed[spec.name]) for spec in self.source.inputs)

    def save_torchscript(self, module, rel: str, engine: str) -> Path:
        from edgekit.formats import torchscript_backend
        from edgekit.quantize.toolkits.torch_backend import quantized_engine

        path = self.dest / rel
        with quantized_engine(engine):
            traced = torchscript_backend.trace(module, self.example_inputs())
            torchscript_backend.save(traced, path, {**self.provenance, "quantized_engine": engine})
        return path


def open_source_calibration(source: ModelSource, calib, batch_size: int = 32, max_samples: int | None = None,
                            reading: dict | None = None):
    """``calib`` opened for ``source``'s inputs, read as ``reading`` says (``calibration_reading``); an
    hf: model brings its tokenizer and its longest sequence. The first batch is checked now."""
    from edgekit.quantize.calibration.data import open_calibration

    reading = reading or {}
    positions = (source.model_info.get("config") or {}).get("max_position_embeddings") if source.kind == "hf" else None
    return open_calibration(calib, source.inputs, batch_size, max_samples,
                            preprocess=reading.get("preprocess"), tokenizer=reading.get("tokenizer"),
                            model_tokenizer=source.tokenizer,
                            max_length=positions if isinstance(positions, int) and not isinstance(positions, bool) else None)


def calibration_reading(config) -> dict:
    """How a config's --calib is read: ``preprocess`` (images) and ``tokenizer`` (text), where set."""
    reading = {"preprocess": getattr(config, "calib_preprocess", None), "tokenizer": getattr(config, "tokenizer", None)}
    return {k: v for k, v in reading.items() if v is not None}


NAMED_FILES = 100


def _file_names(calib) -> dict:
    """The calibration files by name (a folder of thousands of images: the first NAMED_FILES, and how many)."""
    names = [p.name for p in calib.files]
    if len(names) <= NAMED_FILES:
        return {"files": names}
    return {"files": names[:NAMED_FILES], "file_count": len(names)}
