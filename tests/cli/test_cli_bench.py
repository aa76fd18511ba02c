"""``edgekit bench`` through typer's CliRunner: table, --json, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.records.result import load_results
from edgekit.cli.app import app
from tiny_models import build_models

FAST = ["--min-runs", "5", "--min-time", "0.05", "--warmup", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def art(tmp_path_factory) -> Path:
    return build_models(tmp_path_factory.mktemp("cli-bench") / "art", engine=None)


def invoke(*args):
    return CliRunner().invoke(app, ["bench", *map(str, args)])


def one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def test_bench_one_model_prints_a_table(art):
    result = invoke(art / "model.onnx", *FAST)
    assert result.exit_code == 0, result.output
    for text in ("model.onnx", "p50", "p99", "peak RSS", "97.00%", "onnx"):
        assert text in result.stdout
    assert "first" not in result.stdout  # ratios only with several models


def test_bench_several_models_writes_json_and_ratios(art, tmp_path):
    out = tmp_path / "reports" / "bench.json"
    result = invoke(art / "model.onnx", art / "model.pt", *FAST, "--json", out)
    assert result.exit_code == 0, result.output
    assert "first" in result.stdout and "1.00×" in result.stdout
    assert "interleaved" in result.stdout
    results = load_results(out)
    assert [r.model.format for r in results] == ["onnx", "torchscript"]
    assert json.loads(out.read_text())["schema"] == "edgekit.bench"


def test_quiet_prints_nothing(art, tmp_path):
    out = tmp_path / "bench.json"
    result = invoke(art / "model.onnx", *FAST, "--quiet", "--json", out, "--shape", "input=2x1x8x8")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert load_results(out)[0].input_shapes == {"input": [2, 1, 8, 8]}


def test_target_is_recorded(art, tmp_path):
    out = tmp_path / "bench.json"
    result = invoke(art / "model.onnx", "--target", "rpi4", "--min-runs", "3", "--min-time", "0", "--quiet", "--json", out)
    assert result.exit_code == 0, result.output
    assert load_results(out)[0].target == "rpi4"


@pytest.mark.parametrize("args, message", [
    (["{art}/missing.onnx"], "not found"),
    (["{art}"], "several models"),
    (["{art}/model.onnx", "--shape", "foo=1x2"], "'foo'"),
    (["{art}/model.onnx", "--shape", "input=1xbx8"], "malformed shape"),
    (["{art}/model.onnx", "--shape", "input=1x1x8x8", "--shape", "input=2x1x8x8"], "twice"),
    (["{art}/model.onnx", "--min-runs", "0"], "min-runs"),
    (["{art}/model.onnx", "--threads", "0"], "threads"),
    (["{art}/model.onnx", "--warmup", "-1"], "warmup"),
    (["{art}/model.onnx", "--batch", "0"], "batch"),
    (["{art}/model.onnx", "--min-time", "-1"], "min-time"),
    (["{art}/model.onnx", "--target", "nosuchboard"], "unknown target"),
    (["{art}/model.onnx", "--input", "{art}/none.npz"], "not found"),
    (["{art}/model.onnx", "--json", "{art}"], "is a folder"),
])
def test_usage_errors_exit_2_with_one_line(art, args, message):
    result = invoke(*[a.format(art=art) for a in args])
    assert result.exit_code == 2, result.output
    assert message in one_error_line(result)
    assert "Traceback" not in result.output


def test_runner_failure_exits_1(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a model")
    result = invoke(bad, *FAST)
    assert result.exit_code == 1
    assert "broken.onnx" in one_error_line(result)


def test_bench_modules_import_light():
    code = ("import sys, edgekit.cli.bench, edgekit.bench.api, edgekit.records.stats; "
            "print(sorted(m for m in ('numpy', 'torch', 'onnxruntime', 'onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
