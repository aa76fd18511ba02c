"""A latency model per core: instructions counted under emulation -> milliseconds on the board.

One thread::

    ms_1 = sum over groups g of cycles[g] * instructions[g] / (MHz * 1000)

where a group sums instruction classes of ``edgekit.emulate.icount`` (SIMD/FP, integer, load,
store, branch, other) and ``cycles[g]`` is what one instruction of the group costs on the core,
on average, stalls included. ``n`` threads follow Amdahl's law with the core's serial fraction
``s``: ``ms_n = ms_1 * (s + (1 - s) / n)``.

The free parameters are fitted to published on-board latencies: ``fit_cycles`` by least squares
on relative error (each figure weighs the same whatever its size), pulled towards a prior by a
small ridge so a group the figures cannot tell apart keeps a sane value; ``fit_serial_fraction``
from pairs of one-thread and n-thread figures of the same model on the same board.
The band is ``exp(+-sigma)`` around the estimate, ``sigma`` the RMS of the fit's log errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

CLASSES = ("simd_fp", "integer", "load", "store", "branch", "other")
MIN_SIGMA = 0.10  # the band never claims better than +-10 %: the figures themselves vary that much between runs


@dataclass(frozen=True)
class Estimate:
    ms: float
    low_ms: float
    high_ms: float
    core: str
    mhz: float
    threads: int

    def text(self) -> str:
        return f"{self.ms:.3g} ms ({self.low_ms:.3g}-{self.high_ms:.3g})"


@dataclass(frozen=True)
class CoreModel:
    core: str
    groups: Mapping[str, tuple[str, ...]]  # group -> instruction classes
    cycles: Mapping[str, float]  # group -> cycles per instruction
    serial_fraction: float
    sigma: float  # RMS of the fit's log errors

    def single_thread_ms(self, classes: Mapping[str, float], mhz: float) -> float:
        return group_cycles(classes, self.groups, self.cycles) / (mhz * 1000.0)

    def estimate(self, classes: Mapping[str, float], mhz: float, threads: int) -> Estimate:
        ms = amdahl(self.single_thread_ms(classes, mhz), self.serial_fraction, threads)
        spread = math.exp(max(self.sigma, MIN_SIGMA))
        return Estimate(ms, ms / spread, ms * spread, self.core, mhz, threads)


def grouped(classes: Mapping[str, float], groups: Mapping[str, tuple[str, ...]]) -> dict[str, float]:
    """Instructions per group: the sum of the group's classes (a class absent from ``classes`` counts 0)."""
    return {group: float(sum(classes.get(name, 0) for name in members)) for group, members in groups.items()}


def group_cycles(classes: Mapping[str, float], groups, cycles: Mapping[str, float]) -> float:
    counts = grouped(classes, groups)
    return sum(cycles[group] * counts[group] for group in groups)


def amdahl(single_ms: float, serial_fraction: float, threads: int) -> float:
    return single_ms * (serial_fraction + (1.0 - serial_fraction) / threads)


def fit_cycles(samples: Sequence[tuple[Mapping[str, float], float, float]], groups: Mapping[str, tuple[str, ...]],
               prior: Mapping[str, float], ridge: float = 0.0,
               floor: Mapping[str, float] | None = None) -> dict[str, float]:
    """Cycles per instruction of each group from ``(classes, MHz, measured one-thread ms)`` samples.

    Minimises ``sum_i (predicted_i / measured_i - 1)^2 + ridge * sum_g (cycles_g / prior_g - 1)^2``,
    a linear least-squares problem, with ``cycles_g >= floor_g`` (default 0): no group runs faster
    than the core issues it (``1 / issue width``). A group whose best value falls below its floor
    is held there and the rest refitted."""
    import numpy as np

    names = list(groups)
    floor = {g: 0.0 for g in names} | dict(floor or {})
    rows, targets = [], []
    for classes, mhz, ms in samples:
        counts = grouped(classes, groups)
        rows.append([counts[g] / (mhz * 1000.0 * ms) for g in names])
        targets.append(1.0)
    for i, g in enumerate(names):
        if ridge > 0:
            row = [0.0] * len(names)
            row[i] = math.sqrt(ridge) / prior[g]
            rows.append(row)
            targets.append(math.sqrt(ridge))
    a, b = np.asarray(rows, dtype=float), np.asarray(targets, dtype=float)
    held: dict[int, float] = {}
    while True:
        free = [i for i in range(len(names)) if i not in held]
        solution = np.array([held.get(i, 0.0) for i in range(len(names))])
        if free:
            rest = b - a[:, list(held)] @ np.array(list(held.values())) if held else b
            solution[free] = np.linalg.lstsq(a[:, free], rest, rcond=None)[0]
        below = [i for i in free if solution[i] <= floor[names[i]]]
        if not below:
            return {g: float(solution[i]) for i, g in enumerate(names)}
        held.update({i: floor[names[i]] for i in below})


def fit_serial_fraction(pairs: Sequence[tuple[float, float, int]]) -> float:
    """Amdahl's serial fraction from ``(one-thread ms, n-thread ms, n)`` pairs measured together.

    Minimises ``sum_i (ms_1 * (s + (1 - s) / n) / ms_n - 1)^2`` over ``s``, clipped to [0, 1]."""
    num = den = 0.0
    for single, multi, threads in pairs:
        x = single / multi * (1.0 - 1.0 / threads)  # the residual is x * s - y
        y = 1.0 - single / (multi * threads)
        num += x * y
        den += x * x
    if den == 0:
        raise ValueError("no multi-thread pair to fit the thread scaling to")
    return min(1.0, max(0.0, num / den))


def log_sigma(pairs: Sequence[tuple[float, float]]) -> float:
    """RMS of ``log(predicted / measured)`` over ``(predicted, measured)`` pairs."""
    if not pairs:
        return 0.0
    return math.sqrt(sum(math.log(p / m) ** 2 for p, m in pairs) / len(pairs))
