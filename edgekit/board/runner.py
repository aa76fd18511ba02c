"""edgekit benchmark runner: time one model file with onnxruntime, TorchScript or ExecuTorch.

Part of the board package (``edgekit.board``): bundles run it as ``runner.py`` on boards that have
only python + numpy + onnxruntime (or torch, or torch + executorch for a ``.pte`` program); the
runtime loads when a benchmark starts.

    python runner.py MODEL_FILE [--threads N] [--warmup N] [--min-runs N] [--min-time S]
        [--max-runs N] [--batch N] [--shape NAME=1x1x8x8 ...] [--input FILE.npz]
        [--engine qnnpack] [--format onnx|torchscript|executorch] [--json OUT.json] [--serve]
        [--emulated] [--mode local|remote|emulated] [--target NAME] [--seed N]

Writes ``{"schema": "edgekit.bench", "schema_version": 1, "results": [ONE RESULT]}`` to
``--json`` (atomically) or to stdout. stdout carries only that JSON (with ``--serve``: only
protocol lines); diagnostics go to stderr. Exit codes: 0 ok, 1 benchmark failed, 2 usage error.

``--threads`` sets onnxruntime's intra-op threads, torch's, or the size of ExecuTorch's XNNPACK
threadpool (one per process, sized before the program loads). An ExecuTorch program is
memory-planned for its largest shapes: inputs past those bounds are a usage error.

Serve protocol (``--serve``), one JSON object per line. After loading, the first run and the
warm-up, the runner says ``{"event": "ready", "load_ms": .., "first_run_ms": .., "input_shapes":
{..}, "pid": ..}``. Then, on stdin:
    {"cmd": "run", "n": 10, "warm": 1}  ->  {"ok": true, "ns": [int, ...], "settle_ms": ..}
        ``warm`` untimed calls (default 0), then n timed calls (ns each); the reply comes once
        the runtime's worker threads have stopped spinning (see ``settle``)
    {"cmd": "finish"}  ->  {"ok": true, "result": {...}}
        the full result (as in the document's "results"); then the runner exits 0
A bad command gets ``{"ok": false, "error": "..."}`` and the runner keeps serving; end of
input ends the runner (exit 0) without a result.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

from .errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, BoardError, BoardUsageError, first_line
from .facts import host_facts, peak_rss_mb, rss_mb, usable_cores
from .inputs import load_npz, make_inputs, parse_shape, resolve_specs
from .manifest import FORMATS, detect_format, model_info, read_manifest_entry
from .nativelog import native_detail
from .outfile import check_output_path, write_atomic
from .runtimes import runtime_class
from .stats import summarize_ns
from .timing import gc_paused, settle, timed_calls, timed_until

# Duplicated from edgekit/records/result.py (this package may not import edgekit); a test keeps them equal.
BENCH_SCHEMA = "edgekit.bench"
BENCH_SCHEMA_VERSION = 1
MODES = ("local", "remote", "emulated")
MAX_BLOCK = 1_000_000  # the most calls one serve "run" command may ask for


class Benchmark:
    """One model loaded, its first call and warm-up done, ready for timed calls."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.samples: list[int] = []
        model = Path(args.model)
        if not model.is_file():
            raise BoardUsageError(f"model file not found: {model}")
        manifest, entry, self.notes = read_manifest_entry(model)
        self.format = detect_format(model, entry, args.format)
        self.model = model_info(model, self.format, entry)
        engine = args.engine or ((entry or {}).get("details") or {}).get("quantized_engine")
        shapes = {}
        for text in args.shape or []:
            name, shape = _parse_shape_arg(text)
            if name in shapes:
                raise BoardUsageError(f"--shape names input {name!r} twice")
            shapes[name] = shape
        npz = load_npz(args.input) if args.input else None

        started = time.perf_counter_ns()
        import numpy  # noqa: F401 - part of the baseline, before the model is loaded

        runtime = runtime_class(self.format)
        runtime.preload(args.threads)  # sizes a thread pool too (before the load)
        import_ms = (time.perf_counter_ns() - started) / 1e6

        self.rss_before = rss_mb()
        started = time.perf_counter_ns()
        self.runtime = runtime(model, args.threads, engine)
        self.load_ms = (time.perf_counter_ns() - started) / 1e6
        rss_loaded = rss_mb()
        self.load_growth = None if self.rss_before is None or rss_loaded is None else rss_loaded - self.rss_before

        specs, source, notes = resolve_specs(self.runtime, manifest)
        self.notes += notes
        self.input_source = "npz" if npz is not None else ("shape" if shapes else source)
        arrays, self.batch, notes = make_inputs(specs, shapes, npz, args.batch, args.seed)
        self.notes += notes
        self.input_shapes = {name: [int(d) for d in a.shape] for name, a in arrays.items()}
        self.fn, self.fn_args = self.runtime.bind(arrays)

        failure = None
        with self.runtime.context():
            try:
                started = time.perf_counter_ns()
                self.fn(*self.fn_args)
                self.first_run_ms = (time.perf_counter_ns() - started) / 1e6
            except Exception as exc:  # noqa: BLE001 - runtime-specific exception types
                failure = first_line(exc)
            else:
                for _ in range(args.warmup):
                    self.fn(*self.fn_args)
        if failure is not None:  # raised here: the runtime's own explanation is in its log by now
            raise BoardError(f"the first inference failed: {failure}{native_detail(getattr(self.runtime, 'log', []))}")
        self.runtime.info["import_ms"] = import_ms

    def run_plain(self) -> None:
        a = self.args
        with self.runtime.context(), gc_paused():
            self.samples = timed_until(self.fn, self.fn_args, a.min_runs, a.min_time, a.max_runs)

    def run_block(self, n: int, warm: int = 0) -> list[int]:
        """``warm`` untimed calls (threads asleep and caches cold after another model's turn), then n timed."""
        # No collection per block: it would cost more than a block of a small model.
        with self.runtime.context(), gc_paused(collect=False):
            for _ in range(warm):
                self.fn(*self.fn_args)
            block = timed_calls(self.fn, self.fn_args, n)
        self.samples.extend(block)
        return block

    def result(self) -> dict:
        a = self.args
        timing = {"load": self.load_ms, "first_run": self.first_run_ms, **summarize_ns(self.samples)}
        notes = list(self.notes)
        reached = timing["runs"] >= a.min_runs and timing["total_s"] >= a.min_time
        if not reached and timing["runs"] >= a.max_runs:
            notes.append(f"stopped at --max-runs {a.max_runs} before reaching --min-time {a.min_time:g} s")
        peak, before, growth = peak_rss_mb(), self.rss_before, self.load_growth
        if peak is None or before is None:
            notes.append("resident memory is not readable on this host; memory figures are 0")
        mode = a.mode if not (a.emulated and a.mode == "local") else "emulated"
        return {
            "model": self.model,
            "runtime": {**self.runtime.info, "torch_imported": "torch" in sys.modules},
            "input_shapes": self.input_shapes,
            "settings": {"warmup": a.warmup, "min_runs": a.min_runs, "min_time_s": a.min_time,
                         "max_runs": a.max_runs, "batch": self.batch, "seed": a.seed,
                         "inputs": self.input_source, "serve": bool(a.serve)},
            "timing": timing,
            "throughput_per_s": self.batch * timing["runs"] / timing["total_s"] if timing["total_s"] > 0 else 0.0,
            "memory": {"peak_rss": peak or 0.0, "rss_before_load": before or 0.0, "load_growth": growth or 0.0},
            "host": host_facts(emulated=a.emulated),
            "mode": mode,
            "target": a.target,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "notes": notes,
        }


