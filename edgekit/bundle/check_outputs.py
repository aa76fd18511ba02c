#!/usr/bin/env python3
"""edgekit output check: run a bundle's model on reference.npz's inputs, compare with the float model.

STANDALONE. Copied into device bundles and run on boards (or emulators) that have only python +
numpy + onnxruntime (or torch, or torch + executorch for a ``.pte``): standard library at module
level, never edgekit.

    python3 check_outputs.py [--model FILE] [--format onnx|torchscript|executorch] [--reference FILE]
        [--engine ENGINE] [--threads N] [--min-cosine X] [--min-top1 X] [--max-abs X] [--json OUT]

Without --model it reads bundle.json (else manifest.json) beside this script. Prints one JSON
document to stdout (or writes --json), then one plain verdict line, the last line of stdout:
``PASS: ...`` or ``FAIL: ...`` (``read_output`` splits the two):

    {"schema": "edgekit.check_outputs", "schema_version": 1, "model": {path, format, sha256},
     "runtime": {name, version, threads, engine}, "machine": "aarch64", "python": "3.11.2",
     "batches": {"1": {"max_abs", "cosine", "top1_agreement", "outputs_sha256", "shape"}, "7": ...},
     "max_abs": worst, "cosine": worst, "top1_agreement": worst, "outputs_sha256": all batches,
     "ok": bool, "failures": [..]}

``outputs_sha256`` hashes the model's float32 outputs (little-endian, C order): equal hashes on
host and board mean bit-identical results; different CPUs may legitimately differ in the last
bits, which ``max_abs``/``cosine`` against the float reference measure. Exit codes: 0 ok (or no
limits given), 1 a limit broken or the model failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

SCHEMA = "edgekit.check_outputs"
SCHEMA_VERSION = 1
HERE = Path(__file__).resolve().parent
FORMATS = ("onnx", "torchscript", "executorch")
SUFFIX_FORMATS = {".onnx": "onnx", ".pte": "executorch"}  # anything else: TorchScript


class UsageProblem(Exception):
    pass


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageProblem(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageProblem(f"{path} must hold a JSON object")
    return data


def describe(folder: Path, model: str | None, fmt: str | None) -> tuple[Path, str, dict, list[str]]:
    """(model path, format, the manifest's entry for it, the manifest's input names in order)."""
    manifest = _load_json(folder / "manifest.json") if (folder / "manifest.json").is_file() else {}
    entries = [e for e in manifest.get("files") or [] if isinstance(e, dict)]
    if model is not None:  # from the command line: relative to the working folder
        path = Path(model).resolve()
    elif (folder / "bundle.json").is_file():
        bundle = _load_json(folder / "bundle.json")
        path, fmt = folder / str(bundle.get("model")), fmt or bundle.get("format")
    elif len(entries) == 1:
        path = folder / str(entries[0].get("path"))
    else:
        raise UsageProblem(f"no bundle.json in {folder} and its manifest does not list exactly one model; pass --model")
    if not path.is_file():
        raise UsageProblem(f"model file not found: {path}")
    entry = next((e for e in entries if (folder / str(e.get("path", ""))).resolve() == path.resolve()), {})
    fmt = fmt or entry.get("format") or SUFFIX_FORMATS.get(path.suffix.lower(), "torchscript")
    if fmt not in FORMATS:
        raise UsageProblem(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    inputs = [str(spec.get("name")) for spec in manifest.get("inputs") or [] if isinstance(spec, dict)]
    return path, fmt, entry, inputs


def read_reference(path: Path) -> dict[int, tuple[dict, object]]:
    """{batch: ({input name: array}, float output)} from reference.npz."""
    import numpy as np

    if not path.is_file():
        raise UsageProblem(f"reference data not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            items = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise UsageProblem(f"cannot read {path}: {exc}") from None
    cases: dict[int, tuple[dict, object]] = {}
    for key, value in items.items():
        parts = key.split("/")
        if len(parts) < 2 or not parts[0].startswith("b") or not parts[0][1:].isdigit():
            raise UsageProblem(f"{path}: unexpected array {key!r}")
        batch = int(parts[0][1:])
        inputs, output = cases.get(batch, ({}, None))
        if parts[1] == "input" and len(parts) == 3:
            inputs[parts[2]] = value
        elif parts[1] == "output":
            output = value
        else:
            raise UsageProblem(f"{path}: unexpected array {key!r}")
        cases[batch] = (inputs, output)
    if not cases or any(out is None or not ins for ins, out in cases.values()):
        raise UsageProblem(f"{path} lacks inputs or outputs for some batch")
    return dict(sorted(cases.items()))


def onnx_predictor(path: Path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])

    def predict(inputs: dict, order: list[str]):
        return session.run(None, dict(inputs))[0]

    return predict, {"name": "onnxruntime", "version": ort.__version__, "threads": threads, "engine": None}


def torchscript_predictor(path: Path, threads: int, engine: str | None):
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # quantized-tensor deprecation chatter
    import torch

    if engine:
        if engine not in torch.backends.quantized.supported_engines:
            raise RuntimeError(f"quantized engine {engine!r} is not available in this torch")
        torch.backends.quantized.engine = engine
    torch.set_num_threads(threads)
    module = torch.jit.load(str(path), map_location="cpu").eval()

    def predict(inputs: dict, order: list[str]):
        names = [n for n in order if n in inputs] or list(inputs)
        with torch.inference_mode():
            out = module(*(torch.from_numpy(inputs[n]) for n in names))
        out = out[0] if isinstance(out, (tuple, list)) else out
        return out.float().numpy()

    return predict, {"name": "torch", "version": torch.__version__, "threads": threads,
                     "engine": torch.backends.quantized.engine}


def executorch_predictor(path: Path, threads: int):
    """A ``.pte`` program through ExecuTorch's runtime (torch tensors in); batches past the
    program's planned batch run in chunks of it, the way edgekit's own predictor runs them."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    if len(head) < 8 or head[4:6] != b"ET" or not head[6:8].isdigit():  # the flatbuffer file identifier
        raise RuntimeError(f"{path.name} is not an ExecuTorch program (no ExecuTorch file identifier)")
    fresh = "executorch.extension.pybindings._C" not in sys.modules
    with _native_stderr([]):  # the runtime logs its CPU probing there (and the causes of its error codes)
        import numpy as np
        import torch

        et = _executorch_native()

        if fresh and hasattr(et, "_unsafe_reset_threadpool"):  # only before any program is loaded
            et._unsafe_reset_threadpool(threads)
        count = getattr(et, "_threadpool_get_thread_count", lambda: None)()
    log: list[str] = []
    with _native_stderr(log):
        try:
            program, method = _load_forward(et, path)
            meta = method.method_meta()
            sizes = [meta.input_tensor_meta(i).sizes() for i in range(meta.num_inputs())]
            batch_bound = min((int(s[0]) for s in sizes if len(s)), default=1)
            error = None
        except Exception as exc:  # noqa: BLE001 - RuntimeError with an error code; the cause is logged
            error = _failure(exc, log)
    if error is not None:
        raise RuntimeError(f"cannot load {path.name} as an ExecuTorch program: {error}")

    def predict(inputs: dict, order: list[str]):
        names = [n for n in order if n in inputs] or list(inputs)
        arrays = [np.ascontiguousarray(inputs[n]) for n in names]
        rows = len(arrays[0]) if arrays and arrays[0].ndim else 0
        step = max(batch_bound, 1)
        chunks = [arrays] if rows <= step else [[a[i:i + step] for a in arrays] for i in range(0, rows, step)]
        run_log: list[str] = []
        with _native_stderr(run_log):
            try:
                outs = [method([torch.from_numpy(a) for a in chunk])[0].float().numpy() for chunk in chunks]
                failure = None
            except Exception as exc:  # noqa: BLE001 - as above
                failure = _failure(exc, run_log)
        if failure is not None:
            raise RuntimeError(f"ExecuTorch could not run {path.name}: {failure}")
        return np.concatenate(outs) if len(outs) > 1 else outs[0]

    predict.program = program  # keeps the program alive as long as its method
    return predict, {"name": "executorch", "version": _dist_version("executorch"), "threads": count, "engine": None}


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


