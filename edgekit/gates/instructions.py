"""The regression check on emulated instruction counts (``edgekit bench --emulate`` results).

Rules (``edgekit.gates.regression``): the per-inference count on the target's core against the
baseline's; fails above ``max_regression``, with no statistical band (two counts of one program
differ by at most ``CALL_NOISE`` instructions per inference, a change that reads as none);
incomparable (skipped) when core, threads or counting setup differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgekit.gates.regression import count_change
from edgekit.gates.results import FAIL, PASS, SKIP, Check, fmt_value
from edgekit.records.instructions import CALL_NOISE, millions

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.records.result import BenchResult

METRIC = "instructions_regression"
LABEL = "instructions regression"


def check_instructions(name: str, result: "BenchResult", base: "BenchResult | None", max_regression: float,
                       source: str = "baseline") -> Check:
    limit = max_regression * 100.0

    def make(status: str, message: str, detail: str = "", measured: float | None = None) -> Check:
        return Check(name, METRIC, LABEL, measured, limit, "%", status, source, message, detail)

    if base is None:
        return make(SKIP, f"skipped (no result with instruction counts for {name!r} in the baseline; "
                          "make it with edgekit bench --emulate)", "no baseline match")
    change, why = count_change(result.emulated, base.emulated)
    if why:
        return make(SKIP, "incomparable: the baseline was counted differently (" + "; ".join(why[:3]) + ")",
                    "incomparable")
    new, old = result.emulated["instructions"]["per_run"], base.emulated["instructions"]["per_run"]
    head = (f"{millions(new)} instructions per inference on {result.emulated['cpu']} vs {millions(old)} in the baseline "
            f"({new:,} vs {old:,}): {fmt_value(change, '%', signed=True)} "
            f"(limit {fmt_value(limit, '%', signed=True)}; changes of at most {CALL_NOISE:,} instructions, the "
            "runner's per-call noise, read as none)")
    if change <= limit * (1 + 1e-9):
        return make(PASS, head + ("; fewer than the baseline" if change < 0 else ""), measured=change)
    return make(FAIL, head, measured=change)
