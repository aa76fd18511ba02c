"""Timing statistics (pure; ``edgekit.records.stats`` re-exports them for the host)."""

from __future__ import annotations

import math


def percentile(sorted_values, q: float) -> float:
    """The q-th percentile of ascending ``sorted_values`` by linear interpolation.

    Same definition as ``numpy.percentile(values, q)`` (method "linear"): the value at
    fractional rank ``(n - 1) * q / 100``.
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no samples")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within 0..100, got {q!r}")
    rank = (n - 1) * q / 100.0
    lo = int(math.floor(rank))
    hi = min(lo + 1, n - 1)
    frac = rank - lo
    a, b = float(sorted_values[lo]), float(sorted_values[hi])
    return a + (b - a) * frac


def summarize_ns(samples_ns) -> dict:
    """Timing summary of per-call durations (ns) in milliseconds; ``std`` is the population std.

    ``total_s`` is the sum of the timed calls (not the wall time around them), so it means the
    same whether the runs were back to back or interleaved with other models.
    """
    if not samples_ns:
        raise ValueError("no timed runs")
    ms = sorted(s / 1e6 for s in samples_ns)
    n = len(ms)
    mean = math.fsum(ms) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in ms) / n)
    return {
        "p50": percentile(ms, 50), "p90": percentile(ms, 90),
        "p95": percentile(ms, 95), "p99": percentile(ms, 99),
        "mean": mean, "std": std, "min": ms[0], "max": ms[-1],
        "runs": n, "total_s": math.fsum(samples_ns) / 1e9,
    }
