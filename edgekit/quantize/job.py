"""What every quantization route works with: the destination, scratch space, the source's manifest,
the float model and example inputs, the calibration data. What one format derives from these (the
prepared ONNX graph and its ranges: ``toolkits/onnx_graphs``; a TorchScript save: its route) lives
beside that format's route or toolkit, cached in ``memo``."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator

from edgekit.core.errors import EdgekitError, UsageError
from edgekit.formats.onnx_export import export_onnx
from edgekit.quantize.calibration.cache import files_fingerprint
from edgekit.sources.onnx_exporter import preferred_exporter
from edgekit.sources.model_source import ModelSource
from edgekit.core.targets import Target
from edgekit.formats.reference import example_tensors
from edgekit.userdata.sets import open_calibration
from edgekit.sources.state_pairs import stream_layout

# the float ONNX export, once per job (the memo is shared: each key names its owner)
_FLOAT_ONNX = ("job", "float-onnx")
_ONNX_EXPORTER = ("job", "onnx-exporter")


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
    # calibrated tensor ranges, per calibration settings (``input_ranges`` reads the model inputs' ones)
    calibrated_ranges: dict = field(default_factory=dict)
    # work done once per job and shared by its routes (one QAT fine-tune, the float ONNX export),
    # keyed by tuples that start with their owner's name
    memo: dict = field(default_factory=dict)
    # how the run's --calib is read (images: "preprocess"; text: "tokenizer"), from its StaticConfig
    calib_reading: dict = field(default_factory=dict)
    # --state INPUT=OUTPUT: state pairs declared for a stateful model (calibrated on streams)
    declared_states: dict = field(default_factory=dict)
    # --sample-axis NAME=AXIS: the axis that counts each named input's samples, where detection would guess
    declared_axes: dict = field(default_factory=dict)

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
        return example_tensors(self.source.inputs, batch)

    def float_onnx(self) -> Path:
        """The float model as ONNX: the source's own file, else exported once into the scratch space."""
        if _FLOAT_ONNX not in self.memo:
            self.memo[_FLOAT_ONNX] = self.source.onnx_path if self.source.onnx_path is not None else self._export_onnx()
        return self.memo[_FLOAT_ONNX]

    def onnx_exporter(self) -> dict:
        """Which exporter made the float ONNX, and why (empty for a source that is an ONNX file)."""
        return self.memo.get(_ONNX_EXPORTER, {})

    def _export_onnx(self) -> Path:
        path = self.scratch / "float.onnx"
        try:
            done = export_onnx(
                self.float_model(), self.example_inputs(), self.source.inputs, self.source.outputs,
                path, self.target.onnx_opset, preferred=preferred_exporter(self.source.model_info.get("name", "")),
            )
            self.memo[_ONNX_EXPORTER] = {"onnx_exporter": done.route, "onnx_exporter_choice": done.choice}
        except EdgekitError:  # already one line: a state dict that does not fit, a config transformers refuses
            raise
        except Exception as exc:  # the exporter raises many types; name the model and the first line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"cannot export {self.source.label} to ONNX: {first}") from None
        return path

    # -- calibration ----------------------------------------------------------------------------
    def open_calibration(self, calib, batch_size: int = 32, max_samples: int | None = None, reading: dict | None = None):
        """The calibration set ``calib`` for this model: arrays, images or text (``edgekit.userdata.sets``)."""
        return open_source_calibration(self.source, calib, batch_size, max_samples,
                                       self.calib_reading if reading is None else reading, self.declared_states,
                                       self.declared_axes)

    def calibration(self, config):
        return self.open_calibration(config.calib, config.calib_batch_size, config.calib_max_samples,
                                     calibration_reading(config))

    def note_calibration(self, config, calib) -> None:
        """Record the calibration data a quantizer used, unless a calibration pass already did."""
        if not self.calibration_info:
            self.calibration_info = {"source": str(config.calib), **file_names(calib),
                                     "data_sha256": files_fingerprint(calib.files),
                                     "samples": calib.count(), "batch_size": config.calib_batch_size,
                                     **({"sample_axes": dict(calib.axes)} if getattr(calib, "axes", ()) else {}),
                                     **({"reading": calib.settings} if getattr(calib, "settings", None) else {})}

    def input_ranges(self) -> dict:
        """Calibrated ranges of the model inputs (empty when nothing was calibrated)."""
        names = {spec.name for spec in self.source.inputs}
        out = {}
        for ranges in self.calibrated_ranges.values():
            out.update({k: v for k, v in ranges.items() if k in names})
        return out

    def torch_batches(self, calib) -> Iterator[tuple]:
        import torch

        for feed in calib.feeds():
            yield tuple(torch.from_numpy(feed[spec.name]) for spec in self.source.inputs)


def open_source_calibration(source: ModelSource, calib, batch_size: int = 32, max_samples: int | None = None,
                            reading: dict | None = None, declared_states: dict | None = None,
                            declared_axes: dict | None = None):
    """``calib`` opened for ``source``'s inputs, read as ``reading`` says (``calibration_reading``); an
    hf: model brings its tokenizer and its longest sequence. The first batch is checked now."""
    reading = reading or {}
    positions = (source.model_info.get("config") or {}).get("max_position_embeddings") if source.kind == "hf" else None

    # each input's sample axis (--sample-axis, else detected); outputs fed back between calls (by name, or --state)
    axes, streams = stream_layout(source, declared_axes, declared_states)
    return open_calibration(calib, source.inputs, batch_size, max_samples,
                            preprocess=reading.get("preprocess"), tokenizer=reading.get("tokenizer"),
                            model_tokenizer=source.tokenizer, axes=axes, streams=streams,
                            max_length=positions if isinstance(positions, int) and not isinstance(positions, bool) else None)


def calibration_reading(config) -> dict:
    """How a config's --calib is read: ``preprocess`` (images) and ``tokenizer`` (text), where set."""
    reading = {"preprocess": getattr(config, "calib_preprocess", None), "tokenizer": getattr(config, "tokenizer", None)}
    return {k: v for k, v in reading.items() if v is not None}


NAMED_FILES = 100


def file_names(calib) -> dict:
    """The calibration files by name (a folder of thousands of images: the first NAMED_FILES, and how many)."""
    names = [p.name for p in calib.files]
    if len(names) <= NAMED_FILES:
        return {"files": names}
    return {"files": names[:NAMED_FILES], "file_count": len(names)}