def _failure(exc: BaseException, log: list[str]) -> str:
    """The exception's first line, with the runtime's first logged line (the cause behind its error code)."""
    text = str(exc).strip()
    cause = next((line for line in log if line.startswith("[")), "")
    return (text.splitlines()[0] if text else type(exc).__name__) + (f" ({cause[:200]})" if cause else "")


def _dist_version(name: str) -> str | None:
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


def compare(got, want) -> dict:
    import numpy as np

    got = np.ascontiguousarray(np.asarray(got, dtype="<f4"))
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise RuntimeError(f"output shape {list(got.shape)} differs from the reference's {list(want.shape)}")
    a, b = got.astype(np.float64).ravel(), want.ravel()
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(a @ b / norms) if norms > 0 else (1.0 if not a.any() and not b.any() else 0.0)
    top1 = None
    if got.ndim >= 2 and got.shape[-1] > 1:
        top1 = float(np.mean(np.argmax(got, axis=-1) == np.argmax(want, axis=-1)))
    return {
        "max_abs": float(np.max(np.abs(a - b))) if a.size else 0.0,
        "cosine": cosine,
        "top1_agreement": top1,
        "outputs_sha256": hashlib.sha256(got.tobytes()).hexdigest(),
        "shape": [int(d) for d in got.shape],
    }


