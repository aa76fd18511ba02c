"""What a quantization handler works with: the float model, its ONNX export, calibration data."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterator

import numpy as np

from edgekit.artifacts import Manifest
from edgekit.targets import Target


@dataclass
class QuantJob:
    folder: Path  # the float checkpoint artifact
    manifest: Manifest
    target: Target
    work: Path  # where handlers write their files
    provenance: dict = field(default_factory=dict)
    calibration_info: dict = field(default_factory=dict)

    @cached_property
    def _model(self):
        from edgekit.train.checkpoint import load_model_from_artifact

        return load_model_from_artifact(self.folder, self.manifest)

    def float_model(self):
        """A fresh copy each call: quantizers rewrite modules in place."""
        import copy

        return copy.deepcopy(self._model)

    def example_inputs(self, batch: int = 2) -> tuple:
        from edgekit.export.reference import example_tensors

        return example_tensors(self.manifest.inputs, batch)

    @cached_property
    def _float_onnx(self) -> Path:
        from edgekit.export.onnx_export import export_onnx

        path = self.work / ".float.onnx"
        export_onnx(
            self.float_model(), self.example_inputs(), self.manifest.inputs, self.manifest.outputs,
            path, self.target.onnx_opset,
        )
        return path

    def float_onnx(self) -> Path:
        return self._float_onnx

    def calibration(self, config):
        from edgekit.quantize.calibration import open_calibration

        if len(self.manifest.inputs) != 1:
            from edgekit.errors import UsageError

            raise UsageError("static calibration from files supports single-input models")
        calib = open_calibration(config.calib, self.manifest.inputs[0], config.calib_batch_size, config.calib_max_samples)
        self.calibration_info = {
            "source": str(Path(config.calib)),
            "files": [p.name for p in calib.files],
            "samples": calib.count(),
            "batch_size": config.calib_batch_size,
            "method": config.calibrate_method,
        }
        return calib

    def torch_batches(self, calib) -> Iterator[tuple]:
        import torch

        for batch in calib.batches():
            yield (torch.from_numpy(batch),)

    def onnx_batches(self, calib) -> Iterator[dict[str, np.ndarray]]:
        name = self.manifest.inputs[0].name
        for batch in calib.batches():
            yield {name: batch}

    def save_torchscript(self, module, rel: str, engine: str) -> Path:
        from edgekit.export import torchscript_backend
        from edgekit.quantize.torch_backend import quantized_engine

        path = self.work / rel
        with quantized_engine(engine):
            traced = torchscript_backend.trace(module, self.example_inputs())
            torchscript_backend.save(traced, path, {**self.provenance, "quantized_engine": engine})
        return path
