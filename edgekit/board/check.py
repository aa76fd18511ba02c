"""edgekit output check: run a bundle's model on reference.npz's inputs, compare with the float model.

Part of the board package (``edgekit.board``): bundles run it as ``check_outputs.py`` on boards (or
emulators) that have only python + numpy + onnxruntime (or torch, or torch + executorch for a ``.pte``).

    python3 check_outputs.py [--model FILE] [--format onnx|torchscript|executorch] [--reference FILE]
        [--engine ENGINE] [--threads N] [--min-cosine X] [--min-top1 X] [--max-abs X] [--json OUT]

Without --model it reads bundle.json (else manifest.json) beside this script. Prints one JSON
document to stdout (or writes --json), then one plain verdict line, the last line of stdout:
``PASS: ...`` or ``FAIL: ...`` (``read_output`` splits the two):

    {"schema": "edgekit.check_outputs", "schema_version": 1, "model": {path, format, sha256},
     "runtime": {name, version, threads, engine}, "machine": "aarch64", "python": "3.11.2",
     "batches": {"1": {"max_abs", "cosine", "top1_agreement", "outputs_sha256", "shape",
                       "outputs": [{"index", "max_abs", "cosine", "top1_agreement", "outputs_sha256", "shape"}]},
                 "7": ...},
     "outputs": [{"index", "name", "max_abs", "cosine", "top1_agreement", "per_sample", "ok", "failures"}],
     "max_abs": worst, "cosine": worst, "top1_agreement": worst, "outputs_sha256": all batches,
     "ok": bool, "failures": [..], "notes": [..]}

Every output the reference holds is compared (``reference.npz``: ``bN/output`` the first,
``bN/outputs/{k}`` the others; an older file holds the first alone, and only it is compared then).
A batch's figures are the worst over its outputs (``shape`` the first output's, the hash over
all); ``outputs`` holds each output's worst over the batches. The top-1 agreement is the first
output's (an arg-max of boxes or a state is no decision). An output of one value per sample
(``per_sample`` 1: a probability, a score) has no direction in one sample, so its cosine is taken
over every batch at once, and its largest error may be at most ``SPREAD_CEILING`` of the float
values' spread. A failure names its output (index and name) when the model has more than one.

``outputs_sha256`` hashes the model's float32 outputs (little-endian, C order): equal hashes on
host and board mean bit-identical results; different CPUs may legitimately differ in the last
bits, which ``max_abs``/``cosine`` against the float reference measure. Whatever the limits (none
given, or turned off with ``--max-abs inf``), a cosine below ``COSINE_FLOOR`` fails: outputs that
far from the reference (negated, zeroed, random) are not the model's. Exit codes: 0 ok, 1 a limit
broken or the model failed, 2 usage error. ``edgekit-run check`` is this script's C++ twin.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
from pathlib import Path

from .errors import BoardError, BoardUsageError, first_line
from .inputs import read_reference
from .manifest import FORMATS, detect_format, read_json_object
from .outfile import check_output_path, write_atomic
from .runtimes import open_model

SCHEMA = "edgekit.check_outputs"
SCHEMA_VERSION = 1
COSINE_FLOOR = 0.5  # no option turns it off; quantized programs keep cosine > 0.9 (parity.INT8_MIN_COSINE 0.95)
SPREAD_CEILING = 0.5  # one value per sample: largest error / the float values' spread, also always on


def describe(folder: Path, model: str | None, fmt: str | None) -> tuple[Path, str, dict, list[str]]:
    """(model path, format, the manifest's entry for it, the manifest's input names in order)."""
    manifest = read_json_object(folder / "manifest.json") if (folder / "manifest.json").is_file() else {}
    entries = [e for e in manifest.get("files") or [] if isinstance(e, dict)]
    if model is not None:  # from the command line: relative to the working folder
        path = Path(model).resolve()
    elif (folder / "bundle.json").is_file():
        bundle = read_json_object(folder / "bundle.json")
        path, fmt = folder / str(bundle.get("model")), fmt or bundle.get("format")
    elif len(entries) == 1:
        path = folder / str(entries[0].get("path"))
    else:
        raise BoardUsageError(f"no bundle.json in {folder} and its manifest does not list exactly one model; pass --model")
    if not path.is_file():
        raise BoardUsageError(f"model file not found: {path}")
    entry = next((e for e in entries if (folder / str(e.get("path", ""))).resolve() == path.resolve()), {})
    fmt = detect_format(path, entry, fmt)
    if fmt not in FORMATS:
        raise BoardUsageError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    inputs = [str(spec.get("name")) for spec in manifest.get("inputs") or [] if isinstance(spec, dict)]
    return path, fmt, entry, inputs


def output_names(folder: Path, runtime) -> list[str]:
    """The model's output names: the runtime's where the file has them, else the manifest's."""
    names = list(getattr(runtime, "output_names", None) or [])
    if not names and (folder / "manifest.json").is_file():
        names = [str(n) for n in read_json_object(folder / "manifest.json").get("outputs") or [] if isinstance(n, str)]
    return names


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


