"""train / quantize / export through the CLI, chained through files on disk, with exit codes."""

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()


def test_stages_chain_through_files(tmp_path):
    from conftest import CALIB_DIGITS

    ckpt, q, dist = tmp_path / "runs/digits", tmp_path / "runs/digits-int8", tmp_path / "dist"
    result = runner.invoke(app, ["train", "--model", "digits-cnn", "--out", str(ckpt), "--epochs", "6"])
    assert result.exit_code == 0, result.output
    assert (ckpt / "checkpoint.pt").is_file() and (ckpt / "manifest.json").is_file()
    result = runner.invoke(
        app, ["quantize", str(ckpt), "--method", "static", "--calib", str(CALIB_DIGITS), "--target", "rpi4", "--out", str(q)]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["export", str(q), "--format", "onnx,torchscript", "--out", str(dist)])
    assert result.exit_code == 0, result.output
    assert (dist / "model.onnx").is_file() and (dist / "model.pt").is_file()
    result = runner.invoke(app, ["export", str(ckpt), "--format", "onnx,torchscript", "--out", str(tmp_path / "fp32")])
    assert result.exit_code == 0, result.output
    _assert_really_int8(ckpt, dist, tmp_path / "fp32")


def _assert_really_int8(ckpt, dist, fp32):
    """Read with ONNX's and torch's own tools, not edgekit's labels: int8 weights, smaller files, and
    the float model's decisions kept on the held-out split."""
    from int8_checks import agreement_with_float, onnx_int8_initializers, torchscript_quantized_weights

    from edgekit import formats

    int8_elements, float_elements = onnx_int8_initializers(dist / "model.onnx")
    assert int8_elements >= 0.95 * (int8_elements + float_elements), (int8_elements, float_elements)
    assert onnx_int8_initializers(fp32 / "model.onnx")[0] == 0
    assert torchscript_quantized_weights(dist / "model.pt") > 0
    assert torchscript_quantized_weights(fp32 / "model.pt") == 0
    for name in ("model.onnx", "model.pt"):  # weights at 1 byte instead of 4 (plus scales, graph)
        assert (dist / name).stat().st_size < 0.5 * (fp32 / name).stat().st_size, name
    for fmt, name in (("onnx", "model.onnx"), ("torchscript", "model.pt")):
        cosine, top1 = agreement_with_float(ckpt, formats.get(fmt).ops().predictor(dist / name, {}, 1))
        assert cosine > 0.99 and top1 >= 0.95, (fmt, cosine, top1)


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["train", "--model", "resnet9000", "--out", "{tmp}/x"], 2, "unknown model 'resnet9000'; choose one of: digits-cnn"),
        (["train", "--epochs", "0", "--out", "{tmp}/x"], 2, "epochs must be a positive integer"),
        (["quantize", "{tmp}/missing", "--out", "{tmp}/q"], 2, "artifact not found"),
        (["quantize", "{ckpt}", "--method", "int3", "--out", "{tmp}/q"], 2, "unknown quantization method 'int3'"),
        (["quantize", "{ckpt}", "--target", "rpi9", "--out", "{tmp}/q"], 2, "unknown target 'rpi9'"),
        (["quantize", "{ckpt}", "--method", "static", "--calib", "{tmp}/nocalib", "--out", "{tmp}/q"], 2, "calibration data not found"),
        (["export", "{ckpt}", "--format", "tflight", "--out", "{tmp}/d"], 2, "unknown format 'tflight'"),
        (["export", "{ckpt}", "--out", "{blocked}/d"], 1, "cannot create output folder"),
    ],
)
def test_bad_input_one_line_errors(digits_checkpoint, tmp_path, args, code, message):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    args = [a.format(tmp=tmp_path, ckpt=digits_checkpoint, blocked=blocked) for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("Error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "q").exists() and not (tmp_path / "d").exists()


def test_debug_switch_shows_traceback(tmp_path, monkeypatch):
    # --debug sets these for the rest of the process; let monkeypatch restore them afterwards.
    monkeypatch.setenv("EDGEKIT_DEBUG", "")
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "ERROR")
    result = runner.invoke(app, ["--debug", "quantize", str(tmp_path / "missing"), "--out", str(tmp_path / "q")])
    assert result.exit_code == 2 and "Traceback" in result.stderr


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("edgekit ")
