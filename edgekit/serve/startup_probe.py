"""Load and run a model once in a short-lived child process, before the server loads it in its own.

A damaged model file can crash a runtime's native code: a bit-flipped ``.pte`` whose manifest was
made consistent again aborts ExecuTorch's loader (SIGABRT) or faults in a kernel on the first call
(SIGSEGV), and nothing in Python can catch that. So the server first has a child process do what
it is about to do itself, open the model with the same loader and make the warm-up call on the
same fixed inputs (``model.example_feed()``); only when the child finished cleanly does the server
load the model in process. A child killed by a signal is a one-line error naming the file, and
the server never binds its socket.

    probe(opener, args, what)        in the server; ``opener`` is "module:function" of this package,
                                     called in the child as ``function(*args)`` -> a served model
    child_main(argv)                 in the child (started as ``sys.executable -c BOOT ...``)

The cost is one interpreter start and one load of the model; the caller may pass ``meanwhile``,
run while the child works (edgekit imports the runtime then: the in-process load needs it anyway).

Standalone: the standard library only (copied into bundles, whose serve.py probes its ONNX model
the same way).
"""

from __future__ import annotations

import importlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

PROBE_TIMEOUT_S = 300.0
OUTPUT_TAIL = 64 << 10  # bytes of the child's output read back (its result is the last line)
_MARK = "edgekit-startup-probe: "

# The child's first lines: ``-c`` puts the current folder first on sys.path, whose modules are not
# ours to import; the package's own folder is added only when the package is not importable already.
_BOOT = (
    "import importlib, importlib.util, sys\n"
    "if sys.path and sys.path[0] in ('', '.'):\n"
    "    del sys.path[0]\n"
    "root, package = sys.argv[1], sys.argv[2]\n"
    "if importlib.util.find_spec(package.partition('.')[0]) is None:\n"
    "    sys.path.append(root)\n"
    "sys.exit(importlib.import_module(package + '.startup_probe').child_main(sys.argv[3:]))\n"
)


class ProbeFailed(Exception):
    """The model did not load and run in the child: a one-line message, and the exit code it
    deserves (2: the file is damaged or not servable; 1: the tool failed)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def child_argv(opener: str, args: list[str]) -> list[str]:
    package = __package__ or "edgekit.serve"
    root = Path(__file__).resolve().parents[package.count(".") + 1]
    return [sys.executable, "-c", _BOOT, str(root), package, opener, *map(str, args)]


def probe(opener: str, args: list[str], what: str, *, timeout_s: float = PROBE_TIMEOUT_S,
          popen_kwargs: dict | None = None, meanwhile: Callable[[], None] | None = None) -> dict:
    """Have a child process open the model with ``opener(*args)`` and run it once; its report (a
    dict) when it did, ``ProbeFailed`` when it crashed, hung past ``timeout_s`` or raised. ``what``
    names the model file in the messages."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(child_argv(opener, args), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, **(popen_kwargs or {}))
        except OSError as exc:
            raise ProbeFailed(f"cannot start a process to check {what}: {exc}", 1) from None
        try:
            if meanwhile is not None:
                meanwhile()
            proc.wait(max(0.0, timeout_s - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            raise ProbeFailed(f"{what} did not load and run within {timeout_s:g} s (checked in a child process "
                              "before serving); it may be damaged") from None
        finally:
            if proc.poll() is None:  # a timeout, or an interrupt while waiting
                proc.kill()
                proc.wait()
        report = _report(out)
    if proc.returncode < 0:
        raise ProbeFailed(f"{what} crashed the runtime while loading (signal {_signal_name(-proc.returncode)}); "
                          "it is damaged or not a program this runtime can run")
    if report is None or proc.returncode != 0 and report.get("ok"):
        raise ProbeFailed(f"checking {what} in a child process failed (exit status {proc.returncode}, no report)", 1)
    if not report.get("ok"):
        code = report.get("exit_code") if report.get("exit_code") in (1, 2) else 2
        message = str(report.get("error") or "it did not load")
        raise ProbeFailed(f"{what} cannot be served: {message}" if report.get("foreign") else message, code)
    return report


def _report(out) -> dict | None:
    """The child's last report line, from the tail of its output (native runtimes print there too)."""
    size = out.seek(0, 2)
    out.seek(max(0, size - OUTPUT_TAIL))
    for line in reversed(out.read().decode("utf-8", "replace").splitlines()):
        if line.startswith(_MARK):
            try:
                doc = json.loads(line[len(_MARK):])
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def child_main(argv: list[str]) -> int:
    """In the child: open the model, make the warm-up call, print one report line; the exit status."""
    if not argv:
        return _say({"ok": False, "error": "the startup probe needs an opener", "exit_code": 1})
    module, _, name = argv[0].partition(":")
    started = time.perf_counter()
    try:
        opener = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        model = opener(*argv[1:])
        loaded = time.perf_counter()
        model.run(model.example_feed())
    except Exception as exc:  # noqa: BLE001 - reported to the server, which says it in one line
        code = getattr(exc, "exit_code", None)
        if code not in (1, 2):
            code = 1 if isinstance(exc, (ImportError, MemoryError)) else 2
        text = str(exc).strip()
        line = text.splitlines()[0][:300] if text else type(exc).__name__
        # "foreign": a runtime's own exception, whose message does not name the file
        return _say({"ok": False, "error": line, "exit_code": code, "foreign": getattr(exc, "exit_code", None) is None}, 1)
    return _say({"ok": True, "load_s": round(loaded - started, 4), "run_s": round(time.perf_counter() - loaded, 4)})


def _say(report: dict, status: int = 0) -> int:
    sys.stdout.write(_MARK + json.dumps(report) + "\n")
    sys.stdout.flush()
    return status
