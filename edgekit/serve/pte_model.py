"""An ExecuTorch program (``.pte``) for the server: ExecuTorch's native runtime behind the model
interface of ``edgekit.serve.app`` (``specs``, ``outputs``, ``summary``, ``run``).

The program is memory-planned for its largest shapes: a batch past the planned batch (one big
request, or several stacked by the micro-batcher) runs in chunks of it; any other axis past its
bound is refused with a message naming the bound.
"""

from __future__ import annotations

import sys
from pathlib import Path

from edgekit.errors import InputFileError


class ExecuTorchModel:
    """A ``.pte`` file of an artifact, called with numpy arrays (the method itself takes torch tensors)."""

    def __init__(self, folder: Path, manifest, entry, threads: int | None):
        from edgekit import formats
        from edgekit.serve.inputs import spec_from_dict

        table_entry = formats.get(entry.format)
        ops = table_entry.ops()  # one line naming the extra when executorch is missing
        threads_now = size_threadpool(threads)
        self.method = ops.load_method(folder / entry.path)  # InputFileError for a file that is not a program
        meta = self.method.metadata
        self.bounds = [tuple(int(d) for d in meta.input_tensor_meta(i).sizes()) for i in range(meta.num_inputs())]
        self.specs = [spec_from_dict(s.to_dict()) for s in manifest.inputs]
        if len(self.specs) != len(self.bounds):
            raise InputFileError(f"{folder / entry.path} takes {len(self.bounds)} inputs; its manifest lists {len(self.specs)}")
        self.batch_bound = max(1, min((b[0] for b in self.bounds if b), default=1))
        self.outputs = list(manifest.outputs) or ["output"]
        from importlib import metadata

        runtime = table_entry.board_runtime

        self.summary = {
            "model": manifest.model.get("name"), "task": manifest.task.get("type"), "format": entry.format,
            "path": entry.path, "precision": entry.precision, "bytes": entry.total_bytes, "sha256": entry.sha256,
            "inputs": [{"name": s["name"], "dtype": s["dtype"], "shape": list(s["shape"]) if s["shape"] else None}
                       for s in self.specs],
            "outputs": self.outputs,
            "runtime": f"{runtime} {metadata.version(runtime)} ({threads_now or 'default'} threads)",
        }

    def run(self, feed: dict) -> list:
        import numpy as np
        import torch

        arrays = [np.ascontiguousarray(feed[s["name"]]) for s in self.specs]
        for spec, array, bound in zip(self.specs, arrays, self.bounds):
            if array.ndim != len(bound) or any(got > most for got, most in zip(array.shape[1:], bound[1:])):
                raise ValueError(f"input {spec['name']!r} of shape {list(array.shape)} does not fit the program "
                                 f"(planned for at most {list(bound)})")
        rows = len(arrays[0]) if arrays and arrays[0].ndim else 0
        step = self.batch_bound
        chunks = [arrays] if rows <= step else [[a[i:i + step] for a in arrays] for i in range(0, rows, step)]
        results = [self.method.execute([torch.from_numpy(a) for a in chunk]) for chunk in chunks]
        outs = [torch.cat([r[k] for r in results]) if len(results) > 1 else results[0][k] for k in range(len(results[0]))]
        return [o.detach().float().numpy() if o.is_floating_point() else o.numpy() for o in outs]

    def example_feed(self) -> dict:
        import numpy as np

        return {s["name"]: np.zeros([1 if d is None else d for d in s["shape"]], dtype=s["dtype"]) for s in self.specs}


def size_threadpool(threads: int | None) -> int | None:
    """Size ExecuTorch's process-wide XNNPACK threadpool, only before any program has loaded in this
    process (a loaded delegate keeps a pointer to the pool a resize frees); the size in effect."""
    from edgekit.formats.executorch import native

    fresh = "executorch.extension.pybindings._C" not in sys.modules
    et = native()

    if threads and fresh and hasattr(et, "_unsafe_reset_threadpool"):
        et._unsafe_reset_threadpool(int(threads))
    count = getattr(et, "_threadpool_get_thread_count", None)
    return int(count()) if count is not None else None
