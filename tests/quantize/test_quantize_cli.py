"""`edgekit quantize` through the CLI: new options, one-line errors and exit codes."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--calibrate-method", "kl", "--format", "onnx"], "unknown calibration method 'kl'; choose one of: entropy, minmax, mse, percentile"),
        (["--calibrate-method", "percentile", "--percentile", "50", "--format", "onnx"], "percentile must be between 90 and 100"),
        (["--calibrate-method", "minmax", "--percentile", "99.9", "--format", "onnx"], "does not take: percentile"),
        # the TorchScript path calibrates with the engine's torch.ao observers: refused, not ignored
        (["--calibrate-method", "entropy"], "--calibrate-method applies to the ONNX path only"),
        (["--calibrate-method", "entropy", "--format", "onnx,torchscript"], "add --format onnx"),
        (["--percentile", "99.9", "--format", "torchscript"], "--percentile applies to the ONNX path only"),
        (["--activation-type", "int4"], "unknown activation type 'int4'"),
        (["--exclude", "no.such.layer", "--format", "torchscript"], "no layer named no.such.layer"),
        (["--max-drop", "-2"], "max drop must be between 0 and 100"),
        (["--method", "dynamic", "--input-shape", "1x8"], "apply to models from outside the zoo"),
    ],
)
def test_bad_options_are_one_line_errors(digits_checkpoint, tmp_path, extra, message):
    from conftest import CALIB_DIGITS

    args = ["quantize", str(digits_checkpoint), "--calib", str(CALIB_DIGITS), "--out", str(tmp_path / "q"), *extra]
    if "--method" in extra:
        args.remove("--calib")
        args.remove(str(CALIB_DIGITS))
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: ") and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "q").exists()


def test_onnx_model_from_cli_with_calibration_options(digits_fp32_export, tmp_path):
    from conftest import CALIB_DIGITS

    result = runner.invoke(app, [
        "quantize", str(digits_fp32_export / "model.onnx"), "--calib", str(CALIB_DIGITS), "--target", "x86-64",
        "--calibrate-method", "mse", "--calib-batch-size", "50", "--no-calib-cache", "--out", str(tmp_path / "q"),
    ])
    assert result.exit_code == 0, result.output + result.stderr
    assert "fidelity (binding metric)" in result.stdout
    assert "drop pts" not in result.stdout  # an unlabelled ONNX model: fidelity, never an accuracy drop
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    calib = manifest["quantization"]["calibration"]
    # 256 samples: 1/5 (51) held out of calibration to judge the file on (edgekit/fidelity/options.py)
    assert calib["method"] == "mse" and calib["cache"] == "off" and calib["samples"] == 205
    assert manifest["files"][0]["metrics"]["fidelity"]["evidence"] == "calib-holdout"
    qat = runner.invoke(app, ["quantize", str(digits_fp32_export / "model.onnx"), "--method", "qat",
                              "--out", str(tmp_path / "x")])
    assert qat.exit_code == 2 and "QAT needs the PyTorch model" in qat.stderr


def test_wrong_dtype_calibration_for_token_inputs(tmp_path):
    pytest.importorskip("transformers")
    config = {"model_type": "bert", "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 32}
    (tmp_path / "config.json").write_text(json.dumps(config))
    calib = tmp_path / "calib"
    calib.mkdir()
    np.savez(calib / "b.npz", input_ids=np.zeros((2, 8), np.float32), attention_mask=np.ones((2, 8), np.int64))
    result = runner.invoke(app, ["quantize", f"hf:{tmp_path}", "--random-init", "--calib", str(calib), "--out", str(tmp_path / "q")])
    assert result.exit_code == 2 and "expected integers (int64)" in result.stderr, result.stderr
    missing = runner.invoke(app, ["quantize", f"hf:{tmp_path}", "--random-init", "--out", str(tmp_path / "q")])
    assert missing.exit_code == 2 and "needs calibration data: --calib" in missing.stderr
