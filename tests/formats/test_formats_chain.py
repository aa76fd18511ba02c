"""One chain per format in the table: export -> quantize -> export int8 -> bundle -> verify -> run.

A new format is tested by adding it to ``edgekit.formats``: these tests read the table.
Each stage is asserted on its own before the next one starts, through the CLI a user runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit import formats
from edgekit.formats.artifacts import load_manifest
from edgekit.cli.app import app
from edgekit.formats.reference import REFERENCE_FILE, read_reference

pytestmark = pytest.mark.slow
runner = CliRunner()


def _cli(*args: str) -> None:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("fmt", formats.available_names())
def test_chain_for_every_format(fmt, digits_checkpoint, tmp_path):
    entry = formats.get(fmt)
    _, trained = load_manifest(digits_checkpoint)
    float_accuracy = trained.metrics["accuracy"]

    # 1. fp32 export: the file the table names, reloaded and equal to the float model
    _cli("export", digits_checkpoint, "--out", tmp_path / "fp32", "--format", fmt, "--target", "rpi4")
    _, fp32 = load_manifest(tmp_path / "fp32")
    fp32_file = fp32.file(fmt)
    assert fp32_file.path == entry.files.file_name and fp32_file.precision == "fp32"
    assert fp32_file.metrics["parity"]["max_abs"] <= 1e-4
    assert fp32_file.metrics["accuracy"] == pytest.approx(float_accuracy, abs=1e-9)
    predict = entry.ops().predictor(tmp_path / "fp32" / entry.files.file_name, fp32_file.details)
    for batch, (inputs, expected) in read_reference(tmp_path / "fp32" / REFERENCE_FILE).items():
        np.testing.assert_allclose(predict(inputs), expected, atol=1e-4, rtol=1e-3)

    # 2. static int8, calibrated: smaller, and within a point of the float model's accuracy
    _cli("quantize", digits_checkpoint, "--method", "static", "--format", fmt, "--out", tmp_path / "int8",
         "--target", "rpi4")
    _, quantized = load_manifest(tmp_path / "int8")
    int8_file = quantized.file(fmt)
    assert int8_file.precision == "int8"
    assert int8_file.total_bytes < 0.5 * fp32_file.total_bytes
    assert float_accuracy - int8_file.metrics["accuracy"] <= 0.01
    assert int8_file.details.get("api")  # which quantization API wrote the file

    # 3. export of the int8 artifact, then a bundle for the board (its output check runs here)
    _cli("export", tmp_path / "int8", "--out", tmp_path / "int8-export", "--target", "rpi4")
    _, exported = load_manifest(tmp_path / "int8-export")
    assert exported.formats() == (fmt,) or list(exported.formats()) == [fmt]
    _cli("bundle", tmp_path / "int8-export", "--target", "rpi4", "--out", tmp_path / "bundle")
    info = json.loads((tmp_path / "bundle" / "bundle.json").read_text())
    assert info["format"] == fmt and info["model"] == entry.files.file_name
    assert info["runtime"]["name"] == entry.board.runtime
    requirements = (tmp_path / "bundle" / "requirements.txt").read_text()
    for dist in ("numpy", *entry.board.requirements, entry.board.runtime):
        assert f"{dist}==" in requirements

    # 4. verify: checksums hold
    _cli("verify", tmp_path / "bundle")

    # 5. the bundle's own runner, as a board runs it (no edgekit on its path)
    done = subprocess.run([sys.executable, "-P", str(tmp_path / "bundle" / "runner.py"),
                           str(tmp_path / "bundle" / entry.files.file_name), "--json", str(tmp_path / "bench.json"),
                           "--min-runs", "5", "--min-time", "0", "--warmup", "1"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads((tmp_path / "bench.json").read_text())["results"]
    assert result["model"]["format"] == fmt and result["model"]["precision"] == "int8"
    assert result["model"]["accuracy"] == pytest.approx(int8_file.metrics["accuracy"], abs=1e-9)
    assert result["timing"]["runs"] >= 5 and result["timing"]["p50"] > 0
