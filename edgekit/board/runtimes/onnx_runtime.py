"""ONNX Runtime on the CPU (what a board has: numpy + onnxruntime)."""

from __future__ import annotations

from pathlib import Path

from ..errors import BoardError, first_line
from .base import Runtime

ONNX_DTYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(bool)": "bool",
}


class OnnxRuntime(Runtime):
    format = "onnx"
    suffixes = (".onnx",)
    spec_match = "names"

    def __init__(self, path: Path, threads: int, engine: str | None = None):
        ort = _import_onnxruntime()

        opts = ort.SessionOptions()
        if threads:  # None: ONNX Runtime's default (one per core)
            opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # errors only: ORT's warnings would land in the user's terminal
        try:
            self.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT raises its own pybind exception types
            raise BoardError(f"onnxruntime cannot load {Path(path).name}: {first_line(exc)}") from None
        self.names = [arg.name for arg in self.session.get_inputs()]
        self.output_names = [arg.name for arg in self.session.get_outputs()]
        self.info = {"name": "onnxruntime", "version": ort.__version__, "threads": threads, "engine": None,
                     "providers": self.session.get_providers()}

    @classmethod
    def preload(cls, threads: int) -> None:
        _import_onnxruntime()

    def input_specs(self) -> list[dict]:
        specs = []
        for arg in self.session.get_inputs():
            dims = list(arg.shape or [])
            specs.append({
                "name": arg.name,
                "shape": [d if isinstance(d, int) and d > 0 else None for d in dims],
                "dtype": ONNX_DTYPES.get(arg.type, "float32"),
                "dynamic_axes": {i: (d if isinstance(d, str) else f"dim{i}") for i, d in enumerate(dims)
                                 if not (isinstance(d, int) and d > 0)},
            })
        return specs

    def bind(self, arrays: dict):
        return self.session.run, (None, dict(arrays))

    def run(self, arrays: list) -> list:
        return self.session.run(None, dict(zip(self.names, arrays)))

    def call_order(self, inputs: dict, order: list | None) -> list:
        return list(self.names)


def _import_onnxruntime():
    # ONNX Runtime writes a device id and a database under ~/.cache/Microsoft at import (telemetry):
    # nothing a board or a user asked for
    import os

    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime

    return onnxruntime


RUNTIME = OnnxRuntime