def check(args, folder: Path) -> dict:
    if args.json:
        check_output_path(args.json, "--json")  # before the model runs, not after
    folder = Path(args.model).resolve().parent if args.model else folder
    model, fmt, entry, order = describe(folder, args.model, args.format)
    reference = Path(args.reference) if args.reference else folder / "reference.npz"
    cases = read_reference(reference, every_output=True)
    engine = args.engine or (entry.get("details") or {}).get("quantized_engine")
    runtime = open_model(fmt, model, args.threads, engine)
    digest = hashlib.sha256()
    with open(model, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    runs = {batch: (inputs, runtime.predict_outputs(inputs, order), wants) for batch, (inputs, wants) in cases.items()}
    info = {key: runtime.info.get(key) for key in ("name", "version", "threads", "engine")}
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "model": {"path": model.name, "format": fmt, "sha256": digest.hexdigest()},
        "runtime": info, "machine": platform.machine(), "python": platform.python_version(),
        **judge(runs, output_names(folder, runtime), args.max_abs, args.min_cosine, args.min_top1),
    }


def judge(runs: dict, names: list, max_abs=None, min_cosine=None, min_top1=None) -> dict:
    """The check's figures and verdict for ``runs`` ({batch: (inputs, the model's outputs, the reference's
    outputs)}): each output of each batch compared, then each output over every batch held to the limits
    (``verify --emulate`` judges the emulated board's outputs with this too)."""
    batches, all_outputs, notes, short = {}, hashlib.sha256(), [], None
    pooled: dict[int, list] = {}  # per output: (got, want) of every batch
    for batch, (inputs, gots, wants) in runs.items():
        if len(gots) < len(wants):
            short = f"the model gives {len(gots)} output(s); the reference holds {len(wants)}"
        elif len(gots) > len(wants) and not notes:
            notes.append(f"the model gives {len(gots)} outputs; the reference holds {len(wants)} "
                         f"(written before every output was kept): {len(wants)} compared")
        per_output = []
        for k, (got, want) in enumerate(zip(gots, wants)):
            try:
                result = compare(got, want)
            except RuntimeError as exc:
                raise RuntimeError(f"output {k}: {exc}" if len(wants) > 1 else str(exc)) from None
            per_output.append({"index": k, **result})
            pooled.setdefault(k, []).append((got, want, case_samples(inputs, batch)))
            all_outputs.update(bytes.fromhex(result["outputs_sha256"]))
        if not per_output:
            raise RuntimeError(f"batch {batch}: no output to compare")
        batches[str(batch)] = _batch_summary(per_output)
    outputs = [_output_summary(k, names[k] if k < len(names) else None, batches, pooled[k]) for k in sorted(pooled)]
    top1s = [o["top1_agreement"] for o in outputs if o["top1_agreement"] is not None]
    doc = {
        "batches": batches, "outputs": outputs,
        "max_abs": max(o["max_abs"] for o in outputs),
        "cosine": min(o["cosine"] for o in outputs),
        "top1_agreement": min(top1s) if top1s else None,
        "outputs_sha256": all_outputs.hexdigest(),
    }
    failures = [short] if short else []
    for out in outputs:
        out["failures"] = limit_failures(out, max_abs, min_cosine, min_top1)
        if out.get("max_abs_of_spread") is not None and not out["max_abs_of_spread"] <= SPREAD_CEILING:
            out["failures"].append(f"max abs error {out['max_abs_of_spread']:.4g} of the float values' spread > "
                                   f"{SPREAD_CEILING:g} (one value per sample)")
        out["ok"] = not out["failures"]
        label = _label(out) if len(outputs) > 1 else ""
        failures += [f"{label}{failure}" for failure in out["failures"]]
    doc["ok"], doc["failures"], doc["notes"] = not failures, failures, notes
    return doc


def case_samples(inputs: dict, batch: int) -> int:
    """How many samples a reference case holds: its batch size, unless no input has that many rows
    (a model with a fixed batch is fed its own batch size in every case)."""
    rows = [int(a.shape[0]) for a in inputs.values() if getattr(a, "ndim", 0)]
    return batch if batch in rows or not rows else rows[0]


