"""A format from outside edgekit, added without editing an edgekit file: what "Extending edgekit" says.

The package below is written to a temporary folder with its own ``.dist-info`` (the three entry
points a plug-in declares), put on ``PYTHONPATH`` and driven through the CLI a user runs:
export -> quantize -> export int8 -> bundle -> verify -> the bundle's runner, which runs on a
"board" Python that has no plug-in and no edgekit on its path. The toy format stores an ONNX
graph as ``model.toy``: its entry, its int8 route and its board runtime are its own code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgekit.formats.artifacts import load_manifest
from edgekit.formats.reference import REFERENCE_FILE, read_reference

pytestmark = pytest.mark.slow

ENTRY = '''
from edgekit.formats import Board, Files, Format, Host, Quantization, register, onnx

FORMAT = register(Format(
    name="toy",
    files=Files(file_name="model.toy", suffixes=(".toy",)),
    host=Host(backend=__name__, modules=("onnxruntime", "onnx"), extra="core", default=False),
    board=Board(runtime="onnxruntime", footprint_mb=64.0, preference=50),
    quantization=Quantization(layer_names="onnx"),
))


def export_float(model, request):
    return {**onnx.export_float(model, request), "variant": "fp32-toy"}


def copy_quantized(request):
    return onnx.copy_quantized(request)


def predictor(path, details=None, threads=1):
    from edgekit.formats.evaluation import board_predictor

    return board_predictor(FORMAT.name, path, threads)


def check_file(path):
    onnx.check_file(path)
'''

ROUTES = '''
from edgekit.api import DynamicConfig, Produced, StaticConfig, route
from edgekit.quantize.routes import onnx as onnx_route

FILE = "model.toy"


def _as_toy(job, produced):
    (item,) = produced  # ONNX Runtime's int8 graph, moved under the toy's name
    (job.dest / item.path).rename(job.dest / FILE)
    return [Produced(FILE, "toy", {**item.details, "api": "toy over onnxruntime.quantization"})]


@route(StaticConfig, "toy")
def static(job, config):
    return _as_toy(job, onnx_route.static(job, config))


@route(DynamicConfig, "toy")
def dynamic(job, config):
    return _as_toy(job, onnx_route.dynamic(job, config))
'''

BOARD_RUNTIME = '''
from .onnx_runtime import OnnxRuntime


class ToyRuntime(OnnxRuntime):
    format = "toy"
    suffixes = (".toy",)


RUNTIME = ToyRuntime
'''

ENTRY_POINTS = '''
[edgekit.formats]
toy = toyfmt.entry

[edgekit.quantize_routes]
toy = toyfmt.routes

[edgekit.board_runtimes]
toy = toyfmt.board_runtime
'''


@pytest.fixture()
def plugin(tmp_path) -> dict:
    root = tmp_path / "site"
    package = root / "toyfmt"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "entry.py").write_text(ENTRY)
    (package / "routes.py").write_text(ROUTES)
    (package / "board_runtime.py").write_text(BOARD_RUNTIME)
    info = root / "toyfmt-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfmt\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return {**os.environ, "PYTHONPATH": str(root)}


def _toy_file(folder: Path) -> dict:
    """The toy file's manifest entry, read raw: this test's own process has no plug-in to load it with."""
    (entry,) = [f for f in json.loads((folder / "manifest.json").read_text())["files"] if f["format"] == "toy"]
    return entry


def _cli(env: dict, *args) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "edgekit", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def test_a_plugin_format_goes_from_export_to_the_boards_runner(plugin, digits_checkpoint, tmp_path):
    _, trained = load_manifest(digits_checkpoint)

    _cli(plugin, "export", digits_checkpoint, "--format", "toy", "--out", tmp_path / "fp32")
    fp32_file = _toy_file(tmp_path / "fp32")
    assert fp32_file["path"] == "model.toy" and fp32_file["details"]["variant"] == "fp32-toy"
    assert fp32_file["metrics"]["parity"]["max_abs"] <= 1e-4
    assert fp32_file["metrics"]["accuracy"] == pytest.approx(trained.metrics["accuracy"], abs=1e-9)

    _cli(plugin, "quantize", digits_checkpoint, "--method", "static", "--format", "toy", "--out", tmp_path / "int8")
    int8_file = _toy_file(tmp_path / "int8")
    assert int8_file["path"] == "model.toy" and int8_file["precision"] == "int8"
    assert int8_file["details"]["api"] == "toy over onnxruntime.quantization"
    assert int8_file["bytes"] < 0.5 * fp32_file["bytes"]
    assert trained.metrics["accuracy"] - int8_file["metrics"]["accuracy"] <= 0.01
    assert not (tmp_path / "int8" / "model.onnx").exists()

    _cli(plugin, "export", tmp_path / "int8", "--out", tmp_path / "int8-export")
    _cli(plugin, "bundle", tmp_path / "int8-export", "--target", "rpi4", "--out", tmp_path / "bundle")
    bundle = tmp_path / "bundle"
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["format"] == "toy" and info["model"] == "model.toy" and info["runtime"]["name"] == "onnxruntime"
    carried = bundle / "edgekit_board" / "runtimes" / "extra_toy.py"
    assert carried.read_text() == BOARD_RUNTIME  # the plug-in's runtime travels with the board package
    _cli(plugin, "verify", bundle)  # checksums cover it

    # the board: no plug-in, no edgekit, only the bundle's own files
    board_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-P", str(bundle / "runner.py"), str(bundle / "model.toy"),
                           "--json", str(tmp_path / "bench.json"), "--min-runs", "5", "--min-time", "0",
                           "--warmup", "1"], env=board_env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads((tmp_path / "bench.json").read_text())["results"]
    assert result["model"]["format"] == "toy" and result["model"]["precision"] == "int8"

    checked = subprocess.run([sys.executable, "-P", str(bundle / "check_outputs.py")], env=board_env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, check=False)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]

    # against the float torch model's reference outputs: the fp32 toy file equals them, the int8 one
    # keeps its decisions (read with the board runtime's base class: this process has no plug-in)
    from edgekit.board.runtimes.onnx_runtime import OnnxRuntime

    fp32_run, int8_run = OnnxRuntime(tmp_path / "fp32" / "model.toy", 1), OnnxRuntime(bundle / "model.toy", 1)
    for _, (inputs, expected) in read_reference(tmp_path / "fp32" / REFERENCE_FILE).items():
        arrays = [inputs[spec.name] for spec in trained.inputs]
        np.testing.assert_allclose(fp32_run.run(arrays)[0], expected, atol=1e-4, rtol=1e-3)
        agree = np.mean(int8_run.run(arrays)[0].argmax(-1) == expected.argmax(-1))
        assert agree >= 0.9, agree


def test_without_the_plugin_the_format_is_unknown_and_a_clash_is_refused(plugin, digits_checkpoint, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "edgekit", "export", str(digits_checkpoint), "--format", "toy",
                           "--out", str(tmp_path / "x")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "unknown format 'toy'" in done.stderr and not (tmp_path / "x").exists()

    clash = Path(plugin["PYTHONPATH"]) / "toyfmt" / "entry.py"
    clash.write_text(clash.read_text().replace('file_name="model.toy"', 'file_name="model.onnx"'))
    done = subprocess.run([sys.executable, "-m", "edgekit", "export", str(digits_checkpoint), "--format", "toy",
                           "--out", str(tmp_path / "y")], env=plugin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "the file name 'model.onnx' is already format 'onnx''s" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "y").exists()
