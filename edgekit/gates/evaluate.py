"""Evaluate bench results against budgets (and optionally a baseline): pure functions, no I/O.

Rules, in one place:

* A check **passes** when ``measured <= limit`` (with a 1e-9 relative tolerance, so float
  round-off at exactly the limit, e.g. an accuracy drop of 1.0000000000000009 pt against 1 pt,
  does not fail).
* A check is **skipped** when it cannot be measured: an accuracy-drop budget for a result with
  no recorded accuracy (or float accuracy), a regression check for a result with no baseline
  match, an error-rate budget for a result that is not a load test. A skipped check does not
  fail the gate, but it is never reported as passed: every report shows it as "skipped" with
  the reason, and counts it apart.
* A **target's latency budget** (p50/p99 from ``targets/*.toml``) is skipped for a result not
  measured on that board (an x86 CI runner's timing is not the Pi's latency), unless
  ``local_latency``; latency budgets from flags or the project file apply wherever the user
  gives them; an emulated run's latency is never checked (``edgekit.gates.device``). Size,
  memory, accuracy and error-rate budgets apply everywhere.
* A measured value that is not a finite number, or an accuracy outside 0..1, **fails**.
* **Regression gate** (``baseline`` + ``max_regression``): results are matched to baseline results
  by variant (else model file name) and host fingerprint. The check fails only when the
  regression is above ``max_regression``, its 95 % confidence interval excludes no change, and
  the p50 grew by more than ``min_delta_ms``; a baseline from another host is "incomparable"
  (skipped, not failed). Full rules, including the single-process fallback (``p50_new -
  p50_base > 3 * sqrt(se_new**2 + se_base**2)`` with ``se = 1.2533 * sigma / sqrt(runs)`` and
  ``sigma = min(std, (p90 - p50) / 1.2816)``) and normalisation by a reference workload:
  ``edgekit.gates.regression``. Getting faster always passes.
"""

from __future__ import annotations

import math
from pathlib import PurePath
from typing import TYPE_CHECKING, Iterable, Mapping

from edgekit.core.errors import UsageError, GateFailed
from edgekit.gates.fidelity import FIDELITY_METRICS, fidelity_measure
from edgekit.gates.regression import (  # noqa: F401 - match_baseline, noise_band, timing_sigma: public here too
    DEFAULT_MIN_DELTA_MS,
    MEDIAN_SE,
    Z90,
    NOISE_K,
    compared_interval,
    host_differences,
    match_baseline,
    noise_band,
    timing_sigma,
)
from edgekit.gates.device import EMULATED_REASON, LATENCY_METRICS, LOCAL_LATENCY_FLAG, is_emulated, latency_skip, \
    measured_on, short_reason
from edgekit.gates.budgets import (
    NO_BUDGET_HELP,
    Budget,
    Budgets,
    parse_regression,
    resolve_budgets,
    result_names,
)
from edgekit.gates.results import (
    FAIL,
    PASS,
    REGRESSION_LABEL,
    REGRESSION_METRIC,
    SKIP,
    Check,
    GateReport,
    ModelRef,
    fmt_value,
)
from edgekit.gates.report import verdict

if TYPE_CHECKING:  # pragma: no cover
    import os

    from edgekit.records.result import BenchResult
    from edgekit.core.targets import Target

REL_TOL = 1e-9


def _within(measured: float, limit: float) -> bool:
    return measured <= limit + REL_TOL * max(abs(limit), 1.0)


# -- budgets ----------------------------------------------------------------------------------------


