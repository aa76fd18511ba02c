"""What each pipeline variant costs on the target's board, as the target decisions use it.

A variant's cost has one basis, the first that applies:

* **measured**: its bench ran on the target's board (``edgekit.gates.device.on_device``: the host's
  arch and core are the target's): the timing is the board's;
* **estimated**: a file the counter runs (ExecuTorch ``.pte``, ONNX), counted on the target's core under emulation
  (``edgekit.emulate.icount``, one thread), or a Python bundle of a format that only runs in one (ncnn, LiteRT:
  ``edgekit.pipeline.python_counts``, Python's per-call work included), and priced by the core's fitted cost model
  (``edgekit.estimate``) at the target's clock and threads, with its band. A core without a fitted
  model still has its instruction count, and ratios between variants are taken on it;
* **host**: none of those; the host's timing, which says little about the board. Each such row
  says why (emulation off, QEMU unavailable, a format the counter does not run).

The recommendation, the "int8 is not paying off" warning and the target's latency budgets use the
first two (``edgekit.pipeline.verdict``, ``apply_to_gate``); host timings stay in the table as host figures.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from edgekit.estimate.on_target import (
    ESTIMATED, HOST, MEASURED, Counter, TargetCost, Unavailable, counted_formats, no_emulation,
)
from edgekit.gates.device import Device, is_emulated, measured_on, on_device
from edgekit.gates.results import FAIL, PASS, GateReport, fmt_value

__all__ = ["ESTIMATED", "HOST", "MEASURED", "TargetCost", "apply_to_gate", "basis_line", "python_costs", "target_costs",
           "target_ratios"]
Progress = Callable[[str], None]


def target_costs(models: Sequence[tuple[Path, str]], results, target, *, emulate: bool, threads: int | None,
                 progress: Progress) -> list[TargetCost]:
    """One ``TargetCost`` per ``(model file, format)`` with its bench result (same order)."""
    device = Device.of(target)
    off = no_emulation(target, emulate)
    from edgekit.pipeline.python_counts import PythonCounter, counted_in_python

    counter = Counter(target, threads, progress)  # the native row runs the static .pte again: counted once
    in_python = PythonCounter(target, threads, progress)
    counted = counted_formats()
    out = []
    for (path, fmt), result in zip(models, results):
        if not is_emulated(result) and on_device(result, device):
            out.append(TargetCost(MEASURED, f"measured on {measured_on(result)}", result.timing.p50))
        elif off or (fmt not in counted and not counted_in_python(fmt)):
            out.append(TargetCost(HOST, "host timing", note=off or _not_counted(fmt, counted)))
        else:
            try:
                out.append(counter.cost(Path(path), fmt) if fmt in counted else in_python.cost(Path(path), fmt))
            except Unavailable as exc:
                out.append(TargetCost(HOST, "host timing", note=str(exc)))
    return out


def python_costs(models: Sequence[tuple[Path, str]], costs: Sequence[TargetCost], target, *, threads: int | None,
                 progress: Progress) -> list[TargetCost | None]:
    """For each variant edgekit-run counted whose format also runs on the board in a Python bundle of
    its runtime's wheel (ONNX: ONNX Runtime's), that bundle's count; None for the rest.

    Both run the same kernels, but the wheel is its own build of the library with Python's per-call
    work on top: on a large model it can be the cheaper (all-MiniLM-L6-v2 on Cortex-A76: 0.999x
    edgekit-run's), so the runtime choice ranks both rather than assume."""
    from edgekit.pipeline.python_counts import PythonCounter, counted_in_python

    counted = counted_formats()
    in_python = PythonCounter(target, threads, progress)
    out: list[TargetCost | None] = []
    for (path, fmt), cost in zip(models, costs):
        if not (cost.on_target and cost.instructions and fmt in counted and counted_in_python(fmt)):
            out.append(None)
            continue
        try:
            out.append(in_python.cost(Path(path), fmt))
        except Unavailable as exc:
            out.append(TargetCost(HOST, "host timing", note=str(exc)))
    return out


def _not_counted(fmt: str, counted: Sequence[str]) -> str:
    from edgekit import formats

    in_python = [name for name in formats.names() if formats.get(name).board.counted_in_python and name not in counted]
    python = f" and Python bundles of {_listed(in_python)}" if in_python else ""
    return f"not counted: emulated counts run {_listed(counted)} files (edgekit-run){python}, not {fmt}"


def _listed(names: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def target_ratios(formats: Sequence[str], variants: Sequence[str], costs: Sequence[TargetCost]) -> list[float | None]:
    """Each variant's target cost against the fp32 variant of its format, where both are on the target."""
    fp32 = {fmt: cost for fmt, variant, cost in zip(formats, variants, costs) if variant.startswith("fp32")}
    out = []
    for fmt, cost in zip(formats, costs):
        base = fp32.get(fmt)
        usable = base is not None and cost.on_target and base.basis == cost.basis and base.cost and cost.cost
        out.append(cost.cost / base.cost if usable else None)
    return out


def apply_to_gate(report, costs: Sequence[TargetCost], target):
    """The gate with each target latency budget that was skipped off the board held to the variant's
    estimate instead (pass/fail on the estimate, its band in the message)."""
    by_model = {ref.name: cost for ref, cost in zip(report.models, costs)}
    checks = []
    for check in report.checks:
        cost = by_model.get(check.model)
        if (cost is None or cost.basis != ESTIMATED or not check.skipped or check.metric not in ("p50", "p99")
                or not check.source.startswith("target ") or not check.detail.startswith("not measured on")):
            checks.append(check)
            continue
        within = cost.ms <= check.limit
        message = (f"{check.label} {cost.label}: {fmt_value(cost.ms, 'ms')} (band {fmt_value(cost.low_ms, 'ms')}-"
                   f"{fmt_value(cost.high_ms, 'ms')}) {'≤' if within else '>'} {fmt_value(check.limit, 'ms')}; the "
                   f"estimate is of a typical run on {target.name}, not measured")
        checks.append(replace(check, measured=cost.ms, status=PASS if within else FAIL, message=message,
                              detail="estimated"))
    estimated = sum(1 for old, new in zip(report.checks, checks) if old is not new)
    notes = report.notes
    if estimated:
        notes = tuple(n for n in notes if not n.startswith(f"the latency budgets of target {target.name} were not"))
        notes += (f"{estimated} latency check(s) of target {target.name} held to the estimate on its emulated core "
                  "(edgekit.estimate), not to this host's timing",)
    return GateReport(tuple(checks), report.models, notes)


def basis_line(targets: Sequence[dict | None], target_name: str) -> str:
    """One line under the table: what the target column holds (rows' ``TargetCost.to_dict()``), or why it is empty."""
    on_target = [t for t in targets if t and t["basis"] != HOST]
    host = sorted({t["note"] for t in targets if t and t["basis"] == HOST and t["note"]})
    if on_target:
        labels = sorted({t["label"] for t in on_target})
        tail = f"; other rows: {'; '.join(host)}" if host else ""
        return (f"{target_name} column: {'; '.join(labels)} (ratio vs fp32 of the same format){tail}. "
                "p50/p99 are this host's timings.")
    return (f"{target_name} column: no figure for the board ({'; '.join(host) or 'nothing counted'}); decisions use "
            "this host's timings.")
