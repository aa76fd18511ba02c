"""``edgekit gate`` holds a quantized file's fidelity like any other budget (--min-cosine,
--min-agreement, --min-sqnr-db, --min-correlation: floors on the worst output that has the metric),
and --require-eval-data refuses figures measured on synthetic inputs. The fidelity comes from real
quantize runs of small ONNX models (the CTC sequence model, the one-probability model) through the
manifest reader bench uses."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import fidelity_models as fm
from bench_results import make_result
from edgekit.records.result import to_document
from edgekit.board.manifest import fidelity_summary
from edgekit.cli.app import app
from edgekit.gates.budgets import Budget
from edgekit.gates.evaluate import evaluate
from edgekit.gates.results import FAIL, PASS, SKIP

pytest.importorskip("onnxruntime")
runner = CliRunner()


def _quantize(model: Path, out: Path, *extra) -> dict:
    result = runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--out", str(out), *map(str, extra)])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads((out / "manifest.json").read_text())["files"]
    return entry["metrics"]["fidelity"]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """{name: (the quantize record, the bench result carrying its summary)}."""
    folder = tmp_path_factory.mktemp("gate-fidelity")
    rng = np.random.default_rng(4)
    np.save(folder / "seq.npy", rng.standard_normal((16, fm.STEPS, fm.FEATURES)).astype(np.float32))
    records = {
        "ctc": _quantize(fm.ctc(folder / "ctc.onnx"), folder / "q-ctc", "--eval-data", folder / "seq.npy"),
        "score": _quantize(fm.score(folder / "score.onnx"), folder / "q-score"),  # synthetic
    }
    out = {}
    for name, record in records.items():
        base = make_result(variant=name, accuracy=None, float_accuracy=None)
        out[name] = record, dataclasses.replace(base, model=dataclasses.replace(base.model,
                                                                                fidelity=fidelity_summary(record)))
    return out


def _check(result, metric: str, floor: float, unit: str = ""):
    (check,) = evaluate([result], [Budget(metric, floor, unit, "flag")]).checks
    return check


def test_agreement_is_held_to_the_sequence_outputs_per_timestep_agreement(judged):
    record, result = judged["ctc"]
    (out,) = record["outputs"]
    measured = out["metrics"]["timestep_agreement"]
    assert _check(result, "agreement", measured).status == PASS
    assert _check(result, "agreement", 1.0).measured == pytest.approx(measured)
    cosine = out["metrics"]["cosine"]
    assert cosine < 1.0  # int8 weights changed the outputs a little
    low, high = _check(result, "cosine", cosine * 0.999), _check(result, "cosine", (cosine + 1.0) / 2)
    assert low.status == PASS and "on eval-data" in low.message
    assert high.status == FAIL and high.measured == pytest.approx(cosine)


def test_a_metric_no_output_has_is_skipped_not_passed(judged):
    _, result = judged["score"]
    check = _check(result, "agreement", 0.9)
    assert check.status == SKIP and "scalar" in check.message
    correlation = _check(result, "correlation", 0.5)
    assert correlation.status == PASS and "synthetic inputs: not evidence of accuracy" in correlation.message


def test_gate_cli_takes_fidelity_floors_and_can_require_real_data(judged, tmp_path):
    (tmp_path / "ctc.json").write_text(json.dumps(to_document([judged["ctc"][1]])))
    (tmp_path / "score.json").write_text(json.dumps(to_document([judged["score"][1]])))
    passed = runner.invoke(app, ["gate", str(tmp_path / "ctc.json"), "--min-cosine", "0.5", "--min-agreement", "50%",
                                 "--require-eval-data"])
    assert passed.exit_code == 0, passed.output
    failed = runner.invoke(app, ["gate", str(tmp_path / "ctc.json"), "--min-sqnr-db", "299"])
    assert failed.exit_code == 3 and "fidelity SQNR" in failed.stdout and " < 299" in failed.stdout
    refused = runner.invoke(app, ["gate", str(tmp_path / "score.json"), "--min-cosine", "0.5", "--require-eval-data"])
    assert refused.exit_code == 2
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("Error: --require-eval-data") and "synthetic" in line


def test_fidelity_floors_are_fractions_up_to_one():
    from edgekit.core.errors import UsageError
    from edgekit.gates.budgets import parse_limit

    assert parse_limit("cosine", "95%") == (pytest.approx(0.95), "")
    assert parse_limit("sqnr", "20dB") == (20.0, "dB")
    with pytest.raises(UsageError, match="above 1"):
        Budget.parse("agreement", "1.2", "flag")
    with pytest.raises(UsageError, match="a fraction such as 0.95"):
        parse_limit("correlation", "high")
