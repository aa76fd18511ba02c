"""``verify --emulate`` fails when the bundle's own output check fails on the emulated outputs, even
where the emulated board reproduces the host bit for bit (it printed the check's FAIL, then PASS).

The outputs are a real ONNX Runtime run of an int8-like damaged classifier (bit-identical "host"
and "emulated" outputs) against its float model's reference: top-1 agreement 0 by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import fidelity_models as fm
from edgekit.cli.verify import footer
from edgekit.emulate.bundle_check import own_check, own_limits
from edgekit.emulate.report import EmulationReport, Tolerance, check_batches

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own-check")
    good = fm.ort_runner(fm.classifier(folder / "float.onnx"))
    bad = fm.ort_runner(fm.classifier(folder / "bad.onnx", damage=True))
    rng = np.random.default_rng(0)
    feeds = {b: {"input": rng.standard_normal((b, fm.FEATURES)).astype(np.float32)} for b in (1, 7)}
    reference = {f"b{b}/output": good(feed)[0] for b, feed in feeds.items()}
    candidate = {f"b{b}/output": bad(feed)[0] for b, feed in feeds.items()}
    agreement = min((reference[k].argmax(1) == candidate[k].argmax(1)).mean() for k in reference)
    assert agreement < 0.8  # by hand: the damaged file does not keep the float model's decisions
    path = folder / "reference.npz"
    np.savez(path, **reference, **{f"b{b}/input/input": feed["input"] for b, feed in feeds.items()})
    return reference, candidate, path


def _report(reference, emulated, bundle_check, emulation=None):
    tolerance = Tolerance.for_precision("int8")
    batches = check_batches(emulated, dict(emulated), reference, tolerance, [])  # host == emulated, bit for bit
    return EmulationReport(
        bundle="b", target="rpi4", model={"path": "model.pte", "format": "executorch", "precision": "int8"},
        checksums={}, emulation={"launcher": "qemu-user", "machine": "aarch64", "bit_identical": True,
                                 **(emulation or {})},
        host={}, tolerance=tolerance, batches=batches, bench=None, seconds={}, bundle_check=bundle_check)


def test_a_native_bundles_check_limits_are_the_ones_run_sh_passes():
    from edgekit.bundle.native import RUNTIME_NAME

    native = SimpleNamespace(info={"runtime": {"name": RUNTIME_NAME}, "native": {"runner": "edgekit-run"}},
                             precision="int8")
    python = SimpleNamespace(info={}, precision="int8")
    assert own_limits(native) == {"min_cosine": 0.95, "min_top1": 0.8}
    assert own_limits(python) == {}  # check_outputs.py: its cosine floor alone


def test_verify_fails_when_the_bundles_own_check_fails_on_identical_outputs(outputs):
    reference, candidate, path = outputs
    own = own_check(candidate, path, {"min_cosine": 0.95, "min_top1": 0.8}, "sh run.sh check")
    assert not own["ok"] and any(f.startswith("top1_agreement") for f in own["failures"])
    report = _report(reference, candidate, own)
    assert all(b.passed for b in report.batches)  # the board reproduces the host...
    assert not report.passed  # ...and the device's `sh run.sh verify` would still fail
    assert "bundle's own check (sh run.sh check)" in report.failure() and "top1_agreement" in report.failure()
    lines = footer(report)
    assert lines[-1].startswith("FAIL: ") and not any(line.startswith("PASS") for line in lines)
    assert any(line.startswith("bundle check: sh run.sh check") and "FAILED" in line for line in lines)
    assert report.to_dict()["passed"] is False


def test_verify_passes_when_the_check_holds(outputs):
    reference, _, path = outputs
    own = own_check(reference, path, {"min_cosine": 0.95, "min_top1": 0.8}, "sh run.sh check")
    report = _report(reference, reference, own)
    assert own["ok"] and report.passed and footer(report)[-1].startswith("PASS")


def test_a_failed_entry_point_in_the_board_root_fails_verify(outputs):
    reference, _, path = outputs
    own = own_check(reference, path, {}, "sh run.sh check")
    entry = {"command": "sh run.sh check", "ok": False, "exit_code": 1,
             "verdict": "FAIL: outputs differ from the reference: top1_agreement 0.0000 < 0.8"}
    report = _report(reference, reference, own, {"entry_point": entry})
    assert not report.passed and "top1_agreement 0.0000 < 0.8" in report.failure()


def test_every_output_is_held_to_the_check_and_to_the_host(outputs, tmp_path):
    """A second output (keys b{N}/outputs/1): negated on the emulated board, it fails both the bundle's own
    check and the board-vs-host comparison, each naming output 1; the first output alone would pass."""
    reference, _, path = outputs
    rng = np.random.default_rng(1)
    second = {b: rng.standard_normal((b, 4)).astype(np.float32) for b in (1, 7)}
    with np.load(path) as data:
        arrays = {key: data[key] for key in data.files}
    two = tmp_path / "reference.npz"
    np.savez(two, **arrays, **{f"b{b}/outputs/1": value for b, value in second.items()})
    hosted = {**reference, **{f"b{b}/outputs/1": value for b, value in second.items()}}
    emulated = {**reference, **{f"b{b}/outputs/1": -value for b, value in second.items()}}
    with np.load(two) as data:
        both = {key: data[key] for key in data.files if "/input/" not in key}

    own = own_check(emulated, two, {"min_cosine": 0.95, "min_top1": 0.8}, "sh run.sh check")
    assert not own["ok"] and own["cosine"] == pytest.approx(-1.0)  # the negated output, by construction
    assert all(f.startswith("output 1: cosine") for f in own["failures"]), own["failures"]
    assert own_check(hosted, two, {"min_cosine": 0.95, "min_top1": 0.8}, "sh run.sh check")["ok"]

    tolerance = Tolerance.for_precision("int8")
    checks = check_batches(emulated, hosted, both, tolerance, [])
    assert [(c.batch, c.output, c.passed) for c in checks] == [(1, 0, True), (1, 1, False), (7, 0, True), (7, 1, False)]
    report = _report(both, emulated, own)
    report = EmulationReport(**{**report.__dict__, "batches": checks})
    assert "at batch 1, output 1: max abs difference" in report.failure()
