"""edgekit: train, quantize, export, benchmark and gate PyTorch models for ARM edge devices.

``import edgekit`` stays light: torch and onnxruntime load only when a stage runs.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "train": "edgekit.train.loop:train",
    "quantize": "edgekit.quantize.api:quantize",
    "export": "edgekit.export.api:export",
    "bench": "edgekit.bench.api:bench",
    "gate": "edgekit.gates.evaluate:gate_results",
    "run_pipeline": "edgekit.pipeline:run_pipeline",
    "load_target": "edgekit.targets:load_target",
    "load_manifest": "edgekit.artifacts:load_manifest",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module_name, attr = _LAZY[name].split(":")
        return getattr(importlib.import_module(module_name), attr)
    raise AttributeError(f"module 'edgekit' has no attribute {name!r}")
