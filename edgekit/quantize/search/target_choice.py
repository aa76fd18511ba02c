"""``quantize --auto`` for a board: the candidates compared by their cost on the target's emulated
core (``edgekit.estimate.on_target``), not by this host's timings.

For each format whose files the counter runs (ExecuTorch, ONNX), the float file and every candidate
built for it are counted on the target's core; a candidate whose cost is not below the float
file's is "slower than float" there, and the cheapest within the accuracy budget is chosen. Where
emulation cannot run, the host's timings decide, as before, and the reason is returned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence
from edgekit.estimate.on_target import Counter, Unavailable, counted_formats, no_emulation


def decide_on_target(timed: Sequence, floats: Sequence[tuple[str, Path]], target, budget: float, *,
                     emulate: bool, progress: Callable[[str], None]) -> dict | None:
    """Set ``target`` (the cost's dict) on each counted candidate and re-mark ``slower_than_float`` and
    ``meets_budget`` on it. Returns ``{"basis": label}`` when the target's costs decided, ``{"not_counted":
    reason}`` when the host's timings did for that reason, None when no candidate is of a counted format."""
    floats_by_format = {fmt: path for fmt, path in floats if fmt in counted_formats()}
    counted = [c for c in timed if c.format in floats_by_format]
    if not counted:
        return None
    off = no_emulation(target, emulate)
    if off:
        return {"not_counted": off}
    counter = Counter(target, None, progress)
    try:
        base = {fmt: counter.cost(path, fmt) for fmt, path in floats_by_format.items()}
        costs = [(cand, counter.cost(Path(cand.path), cand.format)) for cand in counted]
    except Unavailable as exc:
        return {"not_counted": str(exc)}
    for cand, cost in costs:
        cand.target = {**cost.to_dict(), "ratio_to_float": cost.cost / base[cand.format].cost}
        cand.slower_than_float = cost.cost >= base[cand.format].cost
        cand.meets_budget = cand.within(budget) and not cand.slower_than_float
    return {"basis": costs[0][1].label}


def choice_key(cand) -> float:
    """What picks the chosen candidate of a format: its cost on the target, else its host p50."""
    if cand.target is not None:
        return cand.target["ratio_to_float"]
    return cand.p50_ms if cand.p50_ms is not None else float("inf")
