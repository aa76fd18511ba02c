"""An ExecuTorch program (``.pte``) through ExecuTorch's Python runtime (the method takes torch tensors).

The program is memory-planned for its largest shapes: inputs past those bounds are refused before
the runtime sees them (it would refuse with an error code only); batches past the planned batch
run in chunks of it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import BoardError, BoardUsageError, first_line
from ..facts import dist_version
from ..manifest import is_executorch_program
from ..nativelog import native_detail, native_stderr
from .base import Runtime, in_chunks

# ExecuTorch ScalarType codes (as c10's) of the input dtypes a runner can make.
ET_DTYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
             7: "float64", 11: "bool"}
_NATIVE_MODULE = "executorch.extension.pybindings._C"


class ExecuTorchRuntime(Runtime):
    format = "executorch"
    suffixes = (".pte",)
    spec_match = "count"

    def __init__(self, path: Path, threads: int, engine: str | None = None):
        path = Path(path)
        if not is_executorch_program(path):
            raise BoardError(f"cannot load {path.name} as an ExecuTorch program: no ExecuTorch file identifier "
                             "(truncated, or another format)")
        self.log: list[str] = []  # what the runtime wrote on stderr while loading and on the first run
        self.info = import_executorch(threads)
        failure = None
        with native_stderr(self.log):
            et = executorch_native()
            try:
                self.program = et._load_program(str(path), enable_etdump=False, debug_buffer_size=0,
                                                program_verification=et.Verification.InternalConsistency)
                self.method = self.program.load_method("forward")  # must not outlive self.program
                meta = self.method.method_meta()
                self.planned = [meta.input_tensor_meta(i) for i in range(meta.num_inputs())]
            except Exception as exc:  # noqa: BLE001 - the runtime raises RuntimeError/ValueError/...
                failure = first_line(exc)
        if failure is not None:
            raise BoardError(f"cannot load {path.name} as an ExecuTorch program: {failure}{native_detail(self.log)}")
        self.bounds = [tuple(int(d) for d in info.sizes()) for info in self.planned]
        self.batch_bound = max(1, min((b[0] for b in self.bounds if b), default=1))

    @staticmethod
    def claims(path: Path) -> bool:
        return is_executorch_program(path)

    @classmethod
    def preload(cls, threads: int) -> None:
        import_executorch(threads)

    def input_specs(self) -> list[dict]:
        """input0..N at the planned sizes; axis 0 taken as the batch axis (the manifest, when there is one, wins)."""
        specs = []
        for index, info in enumerate(self.planned):
            sizes = [int(d) for d in info.sizes()]
            code = int(info.dtype())
            specs.append({
                "name": f"input{index}",
                "shape": [None, *sizes[1:]] if sizes else [],
                "dtype": ET_DTYPES.get(code, f"ExecuTorch scalar type {code}"),
                "dynamic_axes": {0: "batch"} if sizes else {},
                "bounded": True,  # the planned sizes are upper bounds
            })
        return specs

    def check_fits(self, names: list, arrays: list, batch_too: bool = True) -> None:
        """BoardUsageError for an input the program was not planned for (rank, an axis past its bound, dtype)."""
        import numpy as np

        if len(arrays) != len(self.planned):
            raise BoardUsageError(f"the program takes {len(self.planned)} inputs; {len(arrays)} given")
        for name, array, info, bound in zip(names, arrays, self.planned, self.bounds):
            want = ET_DTYPES.get(int(info.dtype()))
            axes = zip(array.shape, bound) if batch_too else zip(array.shape[1:], bound[1:])
            if array.ndim != len(bound) or any(got > most for got, most in axes):
                raise BoardUsageError(
                    f"input {name!r} of shape {'x'.join(map(str, array.shape))} does not fit the program, planned "
                    f"for at most {'x'.join(map(str, bound))} (export it with larger bounds, or lower --batch/--shape)")
            if want is None or array.dtype != np.dtype(want):
                raise BoardUsageError(f"input {name!r} is {array.dtype}; the program takes {want or info.dtype()}")

    def bind(self, arrays: dict):
        import numpy as np
        import torch

        values = [np.ascontiguousarray(a) for a in arrays.values()]
        self.check_fits(list(arrays), values)
        return self.method, ([torch.from_numpy(a) for a in values],)

    def run(self, arrays: list) -> list:
        import numpy as np
        import torch

        arrays = [np.ascontiguousarray(a) for a in arrays]
        self.check_fits([f"input{i}" for i in range(len(arrays))], arrays, batch_too=False)

        def run_chunk(chunk: list) -> list:
            outs = self.method([torch.from_numpy(a) for a in chunk])
            return [o.detach().float().numpy() if o.is_floating_point() else o.numpy() for o in outs]

        try:
            return in_chunks(run_chunk, arrays, self.batch_bound)
        except RuntimeError as exc:
            raise BoardError(f"ExecuTorch could not run the program: {first_line(exc)}{native_detail(self.log)}") from None

    def context(self):
        return native_stderr(self.log)


def import_executorch(threads: int) -> dict:
    """Import ExecuTorch's runtime and size its XNNPACK threadpool; the runtime facts for the result.

    The pool is one per process and XNNPACK keeps a pointer to it in every loaded delegate, so it
    is resized only before the first program loads (the native module not yet imported): a resize
    under a loaded delegate would free the pool it uses. Otherwise the size in effect is recorded.
    """
    fresh = _NATIVE_MODULE not in sys.modules
    log: list[str] = []
    with native_stderr(log):  # its CPU probing logs to stderr
        try:
            et = executorch_native()
        except ImportError as exc:
            raise BoardError(f"the ExecuTorch runtime is not installed here (pip install executorch): {first_line(exc)}") from None

        count = getattr(et, "_threadpool_get_thread_count", None)
        reset = getattr(et, "_unsafe_reset_threadpool", None)
        info = {"name": "executorch", "version": dist_version("executorch"), "threads": None, "engine": None,
                "providers": [b for b in ("XnnpackBackend",) if et._is_available(backend_name=b)]}
        if count is None or reset is None:
            info["threads_note"] = "this executorch cannot size its threadpool; it uses its default (one per performance core)"
            return info
        if threads and count() != threads:
            if fresh:
                reset(threads)
            else:
                info["threads_note"] = "the threadpool was in use in this process already; not resized"
        info["threads"] = int(count())
    return info


def executorch_native():
    """ExecuTorch's native runtime module. Its public wrappers (``executorch.runtime``,
    ``portable_lib``) also import the export toolchain, only to warn that the API is experimental:
    about 3 s and 140 MB more on a host, which a board pays too (and which peak RSS would count)."""
    import torch  # noqa: F401 - loads libtorch, which the extension links against

    try:
        from executorch.extension.pybindings import _C as module
    except ImportError:  # another executorch layout: the public wrapper re-exports the same functions
        from executorch.extension.pybindings import portable_lib as module
    return module


RUNTIME = ExecuTorchRuntime