def check(args) -> dict:
    folder = Path(args.model).resolve().parent if args.model else HERE
    model, fmt, entry, order = describe(folder, args.model, args.format)
    reference = Path(args.reference) if args.reference else folder / "reference.npz"
    cases = read_reference(reference)
    engine = args.engine or (entry.get("details") or {}).get("quantized_engine")
    if fmt == "onnx":
        predict, runtime = onnx_predictor(model, args.threads)
    elif fmt == "executorch":
        predict, runtime = executorch_predictor(model, args.threads)
    else:
        predict, runtime = torchscript_predictor(model, args.threads, engine)
    digest = hashlib.sha256()
    with open(model, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    batches, all_outputs = {}, hashlib.sha256()
    for batch, (inputs, want) in cases.items():
        result = compare(predict(inputs, order), want)
        batches[str(batch)] = result
        all_outputs.update(bytes.fromhex(result["outputs_sha256"]))
    top1s = [b["top1_agreement"] for b in batches.values() if b["top1_agreement"] is not None]
    doc = {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "model": {"path": model.name, "format": fmt, "sha256": digest.hexdigest()},
        "runtime": runtime, "machine": platform.machine(), "python": platform.python_version(),
        "batches": batches,
        "max_abs": max(b["max_abs"] for b in batches.values()),
        "cosine": min(b["cosine"] for b in batches.values()),
        "top1_agreement": min(top1s) if top1s else None,
        "outputs_sha256": all_outputs.hexdigest(),
    }
    failures = []
    if args.max_abs is not None and not doc["max_abs"] <= args.max_abs:
        failures.append(f"max_abs {doc['max_abs']:.6g} > {args.max_abs:g}")
    if args.min_cosine is not None and not doc["cosine"] >= args.min_cosine:
        failures.append(f"cosine {doc['cosine']:.6f} < {args.min_cosine:g}")
    if args.min_top1 is not None and doc["top1_agreement"] is not None and doc["top1_agreement"] < args.min_top1:
        failures.append(f"top1_agreement {doc['top1_agreement']:.4f} < {args.min_top1:g}")
    doc["ok"], doc["failures"] = not failures, failures
    return doc


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageProblem(message)


def parse_args(argv):
    p = _Parser(prog="check_outputs.py", description="Compare a bundle's model outputs with the float reference.")
    p.add_argument("--model", help="model file (default: bundle.json's, beside this script)")
    p.add_argument("--format", choices=FORMATS, help="runtime (default: from the manifest or the file name)")
    p.add_argument("--reference", help="reference .npz (default: reference.npz beside the model)")
    p.add_argument("--engine", help="torch quantized engine (default: the manifest's)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    p.add_argument("--max-abs", type=float, help="fail when the largest absolute difference is above this")
    p.add_argument("--min-cosine", type=float, help="fail when the cosine similarity is below this")
    p.add_argument("--min-top1", type=float, help="fail when top-1 agreement (0..1) is below this")
    p.add_argument("--json", help="write the JSON here instead of stdout")
    args = p.parse_args(argv)
    if args.threads < 1:
        raise UsageProblem(f"--threads must be at least 1, got {args.threads}")
    return args


def main(argv=None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        doc = check(args)
    except UsageProblem as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback, on a board
        if os.environ.get("EDGEKIT_DEBUG"):
            raise
        text = str(exc).strip().splitlines()
        print(f"Error: {type(exc).__name__}: {text[0] if text else ''}", file=sys.stderr)
        return 1
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if args.json:
        tmp = f"{args.json}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, args.json)
    else:
        sys.stdout.write(text)
    print(verdict(doc), flush=True)
    return 0 if doc["ok"] else 1


def verdict(doc: dict) -> str:
    """The plain last line: ``PASS: ...`` or ``FAIL: outputs differ from the reference: ...``."""
    if not doc["ok"]:
        return "FAIL: outputs differ from the reference: " + "; ".join(doc["failures"])
    top1 = doc.get("top1_agreement")
    return (f"PASS: {doc['model']['path']} on {doc['machine']}: cosine {doc['cosine']:.6f}, "
            f"max |diff| {doc['max_abs']:.4g}" + (f", top-1 agreement {top1:.2%}" if top1 is not None else "")
            + " vs the float model")


def read_output(stdout: str) -> tuple[dict, str]:
    """(the JSON document, the verdict line) from this script's stdout."""
    text = stdout.rstrip("\n")
    head, _, last = text.rpartition("\n")
    if not last.startswith(("PASS", "FAIL")):
        head, last = text, ""
    doc = json.loads(head)
    if not isinstance(doc, dict):
        raise ValueError("the output check's JSON is not an object")
    return doc, last


if __name__ == "__main__":
    sys.exit(main())
