"""Evaluate: hand-computed budget checks, skipped accuracy, the noise-aware regression gate."""

from __future__ import annotations

import dataclasses
import math

import pytest

from edgekit.core.errors import GateFailed, UsageError
from edgekit.gates.budgets import Budget, Budgets
from edgekit.gates.evaluate import (
    evaluate,
    gate_results,
    match_baseline,
    model_names,
    noise_band,
    raise_for_status,
    timing_sigma,
)
from edgekit.gates.results import FAIL, PASS, SKIP
from bench_results import make_result  # shared with tests/bench



def flag(metric: str, value, unit: str) -> Budget:
    return Budget(metric, value, unit, "flag")


def only(report, metric: str, model: str | None = None):
    found = [c for c in report.checks if c.metric == metric and (model is None or c.model == model)]
    assert len(found) == 1, found
    return found[0]


def test_a_4_2_mb_model_fails_4_mb_and_passes_5_mb():
    result = make_result(size_mb=4.2)
    failed = only(evaluate([result], [flag("size", 4.0, "MB")]), "size")
    assert failed.status == FAIL and not failed.passed
    assert failed.measured == pytest.approx(4.2, abs=1e-6)
    assert failed.limit == 4.0
    assert "4.20 MB > 4.00 MB" in failed.message
    report = evaluate([result], [flag("size", 5.0, "MB")])
    assert report.passed and only(report, "size").status == PASS


def test_latency_and_memory_checks():
    result = make_result(p50=12.0, p99=21.0, peak_rss=800.0)
    budgets = [flag("p50", 15.0, "ms"), flag("p99", 20.0, "ms"), flag("peak_rss", 768.0, "MB")]
    report = evaluate([result], budgets)
    assert only(report, "p50").status == PASS
    assert only(report, "p99").status == FAIL
    assert only(report, "peak_rss").status == FAIL
    assert not report.passed
    assert report.counts == {"checks": 3, "passed": 1, "failed": 2, "skipped": 0}


def test_exactly_at_the_limit_passes_despite_float_round_off():
    # (0.92 - 0.91) * 100 == 1.0000000000000009 in floating point
    result = make_result(accuracy=0.91, float_accuracy=0.92)
    assert result.accuracy_drop_points > 1.0
    assert only(evaluate([result], [flag("accuracy_drop", 1.0, "pt")]), "accuracy_drop").status == PASS
    assert only(evaluate([make_result(size_mb=4.0)], [flag("size", 4.0, "MB")]), "size").status == PASS


def test_accuracy_drop_points_and_relative():
    result = make_result(accuracy=0.912, float_accuracy=0.92)  # 0.8 pt, 0.8696 % relative
    points = only(evaluate([result], [flag("accuracy_drop", 1.0, "pt")]), "accuracy_drop")
    assert points.status == PASS and points.measured == pytest.approx(0.8)
    assert "accuracy 91.20% vs float 92.00%" in points.message
    relative = only(evaluate([result], [flag("accuracy_drop", 0.5, "%")]), "accuracy_drop")
    assert relative.status == FAIL
    assert relative.measured == pytest.approx(0.8 / 92 * 100)
    assert relative.label == "accuracy drop (relative)"
    better = make_result(accuracy=0.93, float_accuracy=0.92)  # quantized beats float
    assert only(evaluate([better], [flag("accuracy_drop", 0.0, "pt")]), "accuracy_drop").status == PASS


def test_missing_accuracy_is_skipped_not_passed():
    result = make_result(accuracy=None, float_accuracy=None)
    report = evaluate([result], [flag("accuracy_drop", 1.0, "pt"), flag("size", 5.0, "MB")])
    check = only(report, "accuracy_drop")
    assert check.status == SKIP and check.skipped and not check.passed
    assert check.message == "skipped (no accuracy recorded)"
    assert check.measured is None
    assert report.passed  # a skipped check does not fail the gate
    assert report.counts == {"checks": 2, "passed": 1, "failed": 0, "skipped": 1}
    no_float = only(evaluate([make_result(float_accuracy=None)], [flag("accuracy_drop", 1.0, "pt")]), "accuracy_drop")
    assert no_float.status == SKIP and "no float accuracy recorded" in no_float.message


def test_accuracy_outside_0_1_fails_loudly():
    result = make_result(accuracy=91.2, float_accuracy=92.0)  # percent written where a fraction belongs
    check = only(evaluate([result], [flag("accuracy_drop", 1.0, "pt")]), "accuracy_drop")
    assert check.status == FAIL and "not fractions in 0..1" in check.message


def test_non_finite_measurement_fails():
    result = make_result(p99=math.nan)
    check = only(evaluate([result], [flag("p99", 20.0, "ms")]), "p99")
    assert check.status == FAIL and check.measured is None and "not a finite number" in check.message


def test_flag_overrides_target_and_report_says_flag(tmp_path):
    result = make_result(size_mb=4.2)
    by_target = gate_results([result], target="rpi4", search_dir=tmp_path)
    assert only(by_target, "size").status == FAIL and only(by_target, "size").source == "target rpi4"
    overridden = gate_results([result], target="rpi4", overrides={"max_size_mb": "5MB"}, search_dir=tmp_path)
    size = only(overridden, "size")
    assert (size.status, size.source, size.limit) == (PASS, "flag", 5.0)
    assert only(overridden, "p99").source == "target rpi4"
    assert overridden.passed


