"""`edgekit pipeline --target rpi4` decides on the target's emulated core: each .pte variant is
counted under QEMU on a Cortex-A72 and priced by the fitted cost model; the recommendation, the
warning and the target's latency budget use that estimate, labelled as such; host timings stay."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.estimate.cores import load_cores

runner = CliRunner()
QUICK = ["--processes", "2", "--min-runs", "3", "--min-time", "0"]


@pytest.mark.slow
def test_the_pipeline_decides_for_rpi4_on_its_emulated_core(digits_checkpoint, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["pipeline", "--checkpoint", str(digits_checkpoint), "--methods", "static",
                                 "--format", "executorch", "--target", "rpi4", "--out", str(out), *QUICK])
    assert result.exit_code in (0, 3), result.output + result.stderr
    summary = json.loads((out / "pipeline.json").read_text())
    rows = {row["variant"]: row for row in summary["variants"]}
    fp32, int8 = rows["fp32-executorch"], rows["int8-static-executorch"]
    label = "estimated on emulated Cortex-A72 at 1800 MHz, 4 threads"
    for row in (fp32, int8):
        assert row["target"]["basis"] == "estimated" and row["target"]["label"] == label
        assert row["p50_ms"] > 0  # the host's timing stays, as the host's
    # the estimate is the fitted model applied to the counted classes (worked out here from cores.toml)
    model = load_cores()["cortex-a72"]
    for row in (fp32, int8):
        classes = row["target"]["classes"]
        cycles = sum(model.cycles[g] * sum(classes[c] for c in members) for g, members in model.groups.items())
        single = cycles / (1800 * 1000)
        assert math.isclose(row["target"]["ms"], single * (model.serial_fraction + (1 - model.serial_fraction) / 4),
                            rel_tol=1e-9)
        assert abs(sum(classes.values()) - row["target"]["instructions"]) <= len(classes)  # each class rounded
    assert int8["target_ratio"] == pytest.approx(int8["target"]["ms"] / fp32["target"]["ms"])
    rec = summary["recommended"]
    assert rec["basis"] == label and rec["target_ratio"] == pytest.approx(int8["target_ratio"])
    assert f"Recommended for the target, {label}" in result.stdout or "Recommended for its size only" in result.stdout
    markdown = (out / "pipeline.md").read_text()
    assert "| on rpi4 |" in markdown and f"rpi4 column: {label}" in markdown
    gate = json.loads((out / "gate.json").read_text())
    p99 = [c for c in gate["checks"] if c["metric"] == "p99" and c["source"] == "target rpi4"]
    assert p99 and all(c["detail"] == "estimated" and c["status"] in ("pass", "fail") for c in p99)


@pytest.mark.slow
def test_quantize_auto_chooses_the_pte_cheapest_on_the_targets_emulated_core(mobilenet_checkpoint, tmp_path):
    out = tmp_path / "auto"
    result = runner.invoke(app, ["quantize", str(mobilenet_checkpoint), "--auto", "--format", "executorch",
                                 "--target", "rpi5", "--out", str(out)])
    assert result.exit_code == 0, result.output + result.stderr
    quantization = json.loads((out / "manifest.json").read_text())["quantization"]
    assert quantization["target_choice"] == {"basis": "estimated on emulated Cortex-A76 at 2400 MHz, 4 threads"}
    assert "Candidates compared on rpi5: estimated on emulated Cortex-A76" in result.stdout
    built = [c for c in quantization["candidates"] if c["method"] != "fp32" and c["error"] is None and not c["skipped"]]
    assert built and all(c["target"]["basis"] == "estimated" for c in built)
    for cand in built:
        assert cand["slower_than_float"] == (cand["target"]["ratio_to_float"] >= 1.0)
    chosen = [c for c in built if c["chosen"]]
    assert len(chosen) == 1
    assert chosen[0]["target"]["ratio_to_float"] == min(c["target"]["ratio_to_float"] for c in built if c["meets_budget"])
