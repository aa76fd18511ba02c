"""How many CPU threads ``edgekit train`` uses when ``--threads`` is not given.

Measured with ``benchmarks/train_threads.py`` (fresh process per run, 1 thread and every core
alternating, 40 optimizer steps, batch 64) on a 2-core machine shared with other jobs:

    digits-cnn             (24 k parameters)   2 threads took 29x the time of 1 (median of 3 rounds: 2.1x, 29x, 35x)
    digits-mobilenet       (37 k parameters)   5.5x (rounds: 5.5x, 9.7x, 3.0x)
    transformer-classifier (422 k parameters)  6.7x (rounds: 7.9x, 6.7x, 1.3x)

and, end to end (``edgekit train -m digits-cnn --epochs 3``, this default vs ``--threads 2``, three
interleaved rounds on the same busy machine): 28.9 / 6.1 / 4.7 s vs 55.5 / 20.5 / 16.6 s, a median
of 3.3x faster; the issue that asked for this default measured 3.7 s vs 23.3 s (6.3x) on an idle
2-core machine. torch's spin-waiting OpenMP workers cost more than a tiny
model's work per step can give back, and on a busy host a thread that waits for a core stalls
every step. So: small models train on one thread; larger ones on every core but one (the rule
``edgekit bench`` already follows), which on a 2-core machine is also one.
"""

from __future__ import annotations

import os

SMALL_MODEL_PARAMETERS = 100_000  # below this, one thread (see the figures above)


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_threads(parameters: int) -> int | None:
    """Threads for a CPU run of a model with ``parameters`` weights; None leaves torch's own choice
    (when the user set ``OMP_NUM_THREADS``, which torch already follows)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    if parameters < SMALL_MODEL_PARAMETERS:
        return 1
    return max(1, usable_cores() - 1)
