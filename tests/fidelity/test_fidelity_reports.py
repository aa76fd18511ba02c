"""Where fidelity is shown after quantize (``edgekit info``, the pipeline's quality cell), it leads
with the metric that binds and says what it was measured on; a one-number output carries no
"top-1" (the arg-max of one value always agrees)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

import fidelity_models as fm
from edgekit.cli.app import app
from edgekit.pipeline.summary import quality

pytest.importorskip("onnxruntime")
runner = CliRunner()


@pytest.fixture(scope="module")
def synthetic_score(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reports")
    out = folder / "q"
    result = runner.invoke(app, ["quantize", str(fm.score(folder / "score.onnx")), "--method", "dynamic",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_info_says_synthetic_figures_are_unverified(synthetic_score):
    shown = runner.invoke(app, ["info", str(synthetic_score)])
    assert shown.exit_code == 0, shown.output
    assert "fidelity: correlation" in shown.stdout and "unverified (synthetic)" in shown.stdout
    summary = json.loads(runner.invoke(app, ["info", str(synthetic_score), "--json"]).stdout)
    fidelity = summary["files"][0]["fidelity"]
    assert fidelity["evidence"] == "synthetic" and fidelity["verdict"] == "unverified"
    assert "top1_agreement" not in fidelity  # one probability per sample: no class axis


def test_the_manifest_keeps_no_top1_for_a_scalar_output(synthetic_score):
    (entry,) = json.loads((synthetic_score / "manifest.json").read_text())["files"]
    assert "top1_agreement" not in entry["metrics"]["fidelity"]
    assert entry["metrics"]["fidelity"]["outputs"][0]["kind"] == "scalar"


def test_the_pipeline_cell_leads_with_the_binding_metric_and_marks_synthetic():
    head = {"metric": "timestep_agreement", "value": 0.49, "floor": 0.9, "sense": "min", "ok": False,
            "output": "logits"}
    row = SimpleNamespace(metric="fidelity", accuracy=None,
                          fidelity={"cosine": 0.956, "top1_agreement": 0.49, "evidence": "synthetic", "headline": head})
    cell = quality(row)
    assert cell.startswith("timestep_agreement 0.49") and cell.endswith("(synthetic)")
    real = SimpleNamespace(metric="fidelity", accuracy=None, fidelity={**row.fidelity, "evidence": "eval-data"})
    assert "(synthetic)" not in quality(real)
    old = SimpleNamespace(metric="fidelity", accuracy=None, fidelity={"cosine": 0.99, "top1_agreement": 1.0})
    assert quality(old) == "cos 0.99000, top-1 100.0%"  # a record from before evidence was kept
    assert np.isclose(float(quality(row).split()[1].rstrip(",")), 0.49)
