"""One class per runtime, one interface (``Runtime`` in base.py); ``open_model`` picks the class.

A runtime module imports its runtime only when a model is opened, so importing this package
costs nothing on a board that has only one of them installed.
"""

from __future__ import annotations

import importlib
from pathlib import Path

# format -> "module:class" (relative to this package): the table the board scripts use.
# Content sniffing (``detect``) tries them in this order: a .pte before a zip (TorchScript).
RUNTIMES = {
    "onnx": "onnx_runtime:OnnxRuntime",
    "executorch": "executorch_runtime:ExecuTorchRuntime",
    "torchscript": "torchscript_runtime:TorchScriptRuntime",
}


def detect(path) -> str | None:
    """The format of the file at ``path``: by its suffix, else by its content; None when no runtime knows it."""
    classes = [runtime_class(fmt) for fmt in RUNTIMES]
    suffix = Path(path).suffix.lower()
    for cls in classes:
        if suffix in cls.suffixes:
            return cls.format
    return next((cls.format for cls in classes if cls.claims(Path(path))), None)


def runtime_class(fmt: str):
    module, _, name = RUNTIMES[fmt].partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def open_model(fmt: str, path, threads: int, engine: str | None = None):
    """The model file at ``path`` loaded by ``fmt``'s runtime (BoardError when it will not load)."""
    return runtime_class(fmt)(path, threads, engine)