def test_gate_results_reads_the_project_file(tmp_path):
    config = tmp_path / "budgets.toml"
    config.write_text('[budgets]\nmax_size_mb = "4.5MB"\n[budgets.int8]\nmax_p50_ms = "5ms"\n')
    report = gate_results([make_result()], target="rpi4", config_path=config)
    assert only(report, "size").source == "budgets.toml"
    assert only(report, "size").status == PASS
    assert only(report, "p50").source == "budgets.toml [budgets.int8]"
    assert only(report, "p50").status == FAIL


def test_nothing_to_gate_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no budgets to check"):
        gate_results([make_result()], search_dir=tmp_path)
    with pytest.raises(UsageError, match="no bench results"):
        evaluate([], [flag("size", 4.0, "MB")])
    with pytest.raises(UsageError, match="--max-regression"):
        evaluate([make_result()], [], baseline=[make_result()])
    with pytest.raises(UsageError, match="baseline"):
        evaluate([make_result()], [flag("size", 4.0, "MB")], max_regression=0.1)


def test_raise_for_status():
    passing = evaluate([make_result()], [flag("size", 5.0, "MB")])
    assert raise_for_status(passing) is passing
    with pytest.raises(GateFailed, match="gate failed: 1 of 1 checks failed") as err:
        raise_for_status(evaluate([make_result()], [flag("size", 4.0, "MB")]))
    assert err.value.exit_code == 3


def test_report_is_frozen_and_names_are_unique():
    results = [make_result("int8"), make_result("int8"), make_result("", path="a/b/m.onnx")]
    assert model_names(results) == ["int8", "int8 #2", "m.onnx"]
    report = evaluate(results, [flag("size", 5.0, "MB")])
    assert [m.name for m in report.models] == ["int8", "int8 #2", "m.onnx"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.checks = ()  # type: ignore[misc]


def test_notes_for_unmatched_model_tables_and_other_targets():
    budgets = Budgets((Budget("size", 5.0, "MB", "target rpi4", "target"), Budget("p50", 5.0, "ms", "edgekit.toml [budgets.nope]", "file", "nope")))
    report = evaluate([make_result(target="rpi5")], budgets)
    assert any("[budgets.nope] matches no result" in n for n in report.notes)
    assert any("measured for target rpi5" in n and "rpi4" in n for n in report.notes)
    only_scoped = Budgets((Budget("p50", 5.0, "ms", "edgekit.toml [budgets.x]", "file", "x"),))
    assert any("no budget applies to int8" in n for n in evaluate([make_result()], only_scoped).notes)


# -- regression ---------------------------------------------------------------------------------


def test_noise_band_by_hand():
    # sigma = 2 ms (std and (p90 - p50) / 1.2816 agree); se of the median = 1.2533 * 2 / sqrt(10) = 0.7927
    base = make_result(p50=10.0, std=2.0, runs=10).timing
    new = make_result(p50=11.5, std=2.0, runs=10).timing
    assert timing_sigma(base) == pytest.approx(2.0)
    assert noise_band(new, base) == pytest.approx(3 * math.hypot(0.79267, 0.79267), rel=1e-4)  # 3.363 ms


def test_sigma_ignores_outliers_that_inflate_std():
    timing = dataclasses.replace(make_result(p50=10.0, std=0.5).timing, std=5.0)  # a few 50 ms spikes
    assert timing_sigma(timing) == pytest.approx(0.5)


def test_regression_within_noise_passes():
    base = make_result(p50=10.0, std=2.0, runs=10)
    new = make_result(p50=11.5, std=2.0, runs=10)  # +15 % > 10 %, but 1.5 ms < 3.36 ms noise
    check = only(evaluate([new], [], baseline=[base], max_regression="10%"), "p50_regression")
    assert check.status == PASS and check.detail == "within noise"
    assert check.measured == pytest.approx(15.0)
    assert check.limit == pytest.approx(10.0)
    assert "within noise" in check.message


def test_real_regression_fails():
    base = make_result(p50=10.0, std=0.5, runs=1000)
    new = make_result(p50=11.5, std=0.5, runs=1000)  # noise band 3 * hypot(0.0198, 0.0198) = 0.084 ms
    report = evaluate([new], [], baseline=[base], max_regression=0.10, baseline_source="baseline main.json")
    check = only(report, "p50_regression")
    assert check.status == FAIL and not report.passed
    assert check.source == "baseline main.json"
    assert "+15.00%" in check.message


def test_small_regression_and_speedup_pass():
    base = make_result(p50=10.0, std=0.1, runs=1000)
    assert only(evaluate([make_result(p50=10.5, std=0.1, runs=1000)], [], [base], 0.10), "p50_regression").status == PASS
    faster = only(evaluate([make_result(p50=8.0, std=0.1, runs=1000)], [], [base], 0.10), "p50_regression")
    assert faster.status == PASS and faster.measured == pytest.approx(-20.0) and "faster" in faster.message


def test_baseline_matching_by_variant_then_file_name():
    base = [make_result("fp32", p50=20.0), make_result("int8", p50=10.0), make_result("", path="x/plain.onnx", p50=5.0)]
    assert match_baseline(make_result("int8"), base) is base[1]
    assert match_baseline(make_result("", path="y/plain.onnx"), base) is base[2]
    assert match_baseline(make_result("int4"), base) is None  # same file name, different variant
    report = evaluate([make_result("int4")], [], baseline=base, max_regression="10%")
    check = only(report, "p50_regression")
    assert check.status == SKIP and "no result for 'int4' in the baseline" in check.message
    assert report.passed


def test_regression_with_zero_baseline_is_skipped():
    base = make_result(p50=0.0, std=0.0)
    assert only(evaluate([make_result()], [], [base], 0.1), "p50_regression").status == SKIP
