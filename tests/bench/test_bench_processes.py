"""Statistics across worker processes: intervals against hand computation, merging, the JSON field."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import numpy as np
import pytest

from edgekit.records.result import from_document, to_document
from edgekit.records.stats import Spread, ratio_interval, spread_of, t_quantile, welch_interval
from edgekit.bench.workers import merge_processes
from edgekit.core.errors import InputFileError


@pytest.mark.parametrize("df, expected", [(1, 12.706), (3, 3.182), (4, 2.776), (10, 2.228), (30, 2.042),
                                          (60, 2.000), (120, 1.980), (10_000, 1.960)])
def test_t_quantile_matches_the_printed_tables(df, expected):
    assert t_quantile(df) == pytest.approx(expected, abs=2e-3)


def test_t_quantile_falls_as_degrees_of_freedom_grow():
    values = [t_quantile(df / 4) for df in range(4, 400)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    with pytest.raises(ValueError):
        t_quantile(0.5)


def test_spread_is_a_t_interval_over_process_medians():
    medians = [1.00, 1.10, 0.90, 1.05]
    spread = spread_of(medians)
    mean = statistics.fmean(medians)
    half = 3.182 * statistics.stdev(medians) / math.sqrt(4)  # t(0.975, 3) from the table
    assert spread.center == pytest.approx(mean)
    assert (spread.ci_low, spread.ci_high) == pytest.approx((mean - half, mean + half), rel=1e-3)
    assert spread.sem == pytest.approx(statistics.stdev(medians) / 2)


def test_one_process_gives_no_width_and_a_time_is_never_negative():
    one = spread_of([0.5])
    assert (one.processes, one.ci_low, one.ci_high) == (1, 0.5, 0.5)
    wild = spread_of([0.01, 5.0])
    assert wild.ci_low == 0.0 and wild.ci_high > 5.0


def test_ratio_and_difference_intervals():
    base = spread_of([1.0, 1.02, 0.98, 1.0])
    same = spread_of([1.0, 1.02, 0.98, 1.0])
    ratio, low, high = ratio_interval(same, base)
    assert ratio == pytest.approx(1.0) and low < 1.0 < high
    slower = spread_of([1.25, 1.27, 1.23, 1.25])
    ratio, low, high = ratio_interval(slower, base)
    assert ratio == pytest.approx(1.25) and 1.0 < low < 1.25 < high
    diff, low, high = welch_interval(slower, base)
    assert diff == pytest.approx(0.25) and 0 < low < 0.25 < high
    # equal variances and sizes: Welch's df is 2 (n - 1) = 6
    se = math.sqrt(slower.sem**2 + base.sem**2)
    assert high - diff == pytest.approx(2.447 * se, rel=1e-3)


def _raw(load: float, peak: float) -> dict:
    return {"timing": {"load": load, "first_run": 2 * load}, "memory": {"peak_rss": peak, "rss_before_load": 1.0,
            "load_growth": 0.5}, "settings": {"batch": 1}, "model": {"path": "m.onnx"}}


def test_merge_pools_calls_and_keeps_each_process_median():
    rng = np.random.default_rng(0)
    samples = [list(rng.integers(100_000, 200_000, size=n)) for n in (31, 40, 25)]
    merged = merge_processes([_raw(1.0, 10.0), _raw(3.0, 30.0), _raw(2.0, 20.0)], samples)
    pooled = np.concatenate(samples) / 1e6
    assert merged["timing"]["p50"] == pytest.approx(np.percentile(pooled, 50))
    assert merged["timing"]["p99"] == pytest.approx(np.percentile(pooled, 99))
    assert merged["timing"]["runs"] == 96
    assert merged["timing"]["load"] == 2.0 and merged["memory"]["peak_rss"] == 30.0
    assert merged["spread"]["process_p50"] == pytest.approx([np.median(s) / 1e6 for s in samples])
    assert merged["settings"]["processes"] == 3


def test_spread_and_reference_travel_in_the_bench_json(tmp_path):
    from bench_results import make_result

    plain = make_result()
    doc = to_document([plain])
    assert "spread" not in doc["results"][0] and "reference" not in doc["results"][0]  # old readers see no change
    rich = dataclasses.replace(plain, spread=spread_of([10.0, 10.2, 9.9]),
                               reference={"name": "ref", "process_p50": [0.1, 0.1, 0.11]})
    back = from_document(json.loads(json.dumps(to_document([rich]))))[0]
    assert back == rich and back.p50_interval == (rich.spread.center, rich.spread.ci_low, rich.spread.ci_high)
    assert from_document(json.loads(json.dumps(doc)))[0].spread is None


@pytest.mark.parametrize("spread, message", [
    ({"processes": 3, "process_p50": [1.0, 1.0], "center": 1.0, "ci_low": 0.9, "ci_high": 1.1}, "holds 2 values"),
    ({"processes": 1, "process_p50": [1.0], "center": 1.0, "ci_low": 1.2, "ci_high": 1.3}, "does not hold"),
    ({"processes": 1, "process_p50": [float("nan")], "center": 1.0, "ci_low": 1.0, "ci_high": 1.0}, "finite"),
    ("wide", "JSON object"),
])
def test_a_malformed_spread_is_refused(spread, message):
    from bench_results import make_result

    doc = to_document([make_result()])
    doc["results"][0]["spread"] = spread
    with pytest.raises(InputFileError, match=message):
        from_document(doc)


def test_spread_is_frozen_data():
    assert dataclasses.is_dataclass(Spread) and Spread.__dataclass_params__.frozen


def test_bench_in_worker_processes_reports_a_spread_and_a_reference(tmp_path):
    from edgekit.bench.api import bench
    from edgekit.bench.reference import REFERENCE_NAME, write_reference_model

    model = write_reference_model(tmp_path)  # any small ONNX model will do
    seen = []
    (res,) = bench(model, processes=3, reference=True, threads=1, warmup=1, min_runs=6, min_time_s=0,
                   progress=lambda index, runs: seen.append(index))
    assert res.spread.processes == 3 and len(res.spread.process_p50) == 3
    assert res.timing.runs >= 6 and res.settings["processes"] == 3
    assert res.spread.ci_low <= res.spread.center <= res.spread.ci_high
    assert res.reference["name"] == REFERENCE_NAME and len(res.reference["process_p50"]) == 3
    assert set(seen) == {0}  # the reference workload is not reported as one of the user's models
    assert any("reference workload" in note for note in res.notes)


@pytest.mark.parametrize("processes", [0, 65, True, 2.0])
def test_worker_process_count_is_checked(tmp_path, processes):
    from edgekit.bench.api import bench
    from edgekit.bench.reference import write_reference_model
    from edgekit.core.errors import UsageError

    with pytest.raises(UsageError, match="processes"):
        bench(write_reference_model(tmp_path), processes=processes)
