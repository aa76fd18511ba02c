"""LiteRT (TensorFlow Lite) through ai-edge-litert's interpreter (XNNPACK delegate on the CPU).

edgekit's ``.tflite`` files are converted at batch 1: a batch runs row by row. int8 files take
and give int8 tensors; inputs are quantized and outputs dequantized with the file's own scale
and zero point, so callers always trade float32 arrays.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..errors import BoardError, BoardUsageError, first_line
from .base import Runtime

FILE_IDENTIFIER = b"TFL3"


class TfliteRuntime(Runtime):
    format = "tflite"
    suffixes = (".tflite",)
    spec_match = "at_most"

    def __init__(self, path: Path, threads: int | None, engine: str | None = None):
        path = Path(path)
        if not self.claims(path):
            raise BoardError(f"cannot load {path.name} as a LiteRT model: no TFL3 file identifier (truncated, or "
                             "another format)")
        interpreter_module = _import_litert()
        try:
            with _native_stderr_quiet():  # "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on every load
                self.interpreter = interpreter_module.Interpreter(model_path=str(path), num_threads=threads or None)
                self.interpreter.allocate_tensors()
        except Exception as exc:  # noqa: BLE001 - the interpreter raises ValueError/RuntimeError for bad files
            raise BoardError(f"cannot load {path.name} as a LiteRT model: {first_line(exc)}") from None
        self.inputs = self.interpreter.get_input_details()
        self.outputs = self.interpreter.get_output_details()
        self.info = {"name": "ai-edge-litert", "version": _version(), "threads": threads, "engine": None,
                     "providers": ["cpu", "xnnpack"]}

    @staticmethod
    def claims(path: Path) -> bool:
        try:
            with open(path, "rb") as fh:
                return fh.read(8)[4:8] == FILE_IDENTIFIER
        except OSError:
            return False

    @classmethod
    def preload(cls, threads: int) -> None:
        _import_litert()

    def input_specs(self) -> list[dict]:
        specs = []
        for detail in self.inputs:
            dims = [int(d) for d in detail["shape_signature"]]
            specs.append({"name": detail["name"], "shape": [None if d < 0 else d for d in dims],
                          "dtype": "float32", "dynamic_axes": {i: f"dim{i}" for i, d in enumerate(dims) if d < 0}})
        return specs

    def bind(self, arrays: dict):
        return self.run, (list(arrays.values()),)

    def run(self, arrays: list) -> list:
        import numpy as np

        if len(arrays) != len(self.inputs):
            raise BoardUsageError(f"the LiteRT model takes {len(self.inputs)} inputs, got {len(arrays)}")
        rows = len(arrays[0]) if arrays and np.ndim(arrays[0]) else 0
        step = int(self.inputs[0]["shape"][0]) if len(self.inputs[0]["shape"]) else rows
        if step < 1 or any(len(a) != rows for a in arrays):
            raise BoardUsageError("LiteRT inputs must share their batch size")
        parts: list[list] = [[] for _ in self.outputs]
        for start in range(0, rows, step):
            for detail, array in zip(self.inputs, arrays):
                chunk = np.ascontiguousarray(array[start:start + step], dtype=np.float32)
                if tuple(chunk.shape) != tuple(detail["shape"]):
                    raise BoardUsageError(f"input {detail['name']!r} takes rows of shape {tuple(detail['shape'][1:])}, "
                                          f"got {tuple(chunk.shape[1:])}")
                self.interpreter.set_tensor(detail["index"], _quantized(chunk, detail))
            self.interpreter.invoke()
            for k, detail in enumerate(self.outputs):
                parts[k].append(_dequantized(self.interpreter.get_tensor(detail["index"]), detail))
        return [np.concatenate(p) for p in parts]


@contextlib.contextmanager
def _native_stderr_quiet():
    """File descriptor 2 to /dev/null while the interpreter loads (its C++ log lines); errors still raise."""
    import os
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real descriptor (captured): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _quantized(values, detail):
    import numpy as np

    dtype = np.dtype(detail["dtype"])
    if dtype.kind == "f":
        return values.astype(dtype)
    scale, zero = detail["quantization"]
    info = np.iinfo(dtype)
    return np.clip(np.round(values / scale) + zero, info.min, info.max).astype(dtype)


def _dequantized(values, detail):
    import numpy as np

    if np.dtype(detail["dtype"]).kind == "f":
        return np.array(values, dtype=np.float32, copy=True)
    scale, zero = detail["quantization"]
    return ((values.astype(np.float32) - zero) * scale).astype(np.float32)


def _import_litert():
    try:
        from ai_edge_litert import interpreter
    except ImportError as exc:
        raise BoardError(f"the LiteRT runtime is not installed (pip install ai-edge-litert): {first_line(exc)}") from None
    return interpreter


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ai-edge-litert")
    except Exception:  # noqa: BLE001 - a board's Python without the distribution's metadata
        return "unknown"


RUNTIME = TfliteRuntime
