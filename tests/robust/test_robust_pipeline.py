"""`edgekit pipeline` with real models' troubles (issue 32): a variant that fails is a row with its
reason and the others are measured; --calib takes image folders with --calib-preprocess."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import robust_models
from edgekit.cli.app import app

runner = CliRunner()
QUICK = ["--processes", "1", "--min-time", "0.05", "--min-runs", "5", "--no-emulate"]


@pytest.mark.slow  # two exports, a quantization and a benchmark: ~60 s
def test_a_variant_that_fails_is_a_row_and_the_run_goes_on(tmp_path):
    """torch.export refuses the model (ExecuTorch, fp32 and int8): before, the pipeline aborted with
    nothing measured; now both ONNX variants are benchmarked and gated, the ExecuTorch ones are
    FAILED rows with the reason, pipeline.json lists them, and the exit code is 4."""
    out = tmp_path / "run"
    result = runner.invoke(app, ["pipeline", "--source", "robust_models:branching", "--input-shape", "1x16",
                                 "--methods", "dynamic", "--format", "onnx,executorch", *QUICK, "--out", str(out)])
    assert result.exit_code == 4, result.output
    assert result.stderr.strip().splitlines()[-1] == ("Error: 2 variant(s) failed (fp32-executorch, "
                                                      "int8-dynamic-executorch); the others were measured")
    assert "Failed int8-dynamic-executorch: torch.export cannot capture the model" in result.stdout
    document = json.loads((out / "pipeline.json").read_text())
    assert [row["variant"] for row in document["variants"]] == ["fp32-onnx", "int8-dynamic-onnx"]
    assert sorted(v for f in document["failed"] for v in f["variants"]) == ["fp32-executorch", "int8-dynamic-executorch"]
    assert not list(out.rglob("*.pte"))


@pytest.mark.slow  # a static quantization and a benchmark: ~40 s
def test_pipeline_calibrates_from_an_image_folder(tmp_path):
    """`pipeline --calib` took only .npy/.npz; an image folder with --calib-preprocess (what quantize
    takes) now calibrates static int8 of a detector, whose free height/width is given."""
    from PIL import Image

    model = tmp_path / "detector.onnx"
    robust_models.export_detector(model)
    pages = tmp_path / "pages"
    pages.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray((rng.random((60, 80, 3)) * 255).astype(np.uint8)).save(pages / f"page{i}.png")
    out = tmp_path / "run"
    args = ["pipeline", "--source", str(model), "--methods", "static", "--format", "onnx", "--calib", str(pages),
            "--calib-preprocess", "resize=48x64,range=0:1", *QUICK, "--out", str(out)]
    first = runner.invoke(app, args)  # no size for the free axes: one line before any work
    assert first.exit_code == 2 and "--input-shape image=1x3x<height>x<width>" in first.stderr
    assert not (out / "pipeline.json").exists()
    result = runner.invoke(app, [*args, "--input-shape", "image=1x3x48x64"])
    assert result.exit_code == 0, result.output
    quantized = json.loads((out / "quantized" / "static" / "manifest.json").read_text())
    calibration = quantized["quantization"]["calibration"]
    assert calibration["reading"]["preprocess"]["resize"] == [48, 64] and calibration["samples"] >= 9
