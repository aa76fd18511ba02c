"""Each variant against its baseline, measured in the same run: the fp32 variant of the same format.

The pipeline's table, ``pipeline.md`` and ``report.html`` (and ``edgekit bench --html``) read the
same figures from here: size and p50 as ratios to that baseline, the p50 ratio with the 95 %
interval of the ratio of the two variants' centres across worker processes when the bench ran
several (``edgekit.records.stats.ratio_interval``).
"""

from __future__ import annotations
from edgekit.records.stats import ratio_interval


def p50_ratio(result, base) -> tuple[float, float | None, float | None]:
    """(ratio, CI low, CI high) of ``result``'s p50 against ``base``'s; no interval without spreads."""
    a, b = getattr(result, "spread", None), getattr(base, "spread", None)
    if a is not None and b is not None and a.processes > 1 and b.processes > 1 and a.center > 0 and b.center > 0:
        return ratio_interval(a, b)
    return result.timing.p50 / base.timing.p50, None, None


def fp32_baselines(results) -> list[int | None]:
    """For each result, the index of the fp32 result of the same format (the first one), or None."""
    first: dict[str, int] = {}
    for index, res in enumerate(results):
        if res.model.precision == "fp32" and (res.model.variant or "fp32").startswith("fp32"):
            first.setdefault(res.model.format, index)
    return [first.get(res.model.format) for res in results]
