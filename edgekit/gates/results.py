"""What a gate produces: checks, their statuses, the report that holds them, and the number
formatting every rendering shares. Data only: ``evaluate.py`` builds these, ``report.py`` renders
them; both depend on this module, neither on the other's internals."""

from __future__ import annotations

import math
from dataclasses import dataclass
from edgekit.gates.units import METRICS

PASS, FAIL, SKIP = "pass", "fail", "skip"
STATUSES = (PASS, FAIL, SKIP)
REGRESSION_METRIC = "p50_regression"
REGRESSION_LABEL = "p50 regression"


@dataclass(frozen=True)
class ModelRef:
    """The result a group of checks belongs to."""

    name: str  # unique display name: variant, else file name (with " #2" on a clash)
    path: str
    variant: str
    format: str
    precision: str
    target: str | None
    mode: str


@dataclass(frozen=True)
class Check:
    """One (result, budget) comparison. ``measured`` and ``limit`` are in ``unit``."""

    model: str
    metric: str  # size | p50 | p99 | peak_rss | accuracy_drop | error_rate | p50_regression
    label: str
    measured: float | None
    limit: float | None
    unit: str
    status: str  # pass | fail | skip
    source: str
    message: str
    detail: str = ""  # short qualifier shown next to the status: "within noise", "no accuracy recorded"

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check status {self.status!r}; allowed: {', '.join(STATUSES)}")

    @property
    def passed(self) -> bool:
        """Verified to be within budget (a skipped check is not)."""
        return self.status == PASS

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    @property
    def skipped(self) -> bool:
        return self.status == SKIP


@dataclass(frozen=True)
class GateReport:
    checks: tuple[Check, ...]
    models: tuple[ModelRef, ...]
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True when no check failed (skipped checks do not fail the gate)."""
        return not any(c.failed for c in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.failed)

    @property
    def skipped(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.skipped)

    @property
    def counts(self) -> dict[str, int]:
        return {
            "checks": len(self.checks),
            "passed": sum(c.passed for c in self.checks),
            "failed": sum(c.failed for c in self.checks),
            "skipped": sum(c.skipped for c in self.checks),
        }

    def checks_for(self, model: str) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.model == model)


def fmt_number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    size = abs(value)
    if size == 0:
        return "0"
    if size >= 100:
        return f"{value:.1f}"
    if size >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def fmt_value(value: float | None, unit: str, signed: bool = False) -> str:
    if value is None:
        return "—"
    text = fmt_number(value)
    if signed and math.isfinite(value) and value > 0:
        text = "+" + text
    return f"{text}%" if unit == "%" else f"{text} {unit}" if unit else text


def is_floor(metric: str) -> bool:
    """Whether a budget on ``metric`` is a floor (a rate, a fidelity: ``gates.units.Metric.minimum``)."""
    return metric in METRICS and METRICS[metric].minimum


def fmt_limit(check: Check) -> str:
    if check.limit is None:
        return "—"
    floor = is_floor(check.metric)
    return ("≥ " if floor else "≤ ") + fmt_value(check.limit, check.unit, signed=check.metric.endswith("_regression"))


def fmt_measured(check: Check) -> str:
    return fmt_value(check.measured, check.unit, signed=check.metric.endswith("_regression"))
