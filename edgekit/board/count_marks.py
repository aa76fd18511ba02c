"""count_marks.py: the board runner's bench, with its timed calls between two marks that edgekit's
instruction-counting plugin sees (``edgekit bench BUNDLE --emulate`` on a Python bundle).

The model is loaded and run once (runner.py's ``Benchmark``: the same bound call runner.py times),
then ``write(fd=-1, buf=NULL, count=BEGIN)`` marks the start, ``--runs`` timed calls follow and
``count=END`` marks the end (the marks ``edgekit-run`` makes: ``count_mark`` in
``native/runner/timing.cpp``). On a real board the marks fail at once with EBADF and cost nothing.
Prints runner.py's bench document. Exit 0 ok, 1 failed, 2 usage error.
"""

from __future__ import annotations

import ctypes
import json
import platform
import sys

from .errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, BoardError, BoardUsageError, first_line
from .runner import Benchmark, document, parse_args
from .timing import gc_paused, timed_calls

BEGIN = 0x65646B62
END = 0x65646B65
WRITE = {"aarch64": 64}  # the write syscall's number per machine (the plugin counts aarch64 only)


def mark(code: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.syscall(ctypes.c_long(WRITE[platform.machine()]), ctypes.c_long(-1), None, ctypes.c_long(code))


def count(argv) -> dict:
    if platform.machine() not in WRITE:
        raise BoardUsageError(f"count_marks.py marks aarch64 runs; this machine is {platform.machine()}")
    args = parse_args(argv)
    bench = Benchmark(args)  # loads the model and runs it once, outside the marks
    runs = args.max_runs
    with bench.runtime.context(), gc_paused():
        mark(BEGIN)
        bench.samples = timed_calls(bench.fn, bench.fn_args, runs)
        mark(END)
    return document(bench.result())


def main(argv=None) -> int:
    try:
        print(json.dumps(count(sys.argv[1:] if argv is None else argv)))
    except BoardUsageError as exc:
        print(f"Error: {first_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except BoardError as exc:
        print(f"Error: {first_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
