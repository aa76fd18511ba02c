#!/usr/bin/env python3
"""edgekit emulation probe: run one model file on the inputs stored in a reference.npz.

STANDALONE. ``edgekit verify --emulate`` copies this file next to a bundle inside the emulated
aarch64 rootfs and runs it there with the bundle's own Python environment; it runs the same file
on the host, so both sides execute identical code. Module level imports only the standard
library; numpy and the runtime load in ``main``. Never import edgekit here.

    python probe.py MODEL REFERENCE.npz OUT.npz [--format onnx|torchscript] [--engine NAME]
        [--threads N] [--inputs NAME,NAME...]

Writes ``b{batch}/output`` for every ``b{batch}/input/...`` group of REFERENCE.npz into OUT.npz
(atomically) and prints one JSON object about the run on stdout. Exit codes: 0 ok, 1 the model
failed to load or run, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


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

    fmt = args.format or ("onnx" if args.model.endswith(".onnx") else "torchscript")
    if fmt == "onnx":
        run, runtime = onnx_runner(args.model, args.threads)
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
    parser.add_argument("--format", choices=("onnx", "torchscript"))
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
