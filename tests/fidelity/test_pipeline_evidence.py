"""``edgekit pipeline`` judges its int8 variants on --eval-data like quantize does, and
--require-eval-data refuses a model without labelled data before any work."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import fidelity_models as fm
from edgekit.cli.app import app

pytest.importorskip("onnxruntime")
runner = CliRunner()


def test_require_eval_data_refuses_before_any_work(tmp_path):
    model = fm.score(tmp_path / "score.onnx")
    result = runner.invoke(app, ["pipeline", "--source", str(model), "--methods", "dynamic", "--require-eval-data",
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: --require-eval-data") and "synthetic" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a whole pipeline (export, quantize, bench, gate): about 30 s
def test_pipeline_variants_are_judged_on_eval_data(tmp_path):
    model = fm.score(tmp_path / "score.onnx")
    np.save(tmp_path / "eval.npy", np.random.default_rng(6).standard_normal((30, fm.FEATURES)).astype(np.float32))
    result = runner.invoke(app, ["pipeline", "--source", str(model), "--methods", "dynamic", "--format", "onnx",
                                 "--eval-data", str(tmp_path / "eval.npy"), "--require-eval-data", "--min-runs", "5",
                                 "--min-time", "0", "--no-emulate", "--processes", "1", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "run" / "quantized" / "dynamic" / "manifest.json").read_text())
    fidelity = manifest["files"][0]["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["samples"], fidelity["verdict"]) == ("eval-data", 30, "pass")
    assert "correlation" in result.stdout and "(synthetic)" not in result.stdout
