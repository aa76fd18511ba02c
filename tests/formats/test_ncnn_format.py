"""ncnn (``model.ncnn.param`` + ``model.ncnn.bin``) through the CLI a user runs: export, static
int8, bench, gate, bundle and the bundle's runner, held to the float torch model's outputs
(computed here, not read from a manifest) and to hand-computed file sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("ncnn")
pytest.importorskip("pnnx")

from conftest import one_line_error  # noqa: E402
from edgekit.formats.artifacts import load_manifest  # noqa: E402
from edgekit.cli.app import app  # noqa: E402

runner = CliRunner()


def _ok(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def _float_and_rows(checkpoint, rows: int = 64):
    """The float torch model's logits on the first ``rows`` test samples, and those samples."""
    import torch

    from edgekit.data.datasets import load_split
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(checkpoint)
    inputs = load_split(manifest.task["dataset"], "test").inputs[:rows]
    model = load_model_from_artifact(folder, manifest).eval()
    with torch.inference_mode():
        return model(torch.from_numpy(inputs)).numpy(), inputs


def _ncnn_logits(folder, inputs: np.ndarray) -> np.ndarray:
    from edgekit.board.runtimes.ncnn_runtime import NcnnRuntime

    _, manifest = load_manifest(folder)
    return NcnnRuntime(folder / manifest.file("ncnn").path, 1).run([inputs])[0]


def _fp32_weight_bytes(checkpoint) -> int:
    """What pnnx's fp32 .bin must hold: every weight as float32 behind a 4-byte tag, and a float32 bias per
    output channel (a convolution's BatchNorm is folded into one)."""
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(checkpoint)
    model = load_model_from_artifact(folder, manifest)
    weighted = [m for m in model.modules() if hasattr(m, "weight") and m.weight is not None and m.weight.dim() > 1]
    return sum(4 * m.weight.numel() + 4 + 4 * m.weight.shape[0] for m in weighted)


