"""The regression gate: is this build slower than the baseline, beyond doubt and beyond a floor?

Pure functions, no I/O. A p50 regression **fails** only when all three hold:

1. the regression is above the limit (``max_regression``, e.g. 10 %);
2. it is real: its 95 % confidence interval lies wholly above 0. With results from several worker
   processes (``edgekit bench --processes N``) the interval is Welch's, on the log ratio of the
   mean process medians, so the between-process variance is in it (``edgekit.records.stats``).
   Results from one process fall back to a band from the per-call jitter (``noise_band``);
3. it is large enough to matter: the p50 grew by more than ``min_delta_ms`` (default 0.005 ms).

Otherwise it passes, saying why ("within noise", "below the minimum delta").

**Comparable hosts.** A baseline is keyed by host fingerprint (CPU model, cores, machine,
frequency governor, Python and runtime versions; ``host_fingerprint``). A result is compared with
the baseline result of the same variant measured on a host with the same fingerprint; when the
baseline holds that variant only from other hosts the check is skipped as **incomparable**, not
failed. A baseline document may hold results from several hosts.

**Normalised by a reference workload** (``edgekit bench --reference``): when both results carry
the same reference workload, each round's model median is divided by the reference's median of the
same round, so what the machine's state did to both cancels out; the comparison is then on those
per-round ratios.
"""

from __future__ import annotations

import math
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Iterable
from edgekit.records.instructions import CALL_NOISE, differences
from edgekit.records.stats import ratio_interval, spread_of

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.records.result import BenchResult, Timing
    from edgekit.records.stats import Spread

DEFAULT_MIN_DELTA_MS = 0.005  # 5 us: below it, timer and dispatch jitter of a Python loop
NOISE_K = 3.0
Z90 = 1.2815515655446004  # p90 of the standard normal: p90 - p50 = 1.2816 sigma
MEDIAN_SE = math.sqrt(math.pi / 2)  # standard error of a sample median = 1.2533 sigma / sqrt(n)
FINGERPRINT_KEYS = ("machine", "cpu_model", "logical_cores", "usable_cores", "cpufreq_governor", "python", "runtimes",
                    "emulated")


# -- host fingerprint -------------------------------------------------------------------------------


def host_fingerprint(host: dict[str, Any] | None) -> dict[str, Any]:
    """The facts of a host that change timings; missing facts are None."""
    host = host or {}
    out = {key: host.get(key) for key in FINGERPRINT_KEYS}
    if isinstance(out["runtimes"], dict):
        out["runtimes"] = {k: v for k, v in sorted(out["runtimes"].items()) if v is not None}
    return out


def host_differences(new: dict[str, Any] | None, base: dict[str, Any] | None) -> list[str]:
    """Human-readable differences between two hosts' fingerprints (empty: comparable).

    A fact recorded on one side only is not a difference (older results record fewer facts).
    """
    a, b = host_fingerprint(new), host_fingerprint(base)
    diffs = []
    for key in FINGERPRINT_KEYS:
        x, y = a[key], b[key]
        if key == "runtimes" and isinstance(x, dict) and isinstance(y, dict):
            diffs += [f"{name} {x[name]} vs {y[name]}" for name in sorted(set(x) & set(y)) if x[name] != y[name]]
        elif x is not None and y is not None and x != y:
            diffs.append(f"{key.replace('_', ' ')} {x!r} vs {y!r}")
    return diffs


# -- matching -------------------------------------------------------------------------------------


def _same_model(result: "BenchResult", base: "BenchResult") -> bool:
    if result.model.variant and base.model.variant:
        return result.model.variant == base.model.variant
    name = PurePath(result.model.path.replace("\\", "/")).name
    return bool(name) and PurePath(base.model.path.replace("\\", "/")).name == name


def match_baseline(result: "BenchResult", baseline: Iterable["BenchResult"]) -> "BenchResult | None":
    """The baseline result for ``result``: same variant when both record one, else same file name;
    of those, the one from a host with the same fingerprint, else the first (then incomparable)."""
    same = [base for base in baseline if _same_model(result, base)]
    for base in same:
        if not host_differences(result.host, base.host):
            return base
    return same[0] if same else None


# -- statistics ----------------------------------------------------------------------------------


def timing_sigma(timing: "Timing") -> float:
    """Per-inference jitter of one run: min(std, (p90 - p50) / 1.2816), never negative."""
    robust = max(timing.p90 - timing.p50, 0.0) / Z90
    return max(min(timing.std, robust), 0.0)


def noise_band(new: "Timing", base: "Timing", k: float = NOISE_K) -> float:
    """Milliseconds: a p50 difference up to this is indistinguishable from per-call noise (one process)."""
    se_new = MEDIAN_SE * timing_sigma(new) / math.sqrt(max(new.runs, 1))
    se_base = MEDIAN_SE * timing_sigma(base) / math.sqrt(max(base.runs, 1))
    return k * math.hypot(se_new, se_base)


def _normalised(result: "BenchResult") -> "Spread | None":
    """Per-round model/reference medians as a spread (None without a usable reference)."""
    ref, spread = result.reference, result.spread
    if not ref or spread is None or len(ref["process_p50"]) != spread.processes:
        return None
    return spread_of([m / r for m, r in zip(spread.process_p50, ref["process_p50"])])


def compared_interval(result: "BenchResult", base: "BenchResult") -> tuple[float, float, float, str] | None:
    """(ratio new/base, 95 % CI low, high, basis) across worker processes, or None when either side
    has fewer than two processes. Normalised by the reference workload when both carry the same one."""
    a, b = result.spread, base.spread
    if a is None or b is None or a.processes < 2 or b.processes < 2 or a.center <= 0 or b.center <= 0:
        return None
    if result.reference and base.reference and result.reference["name"] == base.reference["name"]:
        na, nb = _normalised(result), _normalised(base)
        if na is not None and nb is not None:
            return (*ratio_interval(na, nb), f"normalised by {result.reference['name']}")
    return (*ratio_interval(a, b), f"{a.processes} vs {b.processes} worker processes")


# -- emulated instruction counts (bench --emulate) ---------------------------------------------------
#
# Executed instructions on the target's core, counted under QEMU, do not depend on the host's load:
# repeated counts of one artifact agree to within about a hundred instructions per inference, at worst
# ``CALL_NOISE`` (``edgekit.records.instructions``: 2,000; 126 in digits-mobilenet's 4.8 M, 2.6e-5), so the
# limit is applied as it stands, with no statistical band, and a 1 % regression is caught. A change of
# at most CALL_NOISE instructions reads as none (a model under ~200 k instructions per inference cannot
# resolve 1 %, and its check says the change is within the noise). Two counts compare only when core,
# threads, QEMU, plugin, C library and runner agree (``edgekit.records.instructions.COMPARABLE``);
# otherwise the check is incomparable.


def match_counted(result: "BenchResult", baseline: Iterable["BenchResult"]) -> "BenchResult | None":
    """The baseline result with instruction counts for ``result``'s model: a comparable one first."""
    same = [base for base in baseline if base.emulated is not None and _same_model(result, base)]
    for base in same:
        if not differences(result.emulated, base.emulated):
            return base
    return same[0] if same else None


def count_change(new: dict, base: dict) -> tuple[float, list[str]]:
    """(per-run change in %, why incomparable) of two ``emulated`` sections."""
    why = differences(new, base)
    a, b = new["instructions"]["per_run"], base["instructions"]["per_run"]
    if b <= 0:
        return (0.0 if a == 0 else math.inf), why

    return (0.0 if abs(a - b) <= CALL_NOISE else (a - b) / b * 100.0), why
