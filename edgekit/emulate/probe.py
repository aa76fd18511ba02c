#!/usr/bin/env python3
"""edgekit emulation probe: run one model file on the inputs stored in a reference.npz.

STANDALONE. ``edgekit verify --emulate`` copies this file next to a bundle inside the emulated
aarch64 rootfs and runs it there with the bundle's own Python environment; it runs the same file
on the host, so both sides execute identical code. Module level imports only the standard
library; numpy and the runtime load in ``main``. Never import edgekit here.

    python probe.py MODEL REFERENCE.npz OUT.npz [--format onnx|torchscript|executorch] [--engine NAME]
        [--threads N] [--inputs NAME,NAME...]

Writes ``b{batch}/output`` for every ``b{batch}/input/...`` group of REFERENCE.npz into OUT.npz
(atomically) and prints one JSON object about the run on stdout. Exit codes: 0 ok, 1 the model
failed to load or run, 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import tempfile

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
FORMATS = ("onnx", "torchscript", "executorch")
SUFFIX_FORMATS = {".onnx": "onnx", ".pte": "executorch"}  # anything else: TorchScript


class ProbeError(Exception):
    pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_cases(path: str) -> dict:
    """{batch: {input name: array}} from ``b{batch}/input/{name}`` keys, in stored order."""
    import numpy as np

    cases: dict = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            parts = key.split("/")
            if len(parts) == 3 and parts[1] == "input" and parts[0][:1] == "b" and parts[0][1:].isdigit():
                cases.setdefault(int(parts[0][1:]), {})[parts[2]] = data[key]
    if not cases:
        raise ProbeError(f"{path} holds no b<batch>/input/<name> arrays")
    return dict(sorted(cases.items()))


def onnx_runner(model: str, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        raise ProbeError(f"cannot load {model}: {_first_line(exc)}") from None

    def run(inputs: dict, order: list):
        return session.run(None, {name: inputs[name] for name in order or inputs})[0]

    return run, {"name": "onnxruntime", "version": ort.__version__, "providers": session.get_providers()}


def torchscript_runner(model: str, threads: int, engine: str | None):
    import torch

    if engine:
        if engine not in torch.backends.quantized.supported_engines:
            raise ProbeError(f"quantized engine {engine!r} is not available in this torch")
        torch.backends.quantized.engine = engine
    torch.set_num_threads(threads)
    try:
        module = torch.jit.load(model, map_location="cpu").eval()
    except Exception as exc:  # noqa: BLE001
        raise ProbeError(f"cannot load {model}: {_first_line(exc)}") from None

    def run(inputs: dict, order: list):
        arrays = [inputs[name] for name in order] if order else list(inputs.values())
        with torch.inference_mode():
            out = module(*(torch.from_numpy(a) for a in arrays))
        out = out[0] if isinstance(out, (tuple, list)) else out
        return out.float().numpy()

    return run, {"name": "torch", "version": torch.__version__, "engine": torch.backends.quantized.engine}


def executorch_runner(model: str, threads: int):
    """A ``.pte`` program through ExecuTorch's runtime; batches past its planned batch run in chunks."""
    with open(model, "rb") as fh:
        head = fh.read(8)
    if len(head) < 8 or head[4:6] != b"ET" or not head[6:8].isdigit():  # the flatbuffer file identifier
        raise ProbeError(f"cannot load {model}: not an ExecuTorch program (no ExecuTorch file identifier)")
    fresh = "executorch.extension.pybindings._C" not in sys.modules
    with _native_stderr([]):  # the runtime logs its CPU probing on stderr
        import numpy as np
        import torch

        et = _executorch_native()

        if fresh and hasattr(et, "_unsafe_reset_threadpool"):  # the pool is process-wide: before any load only
            et._unsafe_reset_threadpool(threads)
        count = getattr(et, "_threadpool_get_thread_count", lambda: None)()
    log: list = []
    with _native_stderr(log):
        try:
            program, method = _load_forward(et, model)
            meta = method.method_meta()
            sizes = [meta.input_tensor_meta(i).sizes() for i in range(meta.num_inputs())]
            error = None
        except Exception as exc:  # noqa: BLE001 - RuntimeError with an error code; the cause is logged
            error = _with_cause(exc, log)
    if error is not None:
        raise ProbeError(f"cannot load {model}: {error}")
    step = max(min((int(s[0]) for s in sizes if len(s)), default=1), 1)

    def run(inputs: dict, order: list):
        arrays = [np.ascontiguousarray(inputs[name]) for name in order] if order else list(inputs.values())
        rows = len(arrays[0]) if arrays and arrays[0].ndim else 0
        chunks = [arrays] if rows <= step else [[a[i:i + step] for a in arrays] for i in range(0, rows, step)]
        run_log: list = []
        with _native_stderr(run_log):
            try:
                outs = [method([torch.from_numpy(a) for a in chunk])[0].float().numpy() for chunk in chunks]
                failure = None
            except Exception as exc:  # noqa: BLE001
                failure = _with_cause(exc, run_log)
        if failure is not None:
            raise RuntimeError(failure)
        return np.concatenate(outs) if len(outs) > 1 else outs[0]

    run.program = program  # keeps the program alive as long as its method
    return run, {"name": "executorch", "version": _dist_version("executorch"), "threads": count}


