"""Timed calls: the loop a user's own would be, the stopping rule, and waiting for spinning threads."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import threading
import time


@contextlib.contextmanager
def gc_paused(collect: bool = True):
    """Keep the cyclic GC out of the timed region (as timeit does), collecting first if asked."""
    enabled = gc.isenabled()
    if collect:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def timed_calls(fn, args: tuple, n: int) -> list[int]:
    """Call ``fn(*args)`` n times; per-call wall time in ns (perf_counter_ns).

    Nothing but the call sits between the two clock reads. The one- and two-argument cases are
    spelled out: ``fn(a, b)`` costs ~40 ns less than ``fn(*args)``, about 1 % of a 4 us model.
    """
    clock = time.perf_counter_ns
    out = [0] * n
    if len(args) == 2:
        a, b = args
        for i in range(n):
            start = clock()
            fn(a, b)
            out[i] = clock() - start
    elif len(args) == 1:
        (a,) = args
        for i in range(n):
            start = clock()
            fn(a)
            out[i] = clock() - start
    else:
        for i in range(n):
            start = clock()
            fn(*args)
            out[i] = clock() - start
    return out


def timed_until(fn, args: tuple, min_runs: int, min_time_s: float, max_runs: int, chunk: int = 1000) -> list[int]:
    """Timed calls until both ``min_runs`` and ``min_time_s`` (summed call time) are reached, or ``max_runs``.

    Runs in chunks sized from the mean so far, so the stopping test stays out of the timed loop
    and a slow model does not overshoot the time by more than about one call.
    """
    min_ns = min_time_s * 1e9
    samples = timed_calls(fn, args, min(min_runs, max_runs))
    total = sum(samples)
    while len(samples) < max_runs and total < min_ns:
        mean = total / len(samples)
        n = max(1, min(chunk, max_runs - len(samples), math.ceil((min_ns - total) / mean) if mean > 0 else chunk))
        block = timed_calls(fn, args, n)
        samples += block
        total += sum(block)
    return samples


def _other_threads_running() -> int | None:
    """How many threads of this process, other than the calling one, are running or runnable.

    From /proc/self/task/*/stat (Linux); None where that cannot be read. A spin-waiting thread is
    runnable ("R") even while the scheduler has it off the CPU; a parked one sleeps ("S").
    """
    me = threading.get_native_id()
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return None
    running = 0
    for tid in tids:
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii", errors="replace") as fh:
                state = fh.read().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue  # the thread has ended
        running += state == "R"
    return running


def settle(max_s: float = 0.5, poll_s: float = 0.001, quiet_polls: int = 2) -> float | None:
    """Wait until this process's worker threads have stopped spinning; returns the seconds waited.

    After a call, ONNX Runtime's intra-op workers spin-wait for more work (~35 ms on x86) and
    OpenMP's do too (GOMP_SPINCOUNT, ~13 ms). A model timed in another process meanwhile shares
    its cores with them: on a 2-core host a 40 us TorchScript call measured 30-56 ms. So in serve
    mode a runner answers only once no other thread of it has been runnable for ``quiet_polls``
    polls in a row (a CPU-time test is fooled by a spinner the scheduler has parked for a while).
    None where /proc cannot tell (then it does not wait).
    """
    start = time.perf_counter()
    if _other_threads_running() is None:
        return None
    quiet = 0
    while time.perf_counter() - start < max_s:
        quiet = quiet + 1 if _other_threads_running() == 0 else 0
        if quiet >= quiet_polls:
            break
        time.sleep(poll_s)
    return time.perf_counter() - start
