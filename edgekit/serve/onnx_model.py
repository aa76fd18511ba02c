"""An ONNX model for the server: an onnxruntime session and the manifest's input spec.

Standalone: the standard library, numpy and onnxruntime only (copied into bundles).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .inputs import spec_from_dict


class OnnxModel:
    def __init__(self, path: str | Path, manifest: dict | None = None, threads: int | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = threads
        self.path = Path(path)
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        manifest = manifest or {}
        listed = manifest.get("inputs") or []
        self.specs = [spec_from_dict(s) for s in listed] if listed else [_spec_of(i) for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        entry = next((f for f in manifest.get("files") or [] if f.get("path") == self.path.name), {})
        self.summary = {
            "model": (manifest.get("model") or {}).get("name") or self.path.stem,
            "task": (manifest.get("task") or {}).get("type"),
            "format": "onnx", "path": self.path.name, "precision": entry.get("precision", "fp32"),
            "bytes": self.path.stat().st_size, "sha256": entry.get("sha256", ""),
            "inputs": [{"name": s["name"], "dtype": s["dtype"], "shape": list(s["shape"]) if s["shape"] else None}
                       for s in self.specs],
            "outputs": self.outputs, "runtime": f"onnxruntime {ort.__version__}",
        }

    def run(self, feed: dict) -> list:
        return self.session.run(None, feed)

    def example_feed(self) -> dict:
        """Zeros of every input's shape (dynamic axes 1): the warm-up call."""
        return {s["name"]: np.zeros([1 if d is None else d for d in s["shape"] or (1,)], dtype=s["dtype"])
                for s in self.specs}


_ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
              "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
              "tensor(bool)": "bool"}


def _spec_of(node) -> dict:
    shape = [d if isinstance(d, int) else None for d in node.shape]
    axes = {i: (d if isinstance(d, str) else f"dim{i}") for i, d in enumerate(node.shape) if not isinstance(d, int)}
    return spec_from_dict({"name": node.name, "shape": shape, "dtype": _ORT_TYPES.get(node.type, "float32"),
                           "dynamic_axes": axes})


def read_manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else {}
