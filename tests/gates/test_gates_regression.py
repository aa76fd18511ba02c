"""The regression gate CI can trust: intervals across processes, a minimum delta, host keys, a reference."""

from __future__ import annotations

import dataclasses

import pytest

from edgekit.records.stats import spread_of
from edgekit.core.errors import UsageError
from edgekit.gates.evaluate import evaluate
from edgekit.gates.regression import host_differences, host_fingerprint, match_baseline
from edgekit.gates.results import FAIL, PASS, SKIP
from bench_results import make_result

HOST = {"machine": "aarch64", "cpu_model": "Cortex-A72", "logical_cores": 4, "usable_cores": 4,
        "cpufreq_governor": "performance", "python": "3.11.7", "runtimes": {"onnxruntime": "1.22.0", "numpy": "2.1.0"}}


def timed(medians, reference=None, host=HOST, variant="int8"):
    spread = spread_of(medians)
    result = make_result(variant=variant, p50=spread.center, std=0.01)
    ref = None if reference is None else {"name": "ref-v1", "process_p50": list(reference)}
    return dataclasses.replace(result, spread=spread, reference=ref, host=dict(host))


def regression(new, base, **kwargs):
    report = evaluate([new], [], [base], 0.10, **kwargs)
    (check,) = report.checks
    return check


def test_reruns_inside_the_interval_pass_and_a_real_slowdown_fails():
    base = timed([1.00, 1.02, 0.98, 1.01])
    assert regression(timed([1.01, 0.99, 1.03, 1.00]), base).status == PASS
    slow = regression(timed([1.25, 1.27, 1.24, 1.26]), base)
    assert slow.status == FAIL and slow.measured == pytest.approx(25.0, abs=1.0)
    assert "95% CI" in slow.message and "4 vs 4 worker processes" in slow.message


def test_a_regression_whose_interval_includes_no_change_is_noise():
    base = timed([1.0, 1.0, 1.0, 1.0])
    noisy = timed([0.8, 1.6, 0.9, 1.5])  # +20 % on the point, but one process in two is slow
    check = regression(noisy, base)
    assert check.status == PASS and check.detail == "within noise" and check.measured > 10


def test_a_tiny_absolute_delta_does_not_fail():
    base = timed([0.010, 0.0101, 0.0099, 0.010])
    slower = timed([0.015, 0.0151, 0.0149, 0.015])  # +50 %, but 5 us
    assert regression(slower, base).detail == "below minimum delta"
    assert regression(slower, base, min_delta_ms=0.001).status == FAIL
    with pytest.raises(UsageError, match="min delta"):
        evaluate([slower], [], [base], 0.10, min_delta_ms=-1)


def test_another_host_is_incomparable_not_failed():
    other = {**HOST, "cpu_model": "Cortex-A76"}
    check = regression(timed([2.0, 2.0, 2.01, 1.99]), timed([1.0, 1.0, 1.01, 0.99], host=other))
    assert check.status == SKIP and check.detail == "incomparable" and "Cortex-A76" in check.message
    newer_runtime = {**HOST, "runtimes": {"onnxruntime": "1.23.0", "numpy": "2.1.0"}}
    assert host_differences(HOST, newer_runtime) == ["onnxruntime 1.22.0 vs 1.23.0"]
    assert host_differences(HOST, {"machine": "aarch64"}) == []  # facts on one side only do not count
    assert host_fingerprint(HOST)["cpu_model"] == "Cortex-A72"


def test_a_baseline_keyed_by_host_picks_this_hosts_result():
    other = {**HOST, "logical_cores": 8}
    here, there = timed([1.0, 1.0, 1.0, 1.0]), timed([3.0, 3.0, 3.0, 3.0], host=other)
    new = timed([1.01, 1.0, 0.99, 1.0])
    assert match_baseline(new, [there, here]) is here
    report = evaluate([new], [], [there, here], 0.10)
    assert report.passed and report.checks[0].status == PASS


def test_a_reference_workload_in_the_same_rounds_cancels_a_slower_machine():
    base = timed([1.0, 1.0, 1.01, 0.99], reference=[0.10, 0.10, 0.101, 0.099])
    loaded = timed([1.3, 1.31, 1.29, 1.3], reference=[0.13, 0.131, 0.129, 0.13])  # everything 30 % slower
    check = regression(loaded, base)
    assert check.status == PASS and "normalised by ref-v1" in check.message
    real = timed([1.3, 1.31, 1.29, 1.3], reference=[0.10, 0.10, 0.101, 0.099])  # only the model slowed
    assert regression(real, base).status == FAIL
    plain = dataclasses.replace(loaded, reference=None)  # one side without the reference: raw comparison
    assert regression(plain, base).status == FAIL


def test_single_process_results_keep_the_per_call_noise_band():
    base = make_result(p50=10.0, std=0.5, runs=200)
    new = make_result(p50=12.0, std=0.5, runs=200)
    check = regression(new, base)
    assert check.status == FAIL and "noise ±" in check.message
