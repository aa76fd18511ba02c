"""``quantize --auto`` calibrates its static recipes on what ``--method static`` would use.

Before: without ``--calib`` every static recipe was dropped without a word, and the digits model
came out as a dynamic TorchScript file at 0.99x the float size. Now the packaged set of a zoo
model is used (as ``--method static`` uses it), and a model edgekit ships no set for gets its
static recipes listed as skipped, with the reason.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import one_line_error
from edgekit.cli.app import app

pytestmark = pytest.mark.slow
runner = CliRunner()


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


def test_auto_without_calib_calibrates_on_the_packaged_set(mobilenet_checkpoint, tmp_path):
    """On the default pipeline model, where int8 beats float by a wide margin (on the 8x8 digits CNN
    whether any int8 file is faster than 0.02 ms of float is a coin flip, and --auto then exits 3)."""
    from edgekit.data.calibsets import default_calibration

    result = runner.invoke(app, ["quantize", str(mobilenet_checkpoint), "--auto", "--format", "onnx",
                                 "--target", "x86-64", "--out", str(tmp_path / "auto")])
    assert result.exit_code == 0, result.output
    quantization = json.loads((tmp_path / "auto" / "manifest.json").read_text())["quantization"]
    static = [c for c in quantization["candidates"] if c["method"] == "static"]
    assert {c["name"] for c in static} >= {"static-minmax", "static-percentile", "static-entropy", "static-mse"}
    assert all(c["error"] is None and c["skipped"] is None and c["value"] >= 0.9 for c in static), static
    packaged = default_calibration("digits32")
    assert quantization["config"]["calib"] == str(packaged) and quantization["config"]["calib_source"] == "packaged"
    # the very set --method static takes without --calib
    plain = runner.invoke(app, ["quantize", str(mobilenet_checkpoint), "--method", "static", "--format", "onnx",
                                "--target", "x86-64", "--out", str(tmp_path / "static")])
    assert plain.exit_code == 0, plain.output
    reference = json.loads((tmp_path / "static" / "manifest.json").read_text())["quantization"]["calibration"]
    assert reference["source"] == str(packaged)
    assert quantization["calibration"]["data_sha256"] == reference["data_sha256"]
    assert quantization["calibration"]["samples"] == reference["samples"] == 256


def test_auto_says_why_static_recipes_are_skipped(digits_fp32_export, tmp_path):
    """An ONNX file has no packaged set: the static rows are in the table, each saying why."""
    model = digits_fp32_export / "model.onnx"
    result = runner.invoke(app, ["quantize", str(model), "--auto", "--target", "x86-64", "--out", str(tmp_path / "a")],
                           env={"COLUMNS": "250"})
    assert result.exit_code in (0, 3), result.output  # 3: the dynamic file was not faster than float here
    rows = [line for line in result.stdout.splitlines() if "static-" in line]
    assert len(rows) == 5 and all("skipped: no calibration data" in row for row in rows), result.stdout
    if result.exit_code == 0:
        candidates = json.loads((tmp_path / "a" / "manifest.json").read_text())["quantization"]["candidates"]
        skipped = [c for c in candidates if c["method"] == "static"]
        assert len(skipped) == 5 and all(c["skipped"].startswith("no calibration data") and not c["path"]
                                          for c in skipped)
    else:
        lines = result.stderr.strip().splitlines()  # a verdict: one plain line, exit 3
        assert len(lines) == 1 and "5 static skipped: no calibration data" in lines[0], result.stderr
    orphan = runner.invoke(app, ["quantize", str(model), "--auto", "--calib-preprocess", "crop=8",
                                 "--out", str(tmp_path / "x")])
    assert "give --calib" in one_line_error(orphan, 2)