@pytest.fixture(scope="module")
def ncnn_digits(digits_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("ncnn") / "fp32"
    _ok("export", digits_checkpoint, "--format", "ncnn", "--out", out)
    return out


@pytest.fixture(scope="module")
def ncnn_digits_int8(digits_checkpoint, tmp_path_factory):
    """quantize (static, ncnn) then export: the int8 files a user benches and bundles."""
    work = tmp_path_factory.mktemp("ncnn")
    _ok("quantize", digits_checkpoint, "--method", "static", "--format", "ncnn", "--out", work / "quantized")
    _ok("export", work / "quantized", "--out", work / "int8")
    return work / "int8"


def test_fp32_export_matches_the_float_model(ncnn_digits, digits_checkpoint):
    expected, inputs = _float_and_rows(digits_checkpoint)
    np.testing.assert_allclose(_ncnn_logits(ncnn_digits, inputs), expected, atol=1e-4, rtol=1e-3)
    _, manifest = load_manifest(ncnn_digits)
    (entry,) = manifest.files
    assert (entry.path, entry.format, entry.precision) == ("model.ncnn.param", "ncnn", "fp32")
    assert sorted(os.listdir(ncnn_digits)) == ["manifest.json", "model.ncnn.bin", "model.ncnn.param", "reference.npz"]
    (data,) = entry.data_files  # the weights travel with the graph: listed, hashed, counted in its size
    assert data["path"] == "model.ncnn.bin" and data["bytes"] == _fp32_weight_bytes(digits_checkpoint)


def test_static_int8_is_ncnns_own_layout_and_keeps_the_decisions(ncnn_digits_int8, ncnn_digits, digits_checkpoint):
    expected, inputs = _float_and_rows(digits_checkpoint)
    got = _ncnn_logits(ncnn_digits_int8, inputs)
    cosine = float((got * expected).sum() / np.linalg.norm(got) / np.linalg.norm(expected))
    assert cosine >= 0.99 and np.mean(got.argmax(1) == expected.argmax(1)) >= 0.95
    assert not np.allclose(got, expected, atol=1e-4)  # int8 arithmetic, not the float weights
    _, manifest = load_manifest(ncnn_digits_int8)
    (entry,) = manifest.files
    assert entry.precision == "int8" and entry.details["variant"] == "int8-static-ncnn"
    assert entry.details["int8_layers"] == ["convrelu_0", "convrelu_1", "convrelu_2", "linear_4"]
    param = (ncnn_digits_int8 / "model.ncnn.param").read_text().splitlines()
    assert sum(line.split()[0] in ("Convolution", "InnerProduct") and line.endswith(" 8=2") for line in param) == 4
    # int8 weights: a quarter of the float32 bytes, plus per-channel scales; biases stay float
    fp32_bin = (ncnn_digits / "model.ncnn.bin").stat().st_size
    assert (ncnn_digits_int8 / "model.ncnn.bin").stat().st_size < 0.3 * fp32_bin


@pytest.mark.slow
def test_the_mobilenet_cnn_with_depthwise_layers(mobilenet_checkpoint, tmp_path):
    expected, inputs = _float_and_rows(mobilenet_checkpoint, rows=16)
    _ok("export", mobilenet_checkpoint, "--format", "ncnn", "--out", tmp_path / "fp32")
    np.testing.assert_allclose(_ncnn_logits(tmp_path / "fp32", inputs), expected, atol=1e-4, rtol=1e-3)
    _ok("quantize", mobilenet_checkpoint, "--method", "static", "--format", "ncnn", "--out", tmp_path / "int8")
    got = _ncnn_logits(tmp_path / "int8", inputs)
    assert float((got * expected).sum() / np.linalg.norm(got) / np.linalg.norm(expected)) >= 0.98
    param = (tmp_path / "int8" / "model.ncnn.param").read_text()
    assert " 8=1" in param  # depthwise convolutions: one weight scale per group


def test_bench_json_and_a_gate_on_it(ncnn_digits_int8, tmp_path):
    bench = tmp_path / "bench.json"
    _ok("bench", ncnn_digits_int8, "--min-runs", "5", "--min-time", "0", "--warmup", "1", "--json", bench, "-q")
    (result,) = json.loads(bench.read_text())["results"]
    assert result["model"]["format"] == "ncnn" and result["model"]["precision"] == "int8"
    assert result["runtime"]["name"] == "ncnn"
    on_disk = sum(p.stat().st_size for p in ncnn_digits_int8.glob("model.ncnn.*"))
    assert result["model"]["bytes"] == on_disk  # graph + weights
    _ok("gate", bench, "--max-size-mb", "1")
    broken = runner.invoke(app, ["gate", str(bench), "--max-size-mb", str(on_disk / 2 / 1e6)])
    assert broken.exit_code == 3, broken.output


def test_the_bundle_runs_on_a_python_with_only_numpy_and_ncnn(ncnn_digits_int8, tmp_path):
    bundle = tmp_path / "bundle"
    _ok("bundle", ncnn_digits_int8, "--target", "rpi4", "--out", bundle)
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["format"] == "ncnn" and info["model_data_files"] == ["model.ncnn.bin"]
    assert info["runtime"]["name"] == "ncnn" and info["precision"] == "int8"
    assert "ncnn==" in (bundle / "requirements.txt").read_text()
    _ok("verify", bundle)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    checked = subprocess.run([sys.executable, "-P", str(bundle / "check_outputs.py")], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, check=False)
    assert checked.returncode == 0 and "PASS" in checked.stdout, checked.stdout[-2000:] + checked.stderr[-2000:]


def test_dynamic_and_qat_are_refused_naming_what_ncnn_takes(digits_checkpoint, tmp_path):
    result = runner.invoke(app, ["quantize", str(digits_checkpoint), "--method", "dynamic", "--format", "ncnn",
                                 "--out", str(tmp_path / "q")])
    assert "no route to --format ncnn" in one_line_error(result, 2) and not (tmp_path / "q").exists()


@pytest.mark.parametrize("text", ["not an ncnn file\n", "7767517\n2 2\nInput in0 0 1 in0\n", "7767517\nx y\n"])
def test_a_malformed_param_is_one_line(text, tmp_path):
    bad = tmp_path / "model.ncnn.param"
    bad.write_text(text)
    (tmp_path / "model.ncnn.bin").write_bytes(b"\0" * 16)
    result = runner.invoke(app, ["bench", str(bad), "--min-runs", "1", "--min-time", "0", "--warmup", "0"])
    assert "model.ncnn.param" in one_line_error(result, 1)  # bench's exit for a model that will not load


def test_a_param_without_its_weights_is_one_line(ncnn_digits, tmp_path):
    alone = tmp_path / "model.ncnn.param"
    alone.write_bytes((ncnn_digits / "model.ncnn.param").read_bytes())
    result = runner.invoke(app, ["bench", str(alone), "--min-runs", "1", "--min-time", "0", "--warmup", "0"])
    assert "model.ncnn.bin" in one_line_error(result, 1)


def test_the_pipeline_plan_runs_each_method_on_the_formats_it_takes(digits_checkpoint, tmp_path):
    from edgekit.pipeline.run import PipelineConfig
    from edgekit.pipeline.plan import make_plan

    plan = make_plan(PipelineConfig(checkpoint=digits_checkpoint, methods=("dynamic", "static"),
                                    formats=("onnx", "ncnn"), out=tmp_path / "run"))
    assert [(run.label, run.config.formats) for run in plan.quant_runs] == [("dynamic", ("onnx",)),
                                                                             ("static", ("onnx", "ncnn"))]
    (skipped,) = plan.skipped
    assert skipped.variants == ("int8-dynamic-ncnn",)
    assert skipped.reason == "dynamic quantization has no route to ncnn (ncnn takes: static)"
