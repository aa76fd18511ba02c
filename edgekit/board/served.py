"""A board runtime behind the server's model interface: ``specs``, ``outputs``, ``summary``, ``run``,
``example_feed`` (what ``edgekit.serve.app.create_app`` serves, on the host and in a bundle's serve.py).

The specs come from the manifest when it lists the inputs, else from the model itself; ``spec_of``
(the server's own normaliser) turns each into the form its request parser checks against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .errors import BoardUsageError
from .runtimes import open_model


class ServedModel:
    def __init__(self, runtime, manifest: dict, path: Path, spec_of: Callable[[dict], dict]):
        self.runtime = runtime
        self.path = Path(path)
        listed = [s for s in manifest.get("inputs") or [] if isinstance(s, dict)]
        raw = listed or [{key: value for key, value in s.items() if key != "bounded"} for s in runtime.input_specs()]
        self.specs = [spec_of(spec) for spec in raw]
        self.names = [spec["name"] for spec in self.specs]
        self.outputs = [str(o) for o in manifest.get("outputs") or []] or list(getattr(runtime, "output_names", [])) \
            or ["output"]
        entry = next((f for f in manifest.get("files") or [] if isinstance(f, dict) and f.get("path") == self.path.name), {})
        info = runtime.info
        threads = info.get("threads")
        self.summary = {
            "model": (manifest.get("model") or {}).get("name") or self.path.stem,
            "task": (manifest.get("task") or {}).get("type"),
            "format": runtime.format, "path": self.path.name, "precision": entry.get("precision", "fp32"),
            "bytes": self.path.stat().st_size, "sha256": entry.get("sha256", ""),
            "inputs": [{"name": s["name"], "dtype": s["dtype"], "shape": list(s["shape"]) if s["shape"] else None}
                       for s in self.specs],
            "outputs": self.outputs,
            "runtime": f"{info.get('name')} {info.get('version')}" + (f" ({threads} threads)" if threads else ""),
        }

    @classmethod
    def open(cls, path, manifest: dict, fmt: str, threads: int | None, spec_of: Callable[[dict], dict],
             engine: str | None = None) -> "ServedModel":
        return cls(open_model(fmt, Path(path), threads, engine), manifest, Path(path), spec_of)

    def run(self, feed: dict) -> list:
        """Every output for ``feed`` (arrays by input name); ValueError for an input the model was not
        made for (the server answers 422)."""
        import numpy as np

        order = self.runtime.call_order(feed, self.names)  # the runtime's own order (ONNX: its graph's)
        arrays = [np.ascontiguousarray(feed[name]) for name in order]
        try:
            with self.runtime.context():
                return self.runtime.run(arrays)
        except BoardUsageError as exc:
            raise ValueError(str(exc)) from None

    def example_feed(self) -> dict:
        """Zeros of every input's shape (dynamic axes 1): the warm-up call."""
        import numpy as np

        return {s["name"]: np.zeros([1 if d is None else d for d in s["shape"] or (1,)], dtype=s["dtype"])
                for s in self.specs}


def read_manifest(folder: Path) -> dict:
    """manifest.json beside a bundled model ({} when there is none)."""
    from .manifest import read_json_object

    path = Path(folder) / "manifest.json"
    return read_json_object(path) if path.is_file() else {}
