"""Units of budget limits: the metrics edgekit budgets, their spellings, and the parsers.

Sizes are binary, like every size edgekit reports (``BenchResult.size_mb`` is bytes / 2**20 and
peak RSS is in MiB): ``MB`` and ``MiB`` both mean 2**20 bytes, so ``"512KiB"`` == ``"512KB"`` ==
0.5 MB and ``"1GiB"`` == 1024 MB. Latency is in ms (``us``, ``µs``, ``ms``, ``s`` accepted).
Accuracy drop is in points (``pt``: absolute percentage points) or ``%`` (relative to the float
accuracy); error rate (load tests) is in ``%`` of requests. See ``edgekit.gates.budgets`` for the
full table. Units are case-insensitive.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from edgekit.core.errors import UsageError
from edgekit.core.targets import BUDGET_KEYS

_MB = 1.0
_SIZE_UNITS = {
    "b": ("MB", 1.0 / (1024 * 1024)),
    "kb": ("MB", 1.0 / 1024),
    "kib": ("MB", 1.0 / 1024),
    "mb": ("MB", _MB),
    "mib": ("MB", _MB),
    "gb": ("MB", 1024.0),
    "gib": ("MB", 1024.0),
}
_TIME_UNITS = {
    "us": ("ms", 1e-3),
    "µs": ("ms", 1e-3),  # micro sign U+00B5
    "μs": ("ms", 1e-3),  # greek mu U+03BC
    "ms": ("ms", 1.0),
    "s": ("ms", 1000.0),
}
_RATE_UNITS = {"%": ("%", 1.0)}  # a share of requests, in percent
_TOKEN_RATE_UNITS = {"tok/s": ("tok/s", 1.0), "tokens/s": ("tok/s", 1.0), "tps": ("tok/s", 1.0)}
_RATIO_UNITS = {"%": ("", 0.01)}  # fidelity ratios: 0.95, or 95%
_DB_UNITS = {"db": ("dB", 1.0)}
_ACCURACY_UNITS = {
    "pt": ("pt", 1.0),
    "pts": ("pt", 1.0),
    "pp": ("pt", 1.0),
    "%": ("%", 1.0),
}


@dataclass(frozen=True)
class Metric:
    """One budgeted quantity: its key in targets/TOML/flags, label, default unit and spellings."""

    name: str  # short id used in checks and reports: size, p50, p99, peak_rss, accuracy_drop, error_rate
    key: str  # budget key, as in targets/*.toml and edgekit.toml: max_size_mb, ...
    label: str  # human name: "size", "p99 latency", ...
    unit: str  # the unit of a bare number
    units: Mapping[str, tuple[str, float]]  # lower-case spelling -> (canonical unit, factor)
    allow_zero: bool = False  # a zero limit is meaningful (no accuracy drop at all) or not (0 ms)
    minimum: bool = False  # the limit is a floor (a rate that must stay above it), not a ceiling
    most: float | None = None  # the largest value the quantity can take (a cosine: 1), where it has one

    @property
    def spellings(self) -> str:
        shown = {"b": "B", "kb": "KB", "kib": "KiB", "mb": "MB", "mib": "MiB", "gb": "GB", "gib": "GiB"}
        return ", ".join(shown.get(u, u) for u in self.units if u != "μs")

    @property
    def canonical_units(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(unit for unit, _ in self.units.values()))


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("size", "max_size_mb", "size", "MB", _SIZE_UNITS),
        Metric("p50", "max_p50_ms", "p50 latency", "ms", _TIME_UNITS),
        Metric("p99", "max_p99_ms", "p99 latency", "ms", _TIME_UNITS),
        Metric("peak_rss", "max_peak_rss_mb", "peak RSS", "MB", _SIZE_UNITS),
        Metric("accuracy_drop", "max_accuracy_drop", "accuracy drop", "pt", _ACCURACY_UNITS, allow_zero=True),
        Metric("error_rate", "max_error_rate", "error rate", "%", _RATE_UNITS, allow_zero=True),
        # language models (``edgekit bench`` on an LLM artifact: settings["llm"])
        Metric("ttft", "max_ttft_ms", "time to first token", "ms", _TIME_UNITS),
        Metric("decode_tps", "min_decode_tps", "decode rate", "tok/s", _TOKEN_RATE_UNITS, minimum=True),
        # fidelity to the float model, worst output (``edgekit.gates.fidelity``)
        Metric("cosine", "min_cosine", "fidelity cosine", "", _RATIO_UNITS, allow_zero=True, minimum=True, most=1.0),
        Metric("agreement", "min_agreement", "fidelity agreement", "", _RATIO_UNITS, allow_zero=True, minimum=True,
               most=1.0),
        Metric("sqnr", "min_sqnr_db", "fidelity SQNR", "dB", _DB_UNITS, allow_zero=True, minimum=True),
        Metric("correlation", "min_correlation", "fidelity correlation", "", _RATIO_UNITS, allow_zero=True,
               minimum=True, most=1.0),
    )
}
METRIC_BY_KEY: dict[str, Metric] = {m.key: m for m in METRICS.values()}

_NUMBER_WITH_UNIT = re.compile(
    r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[^\s\d]*)\s*$"
)


def _number(value: Any, what: str, allowed: str) -> tuple[float, str]:
    """Split ``value`` (str or number) into a float and the unit spelling ("" for a bare number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UsageError(f"{what}: {value!r} is not a number; write a number with a unit ({allowed})")
    if isinstance(value, str):
        match = _NUMBER_WITH_UNIT.match(value)
        if match is None:
            raise UsageError(f"{what}: cannot read {value!r}; write a number with a unit ({allowed})")
        text, unit = match["num"], match["unit"]
    else:
        text, unit = value, ""
    try:
        number = float(text)
    except OverflowError:  # an int beyond the float range
        raise UsageError(f"{what}: {value!r} is not a finite number") from None
    if not math.isfinite(number):
        raise UsageError(f"{what}: {value!r} is not a finite number")
    if number < 0:
        raise UsageError(f"{what}: {value!r} is negative; a limit must be zero or more")
    return number, unit


def parse_limit(metric: str | Metric, value: Any, where: str | None = None) -> tuple[float, str]:
    """Read one limit. Returns ``(limit, canonical unit)``; raises UsageError naming value and units.

    >>> parse_limit("size", "512KiB")
    (0.5, 'MB')
    >>> parse_limit("p99", "0.02s")
    (20.0, 'ms')
    >>> parse_limit("accuracy_drop", "0.5%")
    (0.5, '%')
    """
    spec = metric if isinstance(metric, Metric) else get_metric(metric)
    what = where or spec.key
    allowed = (f"units: {spec.spellings}; a bare number means {spec.unit}" if spec.unit
               else f"a fraction such as 0.95, or a percentage ({spec.spellings})")
    number, spelling = _number(value, what, allowed)
    if spelling == "":
        unit, factor = spec.unit, 1.0
    else:
        try:
            unit, factor = spec.units[spelling.lower()]
        except KeyError:
            raise UsageError(f"{what}: unknown unit {spelling!r} in {value!r}; {allowed}") from None
    limit = number * factor
    if not math.isfinite(limit):
        raise UsageError(f"{what}: {value!r} is too large")
    if limit == 0 and not spec.allow_zero:
        raise UsageError(f"{what}: {value!r} is zero; a {spec.label} budget must be above zero")
    return limit, unit


def parse_regression(value: Any, where: str = "max_regression") -> float:
    """Read a regression allowance as a fraction: ``"10%"`` and ``0.10`` both give 0.10.

    A bare number is a fraction; one above 1 is refused as ambiguous (did ``10`` mean 10 %?).
    """
    allowed = "write a percentage such as '10%' or a fraction such as 0.10"
    number, spelling = _number(value, where, allowed)
    if spelling == "%":
        return number / 100.0
    if spelling:
        raise UsageError(f"{where}: unknown unit {spelling!r} in {value!r}; {allowed}")
    if number > 1:
        raise UsageError(f"{where}: {value!r} is ambiguous (a fraction above 1); {allowed} (e.g. '{number:g}%')")
    return number


def get_metric(name: str) -> Metric:
    """A metric by short name (``size``) or budget key (``max_size_mb``)."""
    if name in METRICS:
        return METRICS[name]
    if name in METRIC_BY_KEY:
        return METRIC_BY_KEY[name]
    raise UsageError(f"unknown budget {name!r}; allowed: {', '.join(BUDGET_KEYS)}")
