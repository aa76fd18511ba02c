"""TorchScript through torch (int8 files carry the quantized engine their weights were packed for)."""

from __future__ import annotations

import contextlib
import os
import zipfile
from pathlib import Path

from ..errors import BoardError, first_line
from .base import Runtime


class TorchScriptRuntime(Runtime):
    format = "torchscript"
    suffixes = (".pt", ".pth", ".ts", ".ptl", ".torchscript")
    spec_match = "at_most"

    def __init__(self, path: Path, threads: int, engine: str | None = None):
        self.torch = torch = _import_torch()
        path = Path(path)
        if engine:
            supported = list(torch.backends.quantized.supported_engines)
            if engine not in supported:
                raise BoardError(f"quantized engine {engine!r} is not available in this torch (have: {', '.join(supported)})")
            torch.backends.quantized.engine = engine
        if threads:  # None: leave this process's torch thread settings alone
            torch.set_num_threads(threads)
            with contextlib.suppress(RuntimeError):  # only settable before the first parallel work
                torch.set_num_interop_threads(1)
        if not zipfile.is_zipfile(path):
            raise BoardError(f"cannot load {path.name} as TorchScript: not a zip archive (truncated, or another format)")
        try:
            self.module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError/ValueError/... for bad files
            raise BoardError(f"cannot load {path.name} as TorchScript: {first_line(exc)}") from None
        self.module.eval()
        self.info = {"name": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
                     "engine": torch.backends.quantized.engine, "providers": ["cpu"]}

    @staticmethod
    def claims(path: Path) -> bool:
        return zipfile.is_zipfile(path)

    @classmethod
    def preload(cls, threads: int) -> None:
        _import_torch()

    def input_specs(self) -> list[dict]:
        try:
            args = self.module.forward.schema.arguments[1:]  # drop self
        except (AttributeError, RuntimeError):
            return []
        return [{"name": a.name, "shape": None, "dtype": "float32", "dynamic_axes": {}} for a in args]

    def bind(self, arrays: dict):
        return self.module, tuple(self.torch.from_numpy(a) for a in arrays.values())

    def run(self, arrays: list) -> list:
        outs = _flat(self.module(*(self.torch.from_numpy(a) for a in arrays)))
        return [o.detach().float().numpy() if o.is_floating_point() else o.numpy() for o in outs]

    def context(self):
        return self.torch.inference_mode()


def _flat(out) -> list:
    """Every tensor of a module's result, in order, as torch.export flattens it (nested tuples,
    lists and dicts)."""
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _flat(item)]
    return [out]


def _import_torch():
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # quantized-tensor deprecation chatter
    import torch

    return torch


RUNTIME = TorchScriptRuntime