def _executorch_native():
    """ExecuTorch's native runtime module. Its public wrappers (``executorch.runtime``,
    ``portable_lib``) also import the export toolchain, only to warn that the API is experimental:
    about 3 s and 140 MB more on a host, which a board pays too."""
    import torch  # noqa: F401 - loads libtorch, which the extension links against

    try:
        from executorch.extension.pybindings import _C as module
    except ImportError:  # another executorch layout: the public wrapper re-exports the same functions
        from executorch.extension.pybindings import portable_lib as module
    return module


def _load_forward(et, path):
    """(program, its forward method): the method must not outlive its program."""
    program = et._load_program(str(path), enable_etdump=False, debug_buffer_size=0,
                               program_verification=et.Verification.InternalConsistency)
    return program, program.load_method("forward")


def _with_cause(exc: BaseException, log: list) -> str:
    """The exception's first line and the runtime's first logged line (the cause behind its error code)."""
    cause = next((line for line in log if line.startswith("[")), "")
    return _first_line(exc) + (f" ({cause[:200]})" if cause else "")


def _dist_version(name: str):
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return None


@contextlib.contextmanager
def _native_stderr(lines: list):
    """What the runtime logs meanwhile goes into ``lines`` (ExecuTorch's bindings log to sys.stderr,
    native code to fd 2); passed through with EDGEKIT_DEBUG."""
    if os.environ.get("EDGEKIT_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved_fd, saved_stream, buffer = os.dup(2), sys.stderr, io.StringIO()
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            sys.stderr = buffer
            try:
                yield
            finally:
                sys.stderr = saved_stream
                os.dup2(saved_fd, 2)
                sink.seek(0)
                text = buffer.getvalue() + sink.read(1 << 20).decode("utf-8", "replace")
                lines.extend(x.strip() for x in text.splitlines() if x.strip())
    finally:
        os.close(saved_fd)


def save_npz(path: str, arrays: dict) -> None:
    import numpy as np

    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".probe.", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def probe(args) -> dict:
    import numpy as np

    fmt = args.format or SUFFIX_FORMATS.get(os.path.splitext(args.model)[1].lower(), "torchscript")
    if fmt == "onnx":
        run, runtime = onnx_runner(args.model, args.threads)
    elif fmt == "executorch":
        run, runtime = executorch_runner(args.model, args.threads)
    else:
        run, runtime = torchscript_runner(args.model, args.threads, args.engine)
    order = [name for name in (args.inputs or "").split(",") if name]
    outputs = {}
    for batch, inputs in read_cases(args.reference).items():
        try:
            outputs[f"b{batch}/output"] = np.asarray(run(inputs, order))
        except Exception as exc:  # noqa: BLE001 - runtime-specific exception types
            raise ProbeError(f"inference at batch {batch} failed: {_first_line(exc)}") from None
    save_npz(args.out, outputs)
    return {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "runtime": runtime,
        "format": fmt,
        "threads": args.threads,
        "batches": sorted(int(k[1:].split("/")[0]) for k in outputs),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="probe.py", description="Run a model on reference inputs.")
    parser.add_argument("model")
    parser.add_argument("reference")
    parser.add_argument("out")
    parser.add_argument("--format", choices=FORMATS)
    parser.add_argument("--engine")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--inputs", help="comma-separated input names in call order")
    args = parser.parse_args(argv)
    try:
        info = probe(args)
    except ProbeError as exc:
        print(f"Error: {_first_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except ImportError as exc:
        print(f"Error: a runtime is missing: {_first_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError) as exc:
        print(f"Error: {_first_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(json.dumps(info) + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