def document(result: dict) -> dict:
    return {"schema": BENCH_SCHEMA, "schema_version": BENCH_SCHEMA_VERSION, "results": [result]}


def write_json_atomic(path: str, obj) -> None:
    """Write to a temporary file beside ``path``, fsync, then rename over it (see outfile.py)."""
    text = json.dumps(obj, indent=2, sort_keys=True) + "\n"
    write_atomic(path, lambda fh: fh.write(text.encode("utf-8")), "--json", make_parents=True)


# ---------------------------------------------------------------------------------------------
# Command line


def _parse_shape_arg(text: str):
    try:
        return parse_shape(text)
    except ValueError as exc:
        raise BoardUsageError(str(exc)) from None


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line on stderr, exit 2 (argparse prints the whole usage)
        raise BoardUsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="runner.py", description="Time one model file (edgekit bench runner).")
    p.add_argument("model", help="model file: .onnx, TorchScript .pt or ExecuTorch .pte")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: all usable cores)")
    p.add_argument("--warmup", type=int, default=10, help="untimed runs after the first (default 10)")
    p.add_argument("--min-runs", type=int, default=50, help="at least this many timed runs (default 50)")
    p.add_argument("--min-time", type=float, default=1.0, help="and at least this many seconds of them (default 1)")
    p.add_argument("--max-runs", type=int, default=100_000, help="safety cap on timed runs (default 100000)")
    p.add_argument("--batch", type=int, default=1, help="size of dynamic axes (default 1)")
    p.add_argument("--shape", action="append", metavar="NAME=DIMS", help="input shape, e.g. input=1x1x8x8 (repeatable)")
    p.add_argument("--input", metavar="FILE.npz", help="input arrays by input name")
    p.add_argument("--engine", help="torch quantized engine (default: the manifest's)")
    p.add_argument("--format", choices=FORMATS, help="runtime, when the file name does not tell")
    p.add_argument("--json", metavar="PATH", help="write the result here (default, or '-': stdout)")
    p.add_argument("--serve", action="store_true", help="after loading, take JSON-line commands on stdin")
    p.add_argument("--emulated", action="store_true", help="record that this host emulates the target")
    p.add_argument("--mode", choices=MODES, default="local", help="how this run was started (default local)")
    p.add_argument("--target", help="target name to record in the result")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    return p


