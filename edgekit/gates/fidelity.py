"""Fidelity budgets: a floor on a quantized model's fidelity to its float model, per output.

A bench result carries its file's fidelity (``ModelInfo.fidelity``: what ``edgekit quantize``
measured, summarised per output by ``edgekit.board.manifest.fidelity_summary``). A budget holds the
worst output that has the metric: ``min_cosine`` and ``min_sqnr_db`` every output, ``min_agreement``
those with classes (arg-max agreement) or sequences (per-timestep agreement), ``min_correlation``
those with one number per sample. Figures measured on synthetic inputs are said to be so; with
``--require-eval-data`` they are refused."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from edgekit.core.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.records.result import BenchResult

# budget metric -> the summary's key for it
FIDELITY_METRICS = {"cosine": "cosine", "agreement": "agreement", "sqnr": "sqnr_db", "correlation": "correlation"}
REAL_EVIDENCE = ("eval-data", "calib-holdout", "test-split")


def fidelity_measure(result: "BenchResult", metric: str) -> tuple[float | None, str, str]:
    """(the worst output's value or None, skip reason / failure text, context) for a fidelity budget."""
    fidelity = result.model.fidelity
    if not isinstance(fidelity, dict) or not isinstance(fidelity.get("outputs"), dict):
        return None, "no fidelity recorded (a file edgekit quantize judged)", ""
    key = FIDELITY_METRICS[metric]
    found = {name: out.get(key) for name, out in fidelity["outputs"].items()
             if isinstance(out, dict) and out.get(key) is not None}
    if not found:
        kinds = sorted({str(out.get("kind")) for out in fidelity["outputs"].values() if isinstance(out, dict)})
        return None, f"no output has this figure ({key}; output kinds: {', '.join(kinds) or 'none'})", ""
    name, value = min(found.items(), key=lambda item: _number(item[1]))
    evidence = fidelity.get("evidence")
    where = ("on synthetic inputs: not evidence of accuracy" if evidence not in REAL_EVIDENCE
             else f"on {evidence}")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return math.nan, f"the {key} of output {name!r} is {value!r}, not a number", ""
    return float(value), "", f"output {name!r}, worst of {len(found)}, measured {where}"


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else -math.inf


def require_evidence(results) -> None:
    """``--require-eval-data``: every result's fidelity was measured on real data, else UsageError."""
    for result in results:
        fidelity = result.model.fidelity
        evidence = fidelity.get("evidence") if isinstance(fidelity, dict) else None
        if evidence not in REAL_EVIDENCE:
            what = "has no fidelity recorded" if evidence is None else "was judged on synthetic inputs"
            raise UsageError(f"--require-eval-data: {result.model.path} {what}; quantize it with --eval-data "
                             "(or --calib) and bench it again")
