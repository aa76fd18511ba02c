"""Summary statistics of timed runs, and statistics across worker processes.

The per-call math lives in the board package (it travels to devices and must compute the same
figures there); this module is the library's import location for it.

Across processes (what pyperf does): the same model timed in different processes can settle at
different speeds (memory layout, which core, frequency state), so a confidence interval from the
calls of one process is too narrow. Each worker process contributes one value, its median call
time; the centre is the mean of those medians and its 95 % confidence interval is Student's
t-interval over processes, which holds the between-process variance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from edgekit.board.inputs import parse_shape
from edgekit.board.stats import percentile, summarize_ns

__all__ = ["Spread", "parse_shape", "percentile", "ratio_interval", "spread_of", "summarize_ns", "t_quantile",
           "welch_interval"]

CONFIDENCE = 0.95
# Two-sided 95 % quantiles of Student's t by degrees of freedom (1..30); beyond: the formula below.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


def t_quantile(df: float) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (95 % two-sided)."""
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df!r}")
    if df <= 30:
        lo = int(math.floor(df))
        if lo == df or lo >= 30:
            return _T975[lo - 1]
        return _T975[lo - 1] + (_T975[lo] - _T975[lo - 1]) * (df - lo)
    z = 1.959963984540054  # Cornish-Fisher expansion around the normal quantile
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Spread:
    """Milliseconds, across ``processes`` worker processes of one model (each gives its median)."""

    processes: int
    process_p50: tuple[float, ...]
    center: float  # mean of the process medians
    ci_low: float  # 95 % confidence interval of ``center`` (between-process variance included; low >= 0)
    ci_high: float
    confidence: float = CONFIDENCE

    @property
    def sem(self) -> float:
        """Standard error of ``center`` (0 with a single process)."""
        n = len(self.process_p50)
        if n < 2:
            return 0.0
        mean = self.center
        return math.sqrt(math.fsum((x - mean) ** 2 for x in self.process_p50) / (n - 1) / n)

    def to_dict(self) -> dict:
        return {"processes": self.processes, "process_p50": list(self.process_p50), "center": self.center,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "confidence": self.confidence}


def spread_of(process_p50: Sequence[float]) -> Spread:
    """The spread of per-process medians (ms). One process: a zero-width interval (no between-process
    information; readers treat it as unknown)."""
    values = tuple(float(v) for v in process_p50)
    if not values:
        raise ValueError("no process medians")
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return Spread(1, values, mean, mean, mean)
    sem = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (n - 1) / n)
    half = t_quantile(n - 1) * sem
    return Spread(n, values, mean, max(mean - half, 0.0), mean + half)  # a time is never below 0


def welch_interval(new: Spread, base: Spread) -> tuple[float, float, float]:
    """(difference new - base, 95 % CI low, high) of the centres, Welch's unequal-variance t-interval."""
    diff = new.center - base.center
    va, vb = new.sem**2, base.sem**2
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    parts = [v**2 / (s.processes - 1) for v, s in ((va, new), (vb, base)) if s.processes > 1 and v > 0]
    df = (va + vb) ** 2 / math.fsum(parts) if parts else 1.0
    half = t_quantile(max(df, 1.0)) * se
    return diff, diff - half, diff + half


def ratio_interval(new: Spread, base: Spread) -> tuple[float, float, float]:
    """(new / base, 95 % CI low, high) of the ratio of centres, from a Welch interval on the log scale
    (the delta method: the relative standard errors add in quadrature)."""
    if new.center <= 0 or base.center <= 0:
        raise ValueError("a ratio of timings needs positive centres")
    ratio = new.center / base.center
    ra, rb = new.sem / new.center, base.sem / base.center
    se = math.sqrt(ra**2 + rb**2)
    if se == 0:
        return ratio, ratio, ratio
    parts = [r**4 / (s.processes - 1) for r, s in ((ra, new), (rb, base)) if s.processes > 1 and r > 0]
    df = se**4 / math.fsum(parts) if parts else 1.0
    half = t_quantile(max(df, 1.0)) * se
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)
