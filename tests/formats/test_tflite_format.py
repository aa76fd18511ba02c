"""LiteRT (``model.tflite``) through the CLI a user runs: export, static and dynamic int8, bench,
gate, bundle and the bundle's own output check, held to the float torch model's outputs computed
here. litert-torch converts through JAX (seconds per file): the files are made once per module."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("litert_torch")
pytest.importorskip("ai_edge_litert")

from conftest import one_line_error  # noqa: E402
from edgekit.formats.artifacts import load_manifest  # noqa: E402
from edgekit.cli.app import app  # noqa: E402

pytestmark = pytest.mark.slow  # each conversion lowers through JAX and MLIR: 10-20 s
runner = CliRunner()


def _ok(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def _float_and_rows(checkpoint, rows: int = 48):
    import torch

    from edgekit.data.datasets import load_split
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(checkpoint)
    inputs = load_split(manifest.task["dataset"], "test").inputs[:rows]
    with torch.inference_mode():
        return load_model_from_artifact(folder, manifest).eval()(torch.from_numpy(inputs)).numpy(), inputs


def _tflite_logits(folder, inputs):
    from edgekit.board.runtimes.tflite_runtime import TfliteRuntime

    _, manifest = load_manifest(folder)
    return TfliteRuntime(folder / manifest.file("tflite").path, 1).run([inputs])[0]


def _cosine(a, b) -> float:
    return float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def tflite_fp32(digits_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("tflite") / "fp32"
    _ok("export", digits_checkpoint, "--format", "tflite", "--out", out)
    return out


@pytest.fixture(scope="module")
def tflite_int8(digits_checkpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("tflite")
    _ok("quantize", digits_checkpoint, "--method", "static", "--format", "tflite", "--out", work / "quantized")
    _ok("export", work / "quantized", "--out", work / "int8")
    return work / "int8"


def test_fp32_export_matches_the_float_model(tflite_fp32, digits_checkpoint):
    expected, inputs = _float_and_rows(digits_checkpoint)
    np.testing.assert_allclose(_tflite_logits(tflite_fp32, inputs), expected, atol=1e-4, rtol=1e-3)
    _, manifest = load_manifest(tflite_fp32)
    (entry,) = manifest.files
    assert (entry.path, entry.format, entry.precision, entry.details["batch"]) == ("model.tflite", "tflite", "fp32", 1)
    assert (tflite_fp32 / "model.tflite").read_bytes()[4:8] == b"TFL3"


def test_static_int8_keeps_the_decisions_in_a_quarter_of_the_bytes(tflite_int8, tflite_fp32, digits_checkpoint):
    expected, inputs = _float_and_rows(digits_checkpoint)
    got = _tflite_logits(tflite_int8, inputs)
    assert _cosine(got, expected) >= 0.99 and np.mean(got.argmax(1) == expected.argmax(1)) >= 0.95
    assert not np.allclose(got, expected, atol=1e-4)
    _, manifest = load_manifest(tflite_int8)
    (entry,) = manifest.files
    assert entry.precision == "int8" and entry.details["variant"] == "int8-static-tflite"
    assert entry.details["calibration_samples"] > 0
    from ai_edge_litert.interpreter import Interpreter

    (detail,) = Interpreter(model_path=str(tflite_int8 / "model.tflite")).get_input_details()
    assert detail["dtype"] == np.int8  # int8 kernels end to end, not float ops around fake quantization
    # weights: 1 byte each instead of 4 (the digits CNN is ~95 KB of float32 weights)
    assert (tflite_int8 / "model.tflite").stat().st_size < 0.4 * (tflite_fp32 / "model.tflite").stat().st_size


def test_dynamic_int8(digits_checkpoint, tmp_path):
    expected, inputs = _float_and_rows(digits_checkpoint)
    _ok("quantize", digits_checkpoint, "--method", "dynamic", "--format", "tflite", "--out", tmp_path / "q")
    got = _tflite_logits(tmp_path / "q", inputs)
    assert _cosine(got, expected) >= 0.99 and np.mean(got.argmax(1) == expected.argmax(1)) >= 0.95


def test_the_mobilenet_cnn_with_depthwise_layers(mobilenet_checkpoint, tmp_path):
    """fp32 only: an int8 conversion of this CNN takes minutes on a loaded 2-core machine (int8 is held on digits)."""
    expected, inputs = _float_and_rows(mobilenet_checkpoint, rows=16)
    _ok("export", mobilenet_checkpoint, "--format", "tflite", "--out", tmp_path / "fp32")
    np.testing.assert_allclose(_tflite_logits(tmp_path / "fp32", inputs), expected, atol=1e-4, rtol=1e-3)


def test_bench_json_gate_and_bundle(tflite_int8, tmp_path):
    bench = tmp_path / "bench.json"
    _ok("bench", tflite_int8, "--min-runs", "5", "--min-time", "0", "--warmup", "1", "--json", bench, "-q")
    (result,) = json.loads(bench.read_text())["results"]
    assert (result["model"]["format"], result["model"]["precision"]) == ("tflite", "int8")
    assert result["runtime"]["name"] == "ai-edge-litert"
    assert result["model"]["bytes"] == (tflite_int8 / "model.tflite").stat().st_size
    _ok("gate", bench, "--max-size-mb", "1")

    bundle = tmp_path / "bundle"
    _ok("bundle", tflite_int8, "--target", "rpi4", "--out", bundle)
    info = json.loads((bundle / "bundle.json").read_text())
    assert (info["format"], info["runtime"]["name"]) == ("tflite", "ai-edge-litert")
    assert "ai-edge-litert==" in (bundle / "requirements.txt").read_text()
    _ok("verify", bundle)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    checked = subprocess.run([sys.executable, "-P", str(bundle / "check_outputs.py")], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, check=False)
    assert checked.returncode == 0 and "PASS" in checked.stdout, checked.stdout[-2000:] + checked.stderr[-2000:]


def test_qat_is_refused_naming_what_tflite_takes(digits_checkpoint, tmp_path):
    result = runner.invoke(app, ["quantize", str(digits_checkpoint), "--method", "qat", "--format", "tflite",
                                 "--out", str(tmp_path / "q")])
    assert "no route to --format tflite" in one_line_error(result, 2) and not (tmp_path / "q").exists()


@pytest.mark.parametrize("content", [b"", b"\x00" * 64, b"\x1c\x00\x00\x00TFL3" + b"\xff" * 40])
def test_a_malformed_tflite_is_one_line(content, tmp_path):
    bad = tmp_path / "model.tflite"
    bad.write_bytes(content)
    result = runner.invoke(app, ["bench", str(bad), "--min-runs", "1", "--min-time", "0", "--warmup", "0"])
    assert "model.tflite" in one_line_error(result, 1)  # bench's exit for a model that will not load


def test_programs_started_after_an_export_print_no_jax_fork_warning(digits_checkpoint, tmp_path):
    # JAX warns at every fork of a process that imported it, and a pipeline starts dozens of programs
    # after its tflite export (bench workers and sandboxes, with a preexec function: a real fork)
    script = ("import subprocess, sys\n"
              "from typer.testing import CliRunner\n"
              "from edgekit.cli.app import app\n"
              "done = CliRunner().invoke(app, ['export', sys.argv[1], '--format', 'tflite', '--out', sys.argv[2]])\n"
              "assert done.exit_code == 0, done.output\n"
              "import jax\n"
              "done = CliRunner().invoke(app, ['bench', sys.argv[2], '--processes', '1', '--min-runs', '2', "
              "'--min-time', '0'])\n"
              "assert done.exit_code == 0, done.output\n"
              "sys.stderr.write(done.output)\n")
    done = subprocess.run([sys.executable, "-c", script, str(digits_checkpoint), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "default"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "JAX is multithreaded" not in done.stderr