def parse_args(argv) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.threads is None:
        args.threads = usable_cores()
    checks = [
        (args.threads >= 1, f"--threads must be at least 1, got {args.threads}"),
        (args.warmup >= 0, f"--warmup must be 0 or more, got {args.warmup}"),
        (args.min_runs >= 1, f"--min-runs must be at least 1, got {args.min_runs}"),
        (math.isfinite(args.min_time) and args.min_time >= 0, f"--min-time must be 0 or more seconds, got {args.min_time}"),
        (args.max_runs >= args.min_runs, f"--max-runs ({args.max_runs}) must be at least --min-runs ({args.min_runs})"),
        (args.batch >= 1, f"--batch must be at least 1, got {args.batch}"),
        (not (args.serve and args.json), "--serve and --json do not go together"),
        (not (args.shape and args.input), "--shape and --input do not go together (the arrays carry their shapes)"),
    ]
    for ok, message in checks:
        if not ok:
            raise BoardUsageError(message)
    return args


def _reply(out, obj) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def _count_ok(value, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_BLOCK


def serve(bench: Benchmark, inp, out) -> int:
    """The --serve loop (protocol in the module docstring)."""
    gc.collect()  # once, here: blocks do not collect
    settle()
    _reply(out, {"event": "ready", "load_ms": bench.load_ms, "first_run_ms": bench.first_run_ms,
                 "input_shapes": bench.input_shapes, "pid": os.getpid()})
    while line := inp.readline():
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            cmd = msg.get("cmd") if isinstance(msg, dict) else None
        except json.JSONDecodeError:
            cmd, msg = None, None
        if cmd == "run":
            n, warm = msg.get("n"), msg.get("warm", 0)
            if not _count_ok(n, 1) or not _count_ok(warm, 0):
                _reply(out, {"ok": False, "error": f"run needs an integer n within 1..{MAX_BLOCK} (and warm 0..{MAX_BLOCK})"})
                continue
            samples = bench.run_block(n, warm)
            waited = settle()
            _reply(out, {"ok": True, "ns": samples, "settle_ms": None if waited is None else waited * 1e3})
        elif cmd == "finish":
            if not bench.samples:
                _reply(out, {"ok": False, "error": "no timed runs yet"})
                continue
            _reply(out, {"ok": True, "result": bench.result()})
            return EXIT_OK
        else:
            _reply(out, {"ok": False, "error": f"unknown command {line.strip()[:80]!r}; expected run or finish"})
    return EXIT_OK


def main(argv=None, out=None, protect_stdout: bool = False) -> int:
    """Run the runner; returns the exit code. ``protect_stdout`` (script use) sends anything the
    runtimes print on fd 1 to stderr, so stdout carries only our JSON."""
    if protect_stdout:
        sys.stdout.flush()
        out = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)
    with warnings.catch_warnings():
        if not os.environ.get("EDGEKIT_DEBUG"):
            warnings.simplefilter("ignore")  # torch/ORT deprecation chatter is not the user's business
        try:
            return _main(sys.argv[1:] if argv is None else argv, out or sys.stdout)
        except BoardUsageError as exc:
            print(f"Error: {first_line(exc)}", file=sys.stderr)
            return EXIT_USAGE
        except BoardError as exc:
            print(f"Error: {first_line(exc)}", file=sys.stderr)
            return EXIT_FAILED
        except KeyboardInterrupt:
            print("Error: interrupted", file=sys.stderr)
            return 130
        except Exception as exc:  # noqa: BLE001 - last line of defence: one line, not a traceback
            if os.environ.get("EDGEKIT_DEBUG"):
                import traceback

                traceback.print_exc()
            print(f"Error: {type(exc).__name__}: {first_line(exc)}", file=sys.stderr)
            return EXIT_FAILED


def _main(argv, out) -> int:
    args = parse_args(argv)
    if args.json and args.json != "-":
        check_output_path(args.json, "--json")  # before the model loads, not after it ran
    bench = Benchmark(args)
    if args.serve:
        return serve(bench, sys.stdin, out)
    bench.run_plain()
    doc = document(bench.result())
    if args.json and args.json != "-":
        write_json_atomic(args.json, doc)
    else:
        out.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        out.flush()
    return EXIT_OK


if __name__ == "__main__":
    if not os.environ.get("EDGEKIT_DEBUG"):
        # torch's C++ deprecation warnings bypass Python's warnings module; set before torch loads.
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    sys.exit(main(protect_stdout=True))
