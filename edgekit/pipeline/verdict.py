"""What the pipeline table concludes: is int8 paying off, and which int8 variant to deploy.

Decided from confidence intervals, not single medians: a p50 ratio int8/fp32 carries the 95 %
interval of the ratio of the two variants' centres across worker processes (Welch on the log
scale, ``edgekit.records.stats.ratio_interval``), so the between-process variance that made the
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

For the target (``edgekit.pipeline.target``): when variants have a cost estimated (or counted) on
the target's emulated core, both decisions are taken on it instead of this host's timings: the
candidates are the int8 variants with such a figure, the best has the lowest, it pays off when its
ratio to fp32 is below 1, and it is slower than fp32 when that ratio exceeds ``SLOWER_THAN_FP32``.
Counts are deterministic, so the ratio has no sampling interval. A variant measured on the board
itself keeps the interval rules above, labelled as measured there.
"""

from __future__ import annotations

from typing import Any, Sequence
from edgekit.bench.ratios import p50_ratio as ratio_of

SLOWER_THAN_FP32 = 1.10  # a ratio interval wholly above this flags an int8 variant as slower than fp32
DEFAULT_MAX_DROP_POINTS = 1.0


def p50_ratio(result, base) -> tuple[float, float | None, float | None]:
    """(ratio, CI low, CI high) of ``result``'s p50 against ``base``'s (``edgekit.bench.ratios``)."""
    return ratio_of(result, base)


def emulated_basis(row) -> bool:
    """The row's target figure comes from emulation (estimated or counted), with a ratio to fp32."""
    return getattr(row, "target_ratio", None) is not None and (row.target or {}).get("basis") in ("estimated", "counted")


def slower_than_fp32(row) -> bool:
    """An int8 row that is slower than its fp32 counterpart, decided on the target's emulated cost
    when it has one, else on the timing ratio's interval."""
    if not row.variant.startswith("int8"):
        return False
    if emulated_basis(row):
        return row.target_ratio > SLOWER_THAN_FP32
    if row.p50_ratio is None:
        return False
    if row.p50_ratio_ci is not None:
        return row.p50_ratio_ci[0] > SLOWER_THAN_FP32
    return row.p50_ratio > SLOWER_THAN_FP32


def slower_warning(row, target_name: str = "the target") -> str:
    if emulated_basis(row):
        return (f"{row.variant} costs {row.target_ratio:.2f}x fp32 {row.format} on {target_name} ({row.target['label']}): "
                f"int8 is not paying off on {target_name}; prefer another int8 variant or check the target's recipe")
    where = "on this machine" if (getattr(row, "target", None) or {}).get("basis") != "measured" else \
        row.target["label"]
    interval = "" if row.p50_ratio_ci is None else f" (95% CI {row.p50_ratio_ci[0]:.2f}-{row.p50_ratio_ci[1]:.2f}x)"
    return (f"{row.variant} is {row.p50_ratio:.2f}x the p50 of fp32 {row.format}{interval} {where}: "
            "int8 is not paying off here; prefer another int8 variant or check the target's recipe")


def recommend(rows: Sequence, float_accuracy: float | None, max_drop_points: float | None) -> dict[str, Any] | None:
    """The int8 variant to deploy (see the module docstring), or None when none qualifies."""
    budget = DEFAULT_MAX_DROP_POINTS if max_drop_points is None else max_drop_points

    def drop(row) -> float | None:
        return drop_points(row, float_accuracy)

    candidates = [
        row for row in rows
        if row.variant.startswith("int8") and row.gate != "fail" and (row.p50_ratio is not None or emulated_basis(row))
        and (drop(row) is None or drop(row) <= budget + 1e-9)
    ]
    on_target = [row for row in candidates if emulated_basis(row)]
    if on_target:
        best = min(on_target, key=lambda row: (row.target_ratio, row.size_bytes))
        return {**_recommended(best, drop(best)), "basis": best.target["label"], "target_ratio": best.target_ratio,
                "target": best.target, "pays_off": best.target_ratio < 1.0}
    candidates = [row for row in candidates if row.p50_ratio is not None]
    if not candidates:
        return None
    best = min(candidates, key=lambda row: (row.p50_ms, row.size_bytes))
    measured = (getattr(best, "target", None) or {}).get("basis") == "measured"
    interval = list(best.p50_ratio_ci) if best.p50_ratio_ci is not None else None
    return {**_recommended(best, drop(best)), "basis": best.target["label"] if measured else "host timing",
            "pays_off": (interval[1] < 1.0) if interval is not None else best.p50_ratio < 1.0}


def _recommended(best, drop: float | None) -> dict[str, Any]:
    interval = list(best.p50_ratio_ci) if best.p50_ratio_ci is not None else None
    return {
        "variant": best.variant,
        "format": best.format,
        "p50_ms": best.p50_ms,
        "p50_ratio": best.p50_ratio,
        "p50_ratio_ci": interval,
        "size_ratio": best.size_ratio,
        "accuracy_drop_points": drop,
        "metric": getattr(best, "metric", "accuracy"),
        "cosine": (getattr(best, "fidelity", None) or {}).get("cosine"),
        "evidence": (getattr(best, "fidelity", None) or {}).get("evidence"),  # what the fidelity was measured on
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
        from edgekit.fidelity.evidence import REAL, SYNTHETIC_NOTE

        synthetic = rec.get("evidence") is not None and rec["evidence"] not in REAL
        drop = f", cosine {rec['cosine']:.4f} to the float model" + (f" ({SYNTHETIC_NOTE})" if synthetic else "")
    else:
        drop = "" if rec["accuracy_drop_points"] is None else f", accuracy {-rec['accuracy_drop_points'] + 0.0:+.2f} pt"
    size = "" if rec["size_ratio"] is None else f", {rec['size_ratio']:.2f}x the size"
    # A variant that is not faster than fp32 with confidence is still the best int8 file to ship for
    # its size, but the line must not read like a speed-up.
    if rec.get("target_ratio") is not None:
        head = "Recommended" if rec.get("pays_off", True) else "Recommended for its size only (not cheaper than fp32 there)"
        target = rec.get("target") or {}
        figure = f" (~{target['ms']:.3g} ms)" if target.get("ms") is not None else ""
        host = "" if rec["p50_ratio"] is None else f"; on this host {rec['p50_ratio']:.2f}x the p50"
        return (f"{head} for the target, {rec['basis']}: {rec['variant']}: {rec['target_ratio']:.2f}x the cost of fp32 "
                f"{rec['format']}{figure}{host}{size}{drop}")
    head = "Recommended" if rec.get("pays_off", True) else "Recommended for its size only (not faster than fp32 here)"
    basis = "" if rec.get("basis", "host timing") == "host timing" else f" ({rec['basis']})"
    return (f"{head}: {rec['variant']}: {rec['p50_ratio']:.2f}x the p50 of fp32 {rec['format']}{interval}"
            f"{size}{drop}{basis}")