def model_names(results: Iterable["BenchResult"]) -> list[str]:
    """One unique display name per result: variant, else model file name; clashes get " #2", ..."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for i, r in enumerate(results):
        base = r.model.variant or PurePath(r.model.path.replace("\\", "/")).name or f"result {i + 1}"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base} #{seen[base]}")
    return names


def _accuracy_measure(result: "BenchResult", unit: str) -> tuple[float | None, str, str]:
    """(drop in ``unit`` or None, skip reason / failure text, context) for an accuracy budget."""
    acc, ref = result.model.accuracy, result.model.float_accuracy
    if acc is None:
        return None, "no accuracy recorded", ""
    if ref is None:
        return None, "no float accuracy recorded", ""
    for value in (acc, ref):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
            return math.nan, f"accuracy {acc!r} / float accuracy {ref!r} are not fractions in 0..1", ""
    context = f"accuracy {acc * 100:.2f}% vs float {ref * 100:.2f}%"
    if unit == "pt":
        return (ref - acc) * 100.0, "", context
    if ref == 0:
        return None, "float accuracy is 0; a relative drop is undefined", context
    return (ref - acc) / ref * 100.0, "", context


def _error_rate_measure(result: "BenchResult") -> tuple[float | None, str, str]:
    """(percent of requests that failed or None, skip reason / failure text, context): load tests only."""
    settings = result.settings if isinstance(result.settings, Mapping) else {}
    rate = settings.get("error_rate")
    if rate is None:
        return None, "no error rate recorded (not an `edgekit loadtest` result)", ""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or not 0 <= rate <= 1:
        return math.nan, f"error rate {rate!r} is not a fraction in 0..1", ""
    requests = settings.get("requests")
    context = f"of {requests} requests" if isinstance(requests, int) and not isinstance(requests, bool) else ""
    return rate * 100.0, "", context


def _llm_measure(result: "BenchResult", metric: str) -> tuple[float | None, str, str]:
    """(median time to first token in ms or decode tokens/s, skip reason, context): LLM results only."""
    llm = result.settings.get("llm") if isinstance(result.settings, Mapping) else None
    if not isinstance(llm, Mapping):
        return None, "not a language-model result (no prompt/decode figures)", ""
    figure = llm.get("ttft_ms" if metric == "ttft" else "decode_tps")
    value = figure.get("median") if isinstance(figure, Mapping) else None
    if value is None:
        return math.nan, f"the result's {metric} figure is malformed", ""
    processes = llm.get("processes")
    return value, "", f"median of {processes} processes" if isinstance(processes, int) else ""


def check_budget(name: str, result: "BenchResult", budget: Budget, local_latency: bool = False) -> Check:
    """Compare one result with one budget (``local_latency``: hold a result measured off the
    board to its target's latency budgets too)."""
    label = budget.spec.label + (" (relative)" if budget.metric == "accuracy_drop" and budget.unit == "%" else "")
    context = problem = ""
    if budget.metric == "accuracy_drop":
        measured, problem, context = _accuracy_measure(result, budget.unit)
    elif budget.metric == "error_rate":
        measured, problem, context = _error_rate_measure(result)
    elif budget.metric in ("ttft", "decode_tps"):
        measured, problem, context = _llm_measure(result, budget.metric)
    elif budget.metric in FIDELITY_METRICS:
        measured, problem, context = fidelity_measure(result, budget.metric)
    else:
        measured = {
            "size": lambda: result.size_mb,
            "p50": lambda: result.timing.p50,
            "p99": lambda: result.timing.p99,
            "peak_rss": lambda: result.memory.peak_rss,
        }[budget.metric]()

    def make(status: str, message: str, detail: str = "", value: float | None = measured) -> Check:
        return Check(name, budget.metric, label, value, budget.limit, budget.unit, status, budget.source, message, detail)

    limit_text = fmt_value(budget.limit, budget.unit)
    elsewhere = latency_skip(result, budget.metric, budget.origin, budget.device, local_latency)
    if elsewhere is not None:  # shown with what was measured, never held to the limit
        finite = isinstance(measured, (int, float)) and not isinstance(measured, bool) and math.isfinite(measured)
        return make(SKIP, f"skipped ({label} {fmt_value(measured, budget.unit) if finite else 'not measured'}, "
                          f"limit {limit_text} not applied: {elsewhere})",
                    short_reason(elsewhere, budget.device), value=float(measured) if finite else None)
    if measured is None:
        return make(SKIP, f"skipped ({problem})", problem)
    if isinstance(measured, bool) or not isinstance(measured, (int, float)) or not math.isfinite(measured):
        reason = problem or f"measured {label} is {measured!r}, not a finite number"
        return make(FAIL, reason, "not measurable", value=None)
    measured = float(measured)
    shown = fmt_value(measured, budget.unit)
    suffix = f" ({context})" if context else ""
    if budget.spec.minimum:
        if measured >= budget.limit * (1 - REL_TOL):
            return make(PASS, f"{label} {shown} ≥ {limit_text}{suffix}", value=measured)
        short = budget.limit - measured
        return make(FAIL, f"{label} {shown} < {limit_text} (by {fmt_value(short, budget.unit)}, "
                          f"{short / budget.limit * 100:.1f}% under){suffix}", value=measured)
    if _within(measured, budget.limit):
        return make(PASS, f"{label} {shown} ≤ {limit_text}{suffix}", value=measured)
    over = measured - budget.limit
    share = f", {over / budget.limit * 100:.1f}% over" if budget.limit > 0 else ""
    return make(
        FAIL,
        f"{label} {shown} > {limit_text} (by {fmt_value(over, budget.unit)}{share}){suffix}",
        value=measured,
    )


# -- regression -------------------------------------------------------------------------------------


def check_regression(
    name: str,
    result: "BenchResult",
    base: "BenchResult | None",
    max_regression: float,
    source: str = "baseline",
    min_delta_ms: float = DEFAULT_MIN_DELTA_MS,
) -> Check:
    """The p50 regression check (rules: edgekit.gates.regression)."""
    limit = max_regression * 100.0

    def make(status: str, message: str, detail: str = "", measured: float | None = None) -> Check:
        return Check(name, REGRESSION_METRIC, REGRESSION_LABEL, measured, limit, "%", status, source, message, detail)

    if base is None:
        return make(SKIP, f"skipped (no result for {name!r} in the baseline)", "no baseline match")
    if is_emulated(result) or is_emulated(base):
        return make(SKIP, f"skipped ({EMULATED_REASON})", short_reason(EMULATED_REASON, None))
    differences = host_differences(result.host, base.host)
    if differences:
        return make(SKIP, "incomparable: the baseline was measured on another host (" + "; ".join(differences[:3]) + ")",
                    "incomparable")
    new_p50, base_p50 = result.timing.p50, base.timing.p50
    values = (new_p50, base_p50, result.timing.std, base.timing.std, result.timing.p90, base.timing.p90)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        return make(FAIL, f"p50 {new_p50!r} / baseline p50 {base_p50!r} timings are not finite numbers", "not measurable")
    if base_p50 <= 0:
        return make(SKIP, f"skipped (baseline p50 is {base_p50!r} ms; a relative change is undefined)", "baseline p50 is 0")
    delta = new_p50 - base_p50
    interval = compared_interval(result, base)
    if interval is not None:
        ratio, low, high, basis = interval
        regression = (ratio - 1) * 100.0
        real = low > 1.0
        noise = (f"95% CI {fmt_value((low - 1) * 100, '%', signed=True)} to "
                 f"{fmt_value((high - 1) * 100, '%', signed=True)}, {basis}")
    else:
        regression = delta / base_p50 * 100.0
        band = noise_band(result.timing, base.timing)
        real = delta > band
        noise = f"noise ±{fmt_value(band, 'ms')}"
    head = (
        f"p50 {fmt_value(new_p50, 'ms')} vs {fmt_value(base_p50, 'ms')} in the baseline: "
        f"{fmt_value(regression, '%', signed=True)} (limit {fmt_value(limit, '%', signed=True)}, {noise})"
    )
    if _within(regression, limit):
        return make(PASS, head + ("; faster than the baseline" if regression < 0 else ""), measured=regression)
    if not real:
        return make(PASS, head + "; within noise", "within noise", measured=regression)
    if delta <= min_delta_ms:
        return make(PASS, head + f"; {fmt_value(delta, 'ms')} is below the minimum delta {fmt_value(min_delta_ms, 'ms')}",
                    "below minimum delta", measured=regression)
    return make(FAIL, head, measured=regression)


# -- the gate ---------------------------------------------------------------------------------------


def evaluate(
    results: "list[BenchResult]",
    budgets: Budgets | Iterable[Budget],
    baseline: "list[BenchResult] | None" = None,
    max_regression: float | str | None = None,
    *,
    baseline_source: str = "baseline",
    min_delta_ms: float = DEFAULT_MIN_DELTA_MS,
    local_latency: bool = False,
) -> GateReport:
    """Check every result against the budgets in force for it (and the baseline, when given).

    ``max_regression`` is a fraction (0.10) or a percentage string ("10%"); it and ``baseline``
    come together; a regression must also exceed ``min_delta_ms`` to fail. A target's latency
    budgets skip results measured off its board unless ``local_latency`` (module doc). Raises
    UsageError when there is nothing to gate or nothing to gate against.
    """
    if isinstance(min_delta_ms, bool) or not isinstance(min_delta_ms, (int, float)) or not math.isfinite(min_delta_ms) \
            or min_delta_ms < 0:
        raise UsageError(f"min delta must be a number of milliseconds, 0 or more, got {min_delta_ms!r}")
    results = list(results)
    if not results:
        raise UsageError("no bench results to gate")
    budgets = budgets if isinstance(budgets, Budgets) else Budgets(tuple(budgets))
    if baseline is not None and max_regression is None:
        raise UsageError("a baseline needs a regression limit: give --max-regression (e.g. 10%)")
    if max_regression is not None and baseline is None:
        raise UsageError("--max-regression needs a baseline bench result (--baseline main.json)")
    regression = parse_regression(max_regression) if max_regression is not None else None
    if not budgets and baseline is None:
        raise UsageError(NO_BUDGET_HELP)

    names = model_names(results)
    checks: list[Check] = []
    models: list[ModelRef] = []
    notes: list[str] = []
    used_scopes: set[str] = set()
    targets = {b.source[len("target "):] for b in budgets if b.origin == "target"}
    for name, result in zip(names, results):
        model = result.model
        models.append(ModelRef(name, model.path, model.variant, model.format, model.precision, result.target, result.mode))
        aliases = result_names(model.path, model.variant)
        used_scopes.update(a for a in aliases if a in budgets.scopes)
        in_force = budgets.for_model(aliases)
        if budgets and not in_force:
            notes.append(f"no budget applies to {name}")
        checks.extend(check_budget(name, result, budget, local_latency) for budget in in_force)
        if baseline is not None and regression is not None and result.emulated is not None:
            from edgekit.gates.instructions import check_instructions  # counts, not timings (bench --emulate)
            from edgekit.gates.regression import match_counted

            checks.append(check_instructions(name, result, match_counted(result, baseline), regression, baseline_source))
        elif baseline is not None and regression is not None:
            checks.append(check_regression(name, result, match_baseline(result, baseline), regression, baseline_source,
                                           min_delta_ms))
        if result.target and targets and result.target not in targets:
            notes.append(
                f"{name} was measured for target {result.target} but is gated with the budgets of target "
                f"{', '.join(sorted(targets))}"
            )
    notes.extend(_latency_notes(checks, results, names))
    for scope in budgets.scopes:
        if scope not in used_scopes:
            source = next(b.source for b in budgets if b.model == scope)
            notes.append(f"{source} matches no result (results are named by variant, file name, stem or path)")
    return GateReport(tuple(checks), tuple(models), tuple(notes))


def _latency_notes(checks: list[Check], results, names: list[str]) -> list[str]:
    """One note per target whose latency budgets were not applied, and one for emulated runs:
    the terminal shows notes, not every check's message, and the way out belongs in view."""
    by_name = dict(zip(names, results))
    off_board: dict[str, list[str]] = {}
    emulated: list[str] = []
    for check in checks:
        if not check.skipped or check.metric not in LATENCY_METRICS + (REGRESSION_METRIC,):
            continue
        result = by_name.get(check.model)
        if result is not None and is_emulated(result):
            if check.model not in emulated:
                emulated.append(check.model)
        elif check.source.startswith("target ") and check.detail.startswith("not measured on"):
            models = off_board.setdefault(check.source[len("target "):], [])
            if check.model not in models:
                models.append(check.model)
    notes = []
    for target, models in off_board.items():
        where = sorted({measured_on(by_name[m]) for m in models})
        notes.append(
            f"the latency budgets of target {target} were not applied to {_count(models)} measured on "
            f"{' / '.join(where)}: they hold runs on the board (edgekit bench BUNDLE --host ...); "
            f"pass {LOCAL_LATENCY_FLAG} to apply them to these results anyway"
        )
    if emulated:
        counted = all(by_name[m].emulated is not None for m in emulated)  # bench --emulate: its counts are gated
        notes.append(f"{_count(emulated)} measured under emulation: no latency "
                     f"{'budget applies to its timings' if counted else 'or regression check applies to it'} "
                     "(QEMU's timings are not a board's)")
    return notes


def _count(models: list[str]) -> str:
    return f"{len(models)} result{'s' if len(models) != 1 else ''} ({', '.join(models[:3])}{', ...' if len(models) > 3 else ''})"


def gate_results(
    results: "list[BenchResult]",
    target: "str | os.PathLike | Target | None" = None,
    overrides: Mapping[str, str | float | None] | None = None,
    config_path: "str | os.PathLike | None" = None,
    *,
    baseline: "list[BenchResult] | None" = None,
    max_regression: float | str | None = None,
    search_dir: "str | os.PathLike | None" = None,
    min_delta_ms: float = DEFAULT_MIN_DELTA_MS,
    local_latency: bool = False,
) -> GateReport:
    """Resolve budgets (flags/``overrides`` > project file > target) and evaluate ``results``.

    ``overrides`` maps budget keys (``max_size_mb``, ...) to values as the CLI flags take them
    (``"4MB"``, ``20``); ``None`` values are ignored. Without ``config_path`` the project file is
    looked for in ``search_dir`` (default: the current directory). The target's latency budgets
    hold only results measured on its board (``local_latency``: these too). Does not raise on a
    failing gate: check ``report.passed`` (or call ``raise_for_status``).
    """
    budgets = resolve_budgets(target, config_path, overrides, search_dir=search_dir)
    return evaluate(results, budgets, baseline, max_regression, min_delta_ms=min_delta_ms, local_latency=local_latency)


def raise_for_status(report: GateReport) -> GateReport:
    """Raise GateFailed (exit code 3) when a check failed; return the report otherwise."""
    if not report.passed:
        raise GateFailed(verdict(report))
    return report


__all__ = [
    "check_budget",
    "check_regression",
    "evaluate",
    "gate_results",
    "match_baseline",
    "noise_band",
    "raise_for_status",
]
