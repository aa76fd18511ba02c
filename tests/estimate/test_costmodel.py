"""The cost model's arithmetic, against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from edgekit.estimate.costmodel import (
    MIN_SIGMA,
    CoreModel,
    amdahl,
    fit_cycles,
    fit_serial_fraction,
    grouped,
    log_sigma,
)

TWO = {"vector": ("simd_fp",), "rest": ("integer", "load")}
PRIOR = {"vector": 1.0, "rest": 1.0}


def test_two_figures_two_groups_are_solved_exactly():
    # 1 GHz: 1e6 cycles = 1 ms. 1e6 vector instructions take 2 ms -> 2 cycles each; then
    # 1e6 vector + 2e6 others take 3 ms -> the others cost (3 - 2) / 2 = 0.5 cycles each.
    samples = [({"simd_fp": 1e6}, 1000.0, 2.0), ({"simd_fp": 1e6, "integer": 1e6, "load": 1e6}, 1000.0, 3.0)]
    cycles = fit_cycles(samples, TWO, PRIOR)
    assert cycles["vector"] == pytest.approx(2.0) and cycles["rest"] == pytest.approx(0.5)


def test_more_figures_than_groups_minimise_the_relative_error():
    # One group; rows r = N / (MHz * 1000 * ms) = 1 and 2: c minimises (c - 1)^2 + (2c - 1)^2 -> c = 3/5.
    samples = [({"simd_fp": 1e6}, 1000.0, 1.0), ({"simd_fp": 1e6}, 1000.0, 0.5)]
    assert fit_cycles(samples, {"vector": ("simd_fp",)}, {"vector": 1.0})["vector"] == pytest.approx(0.6)


def test_the_ridge_pulls_towards_the_prior():
    # (2c - 1)^2 + 1 * (c / 1 - 1)^2 is least at c = (2 + 1) / (4 + 1) = 0.6; without the ridge, 0.5.
    samples = [({"simd_fp": 1e6}, 1000.0, 0.5)]
    group = {"vector": ("simd_fp",)}
    assert fit_cycles(samples, group, {"vector": 1.0}, ridge=0.0)["vector"] == pytest.approx(0.5)
    assert fit_cycles(samples, group, {"vector": 1.0}, ridge=1.0)["vector"] == pytest.approx(0.6)


def test_a_group_the_figures_price_below_zero_is_held_at_zero():
    # Solved exactly, vector = 1 and rest = (0.5 - 1) / 1 = -0.5 cycles: rest is held at 0 and vector refitted.
    samples = [({"simd_fp": 1e6}, 1000.0, 1.0), ({"simd_fp": 1e6, "integer": 1e6}, 1000.0, 0.5)]
    cycles = fit_cycles(samples, TWO, PRIOR)
    assert cycles["rest"] == 0.0
    # rows r = 1 and 2 for the vector group alone: c = (1 + 2) / (1 + 4) = 0.6
    assert cycles["vector"] == pytest.approx(0.6)


def test_serial_fraction_from_one_pair_is_amdahls():
    # 100 ms on one thread, 40 ms on four: 100 * (s + (1 - s) / 4) = 40 -> s = 0.2
    assert fit_serial_fraction([(100.0, 40.0, 4)]) == pytest.approx(0.2)
    assert amdahl(100.0, 0.2, 4) == pytest.approx(40.0)


def test_serial_fraction_is_clipped_to_what_amdahl_allows():
    assert fit_serial_fraction([(100.0, 120.0, 4)]) == 1.0  # slower on four threads: no parallel part
    assert fit_serial_fraction([(100.0, 20.0, 4)]) == 0.0  # superlinear: all parallel
    with pytest.raises(ValueError):
        fit_serial_fraction([])


def test_estimate_and_its_band():
    model = CoreModel("cortex-a72", TWO, {"vector": 2.0, "rest": 0.5}, serial_fraction=0.2, sigma=0.25)
    classes = {"simd_fp": 3e6, "integer": 1e6, "load": 1e6, "branch": 5e6}  # branch is in no group: not priced
    assert grouped(classes, TWO) == {"vector": 3e6, "rest": 2e6}
    estimate = model.estimate(classes, mhz=2000.0, threads=4)
    single = (2.0 * 3e6 + 0.5 * 2e6) / 2e6  # 3.5 ms at 2 GHz
    assert estimate.ms == pytest.approx(single * (0.2 + 0.8 / 4))
    assert estimate.low_ms == pytest.approx(estimate.ms / math.exp(0.25))
    assert estimate.high_ms == pytest.approx(estimate.ms * math.exp(0.25))
    tight = CoreModel("cortex-a72", TWO, {"vector": 2.0, "rest": 0.5}, 0.2, sigma=0.01)
    assert tight.estimate(classes, 2000.0, 1).high_ms == pytest.approx(3.5 * math.exp(MIN_SIGMA))


def test_log_sigma():
    assert log_sigma([(110.0, 100.0), (100.0, 110.0)]) == pytest.approx(math.log(1.1))
    assert log_sigma([]) == 0.0


def test_no_group_is_priced_below_what_the_core_can_issue():
    # Exactly solved: vector 2, rest 0.5 cycles. With at most one "rest" instruction a cycle (floor 1.0),
    # rest is held at 1 and vector refitted: (c/2 - 1)^2 + (c/3 - 1/3)^2 is least at c = (11/18) / (13/36) = 22/13.
    samples = [({"simd_fp": 1e6}, 1000.0, 2.0), ({"simd_fp": 1e6, "integer": 1e6, "load": 1e6}, 1000.0, 3.0)]
    cycles = fit_cycles(samples, TWO, PRIOR, floor={"rest": 1.0})
    assert cycles["rest"] == 1.0 and cycles["vector"] == pytest.approx(22 / 13)
    assert fit_cycles(samples, TWO, PRIOR, floor={"rest": 0.25}) == pytest.approx({"vector": 2.0, "rest": 0.5})
