"""edgekit: train, quantize, export, benchmark and gate PyTorch models for ARM edge devices.

The Python API is ``edgekit.api`` (``from edgekit.api import quantize, StaticConfig``).
``edgekit.quantize``, ``edgekit.export``, ``edgekit.train`` and ``edgekit.bench`` are subpackages,
so the functions cannot live here under those names. ``import edgekit`` stays light: torch and
onnxruntime load only when a stage runs.
"""

from __future__ import annotations

import importlib
import os

from edgekit._version import __version__

# ONNX Runtime (1.32) writes a telemetry device id and event database under ~/.cache/Microsoft at
# import, in every process that loads it (quantize, bench runners, serve): edgekit writes only the
# files it says it writes. Set before any onnxruntime import; children inherit it. Set the variable
# to 0 yourself to keep ONNX Runtime's default.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

__all__ = ["__version__", "api"]

# names this package once forwarded to the stages: they are in ``edgekit.api`` now
_IN_API = ("train", "quantize", "export", "bench", "gate", "run_pipeline", "load_target", "load_manifest")


def __getattr__(name: str):
    if name == "api":  # ``import edgekit; edgekit.api.quantize(...)`` without importing edgekit.api first
        return importlib.import_module("edgekit.api")
    hint = f"; use `from edgekit.api import {name}`" if name in _IN_API else ""
    # AttributeError also lets ``from edgekit import quantize`` fall back to the subpackage, whatever
    # was imported before: the answer no longer depends on import order
    raise AttributeError(f"module 'edgekit' has no attribute {name!r}{hint}")