def _batch_summary(per_output: list[dict]) -> dict:
    """One batch: the worst over its outputs (the first output's shape and top-1), each output's figures."""
    first = per_output[0]
    digest = hashlib.sha256()
    for out in per_output:
        digest.update(bytes.fromhex(out["outputs_sha256"]))
    return {
        "max_abs": max(o["max_abs"] for o in per_output),
        "cosine": min(o["cosine"] for o in per_output),
        "top1_agreement": first["top1_agreement"],
        # one output: the hash of its bytes, as before there were several
        "outputs_sha256": first["outputs_sha256"] if len(per_output) == 1 else digest.hexdigest(),
        "shape": first["shape"],
        "outputs": per_output,
    }


def _output_summary(index: int, name, batches: dict, pairs: list) -> dict:
    """One output over every batch: worst max_abs, cosine, (first output) top-1 agreement; an output
    of one value per sample gets its cosine over every batch at once, and its error against the spread."""
    import numpy as np

    found = [b["outputs"][index] for b in batches.values()]
    per_sample = max(int(np.asarray(want).size // max(samples, 1)) for _, want, samples in pairs)
    top1s = [f["top1_agreement"] for f in found if f["top1_agreement"] is not None] if index == 0 else []
    summary = {"index": index, "name": name, "per_sample": per_sample,
               "max_abs": max(f["max_abs"] for f in found), "cosine": min(f["cosine"] for f in found),
               "top1_agreement": min(top1s) if top1s else None}
    if per_sample <= 1:
        got = np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g, _, _ in pairs])
        want = np.concatenate([np.asarray(w, dtype=np.float64).ravel() for _, w, _ in pairs])
        norms = float(np.linalg.norm(got) * np.linalg.norm(want))
        summary["cosine"] = float(got @ want / norms) if norms > 0 else float(not got.any() and not want.any())
        spread = float(want.max() - want.min()) if want.size else 0.0
        error = summary["max_abs"]
        summary["max_abs_of_spread"] = error / spread if spread > 0 else None  # constant: nothing to measure against
    return summary


def _label(output: dict) -> str:
    return f"output {output['index']}" + (f" ({output['name']!r})" if output.get("name") else "") + ": "


def limit_failures(doc: dict, max_abs=None, min_cosine=None, min_top1=None) -> list[str]:
    """The limits ``doc`` (worst ``max_abs``, ``cosine``, ``top1_agreement``) breaks, in words; the
    cosine floor always applies (``verify --emulate`` holds an emulated run to the same words)."""
    failures = []
    if max_abs is not None and not doc["max_abs"] <= max_abs:
        failures.append(f"max_abs {doc['max_abs']:.6g} > {max_abs:g}")
    if min_cosine is not None and not doc["cosine"] >= min_cosine:
        failures.append(f"cosine {doc['cosine']:.6f} < {min_cosine:g}")
    if min_top1 is not None and doc["top1_agreement"] is not None and doc["top1_agreement"] < min_top1:
        failures.append(f"top1_agreement {doc['top1_agreement']:.4f} < {min_top1:g}")
    if not doc["cosine"] >= COSINE_FLOOR and not any(f.startswith("cosine ") for f in failures):
        failures.append(f"cosine {doc['cosine']:.6f} < {COSINE_FLOOR:g} (the floor no limit turns off: "
                        "these are not the model's outputs)")
    return failures


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise BoardUsageError(message)


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
        raise BoardUsageError(f"--threads must be at least 1, got {args.threads}")
    return args


def main(argv=None, folder: str | Path | None = None) -> int:
    """The check; ``folder`` is where the bundle's files are when no --model is given (the entry
    script's own folder)."""
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        doc = check(args, Path(folder) if folder is not None else Path.cwd())
    except BoardUsageError as exc:
        print(f"Error: {first_line(exc)}", file=sys.stderr)
        return 2
    except BoardError as exc:
        print(f"Error: {first_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback, on a board
        if os.environ.get("EDGEKIT_DEBUG"):
            raise
        text = str(exc).strip().splitlines()
        print(f"Error: {type(exc).__name__}: {text[0] if text else ''}", file=sys.stderr)
        return 1
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if args.json:
        try:
            write_atomic(args.json, lambda fh: fh.write(text.encode("utf-8")), "--json")
        except BoardUsageError as exc:
            print(f"Error: {first_line(exc)}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"Error: cannot write --json {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
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
