"""The shipped cost models (edgekit/estimate/cores.toml) are the fit of the committed counts to the
published figures, and the held-back figures are predicted within the issue's goal."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from edgekit.estimate.cores import for_target, load_cores
from edgekit.estimate.figures import load_figures
from edgekit.core.targets import load_target

ROOT = Path(__file__).resolve().parents[2]
COUNTS = ROOT / "benchmarks" / "latency_estimate_counts.json"


@pytest.fixture(scope="module")
def fitted():
    sys.path.insert(0, str(ROOT))
    from benchmarks.latency_estimate import fit_all

    return fit_all(load_figures(), json.loads(COUNTS.read_text()))


def test_cores_toml_is_the_fit_of_the_committed_counts(fitted):
    models, _, _ = fitted
    shipped = load_cores()
    assert set(shipped) == set(models) and {"cortex-a72", "cortex-a76"} <= set(shipped)
    for core, model in models.items():
        assert shipped[core].cycles == pytest.approx(model.cycles, abs=1e-4), core
        assert shipped[core].serial_fraction == pytest.approx(model.serial_fraction, abs=1e-4)
        assert shipped[core].sigma == pytest.approx(model.sigma, abs=1e-4)


def test_held_back_figures_are_predicted_within_35_percent(fitted):
    _, rows, _ = fitted
    checks = [r for r in rows if r.figure.role == "check"]
    assert len(checks) >= 6 and len({r.figure.core for r in checks}) >= 2
    assert statistics.median(abs(r.error) for r in checks) <= 0.35


def test_a_target_estimate_is_the_core_model_at_the_targets_clock_and_threads():
    counts = json.loads(COUNTS.read_text())["cortex-a72"]["mobilenet_v2"]["classes"]
    model = load_cores()["cortex-a72"]
    one = for_target(load_target("rpi4"), counts, threads=1)
    assert one.ms == pytest.approx(model.single_thread_ms(counts, 1800.0))
    four = for_target(load_target("rpi4"), counts)  # the target's 4 threads
    assert four.ms == pytest.approx(one.ms * (model.serial_fraction + (1 - model.serial_fraction) / 4))
    assert four.low_ms < four.ms < four.high_ms
    assert for_target(load_target("x86-64"), counts) is None  # no fitted model for its core
