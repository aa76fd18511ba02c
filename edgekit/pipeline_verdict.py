"""What the pipeline table concludes: is int8 paying off, and which int8 variant to deploy.

Decided from confidence intervals, not single medians: a p50 ratio int8/fp32 carries the 95 %
interval of the ratio of the two variants' centres across worker processes (Welch on the log
scale, ``edgekit.bench.stats.ratio_interval``), so the between-process variance that made the
verdict flip between reruns is part of it.

* **not paying off**: the whole interval lies above ``SLOWER_THAN_FP32`` (the int8 variant is
  more than 10 % slower than fp32 with 95 % confidence). Without an interval (one worker process)
  the point ratio decides, as before.
* **recommended**: of the int8 variants whose accuracy drop is within the budget (points) and
  whose gate did not fail, the one with the lowest p50; ``pays_off`` says its interval lies
  wholly below 1 (faster than fp32 with 95 % confidence); when it does not, the line says the
  recommendation is for size only. A model without labelled data is
  judged by fidelity: its drop is ``(1 - cosine) * 100`` points (the float model scores 1.0),
  as ``edgekit quantize`` counts it, so the default 1 pt budget asks for a cosine of 0.99.
"""

from __future__ import annotations

from typing import Any, Sequence

SLOWER_THAN_FP32 = 1.10  # a ratio interval wholly above this flags an int8 variant as slower than fp32
DEFAULT_MAX_DROP_POINTS = 1.0


def p50_ratio(result, base) -> tuple[float, float | None, float | None]:
    """(ratio, CI low, CI high) of ``result``'s p50 against ``base``'s (``edgekit.bench.ratios``)."""
    from edgekit.bench.ratios import p50_ratio as ratio_of

    return ratio_of(result, base)


def slower_than_fp32(row) -> bool:
    """An int8 row that is slower than its fp32 counterpart, decided on the ratio's interval."""
    if not row.variant.startswith("int8") or row.p50_ratio is None:
        return False
    if row.p50_ratio_ci is not None:
        return row.p50_ratio_ci[0] > SLOWER_THAN_FP32
    return row.p50_ratio > SLOWER_THAN_FP32


def slower_warning(row) -> str:
    interval = "" if row.p50_ratio_ci is None else f" (95% CI {row.p50_ratio_ci[0]:.2f}-{row.p50_ratio_ci[1]:.2f}x)"
    return (f"{row.variant} is {row.p50_ratio:.2f}x the p50 of fp32 {row.format}{interval} on this machine: "
            "int8 is not paying off here; prefer another int8 variant or check the target's recipe")


def recommend(rows: Sequence, float_accuracy: float | None, max_drop_points: float | None) -> dict[str, Any] | None:
    """The int8 variant to deploy (see the module docstring), or None when none qualifies."""
    budget = DEFAULT_MAX_DROP_POINTS if max_drop_points is None else max_drop_points

    def drop(row) -> float | None:
        return drop_points(row, float_accuracy)

    candidates = [
        row for row in rows
        if row.variant.startswith("int8") and row.gate != "fail" and row.p50_ratio is not None
        and (drop(row) is None or drop(row) <= budget + 1e-9)
    ]
    if not candidates:
        return None
    best = min(candidates, key=lambda row: (row.p50_ms, row.size_bytes))
    interval = list(best.p50_ratio_ci) if best.p50_ratio_ci is not None else None
    return {
        "variant": best.variant,
        "format": best.format,
        "p50_ms": best.p50_ms,
        "p50_ratio": best.p50_ratio,
        "p50_ratio_ci": interval,
        "size_ratio": best.size_ratio,
        "accuracy_drop_points": drop(best),
        "metric": getattr(best, "metric", "accuracy"),
        "cosine": (getattr(best, "fidelity", None) or {}).get("cosine"),
        "pays_off": (interval[1] < 1.0) if interval is not None else best.p50_ratio < 1.0,
    }


def drop_points(row, float_accuracy: float | None) -> float | None:
    """The row's quality drop in points: accuracy against the float model's, or, judged by
    fidelity, ``(1 - cosine) * 100``; None when neither was measured."""
    if getattr(row, "metric", "accuracy") == "fidelity":
        cosine = (getattr(row, "fidelity", None) or {}).get("cosine")
        return None if cosine is None else (1.0 - cosine) * 100.0
    if row.accuracy is None or float_accuracy is None:
        return None
    return (float_accuracy - row.accuracy) * 100.0


def recommendation_line(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return "No int8 variant qualifies (accuracy or fidelity within budget and gate not failed)."
    interval = "" if rec["p50_ratio_ci"] is None else f" (95% CI {rec['p50_ratio_ci'][0]:.2f}-{rec['p50_ratio_ci'][1]:.2f}x)"
    if rec.get("metric") == "fidelity" and rec.get("cosine") is not None:
        drop = f", cosine {rec['cosine']:.4f} to the float model"
    else:
        drop = "" if rec["accuracy_drop_points"] is None else f", accuracy {-rec['accuracy_drop_points'] + 0.0:+.2f} pt"
    size = "" if rec["size_ratio"] is None else f", {rec['size_ratio']:.2f}x the size"
    # A variant that is not faster than fp32 with confidence is still the best int8 file to ship for
    # its size, but the line must not read like a speed-up.
    head = "Recommended" if rec.get("pays_off", True) else "Recommended for its size only (not faster than fp32 here)"
    return (f"{head}: {rec['variant']}: {rec['p50_ratio']:.2f}x the p50 of fp32 {rec['format']}{interval}"
            f"{size}{drop}")
