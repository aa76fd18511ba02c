"""A method and a format from outside edgekit, declared through entry points, with no edgekit file edited.

The plug-in brings ``fp16`` (a method whose files hold float16-rounded weights: precision "fp16")
and ``half`` (a format: an ONNX graph stored as ``model.half``), each declaring only itself:
the method names its precision, routes name the formats it writes (``half`` and the built-in
``onnx``). Driven through the CLI a user runs: quantize -> export -> bundle -> verify -> the
bundle's own output check on a Python without the plug-in; the labels come from the method, the
help from the registries, and the format table's own tests pass with the plug-in loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

FORMAT = '''
from edgekit.formats import Board, Files, Format, Host, Quantization, onnx, register

FORMAT = register(Format(
    name="half",
    files=Files(file_name="model.half", suffixes=(".half",)),
    host=Host(backend=__name__, modules=("onnxruntime", "onnx"), extra="core", default=False),
    board=Board(runtime="onnxruntime", footprint_mb=64.0, preference=60),
    quantization=Quantization(layer_names="onnx"),
))


def export_float(model, request):
    return {**onnx.export_float(model, request), "variant": "fp32-half"}


def copy_quantized(request):
    return onnx.copy_quantized(request)


def predictor(path, details=None, threads=1):
    from edgekit.formats.evaluation import board_predictor

    return board_predictor(FORMAT.name, path, threads)


def check_file(path):
    onnx.check_file(path)
'''

METHOD = '''
from dataclasses import dataclass, field

from edgekit.api import Produced, QuantConfig, method, route


def _table_defaults():
    from edgekit import formats

    return formats.default_names()


@method("fp16", "weights rounded to float16")
@dataclass(frozen=True)
class Fp16Config(QuantConfig):
    label = "fp16 weights"
    precision = "fp16"

    formats: tuple = field(default_factory=_table_defaults)


def _rounded(job, name):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(job.float_onnx()))
    for tensor in model.graph.initializer:
        values = numpy_helper.to_array(tensor)
        if values.dtype == np.float32:
            tensor.CopyFrom(numpy_helper.from_array(values.astype(np.float16).astype(np.float32), tensor.name))
    onnx.save(model, str(job.dest / name))
    return {"weights": "float16-rounded", "api": "fp16 plug-in"}


@route(Fp16Config, "half")
def to_half(job, config):
    return [Produced("model.half", "half", _rounded(job, "model.half"))]


@route(Fp16Config, "onnx")
def to_onnx(job, config):
    return [Produced("model.onnx", "onnx", _rounded(job, "model.onnx"))]
'''

BOARD_RUNTIME = '''
from .onnx_runtime import OnnxRuntime


class HalfRuntime(OnnxRuntime):
    format = "half"
    suffixes = (".half",)


RUNTIME = HalfRuntime
'''

ENTRY_POINTS = '''
[edgekit.formats]
half = halfplug.entry

[edgekit.quantize_routes]
fp16 = halfplug.method

[edgekit.board_runtimes]
half = halfplug.board_runtime
'''


@pytest.fixture()
def plugin(tmp_path) -> dict:
    root = tmp_path / "site"
    package = root / "halfplug"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "entry.py").write_text(FORMAT)
    (package / "method.py").write_text(METHOD)
    (package / "board_runtime.py").write_text(BOARD_RUNTIME)
    info = root / "halfplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: halfplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return {**os.environ, "PYTHONPATH": str(root)}


def _cli(env: dict, *args, code: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "edgekit", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def _files(folder: Path) -> list[dict]:
    """Manifest entries read raw: this process has no plug-in to load them with."""
    return json.loads((folder / "manifest.json").read_text())["files"]


def _float16_exact(path: Path) -> bool:
    import onnx
    from onnx import numpy_helper

    values = [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer]
    floats = [v for v in values if v.dtype == np.float32 and v.size > 1]
    return bool(floats) and all(np.array_equal(v, v.astype(np.float16).astype(np.float32)) for v in floats)


def test_a_plugin_method_and_format_go_from_quantize_to_the_boards_check(plugin, digits_checkpoint, tmp_path):
    # no --format: the table's default formats the method has a route to (onnx, not torchscript)
    _cli(plugin, "quantize", digits_checkpoint, "--method", "fp16", "--out", tmp_path / "default")
    (entry,) = _files(tmp_path / "default")
    assert (entry["format"], entry["precision"], entry["details"]["variant"]) == ("onnx", "fp16", "fp16-fp16-onnx")
    assert _float16_exact(tmp_path / "default" / "model.onnx")

    _cli(plugin, "quantize", digits_checkpoint, "--method", "fp16", "--format", "half", "--out", tmp_path / "q")
    (entry,) = _files(tmp_path / "q")
    assert (entry["path"], entry["precision"], entry["details"]["api"]) == ("model.half", "fp16", "fp16 plug-in")
    assert entry["metrics"]["parity"]["cosine"] > 0.999

    _cli(plugin, "export", tmp_path / "q", "--out", tmp_path / "export")
    (entry,) = _files(tmp_path / "export")
    assert entry["precision"] == "fp16" and _float16_exact(tmp_path / "export" / "model.half")
    _cli(plugin, "bundle", tmp_path / "export", "--target", "rpi4", "--out", tmp_path / "bundle")
    info = json.loads((tmp_path / "bundle" / "bundle.json").read_text())
    assert (info["format"], info["precision"], info["model"]) == ("half", "fp16", "model.half")
    _cli(plugin, "verify", tmp_path / "bundle")

    board_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no plug-in, no edgekit
    checked = subprocess.run([sys.executable, "-P", str(tmp_path / "bundle" / "check_outputs.py")], env=board_env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]

    # against the float torch model, computed here: fp16-rounded weights stay within 1e-2
    import torch

    from edgekit.formats.artifacts import load_manifest
    from edgekit.board.runtimes.onnx_runtime import OnnxRuntime
    from edgekit.data.datasets import load_split
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(digits_checkpoint)
    rows = load_split("digits", "test").inputs[:64]
    with torch.inference_mode():
        expected = load_model_from_artifact(folder, manifest).eval()(torch.from_numpy(rows)).numpy()
    got = OnnxRuntime(tmp_path / "bundle" / "model.half", 1).run([rows])[0]
    np.testing.assert_allclose(got, expected, atol=1e-2)
    assert not np.array_equal(got, expected)


def test_the_registries_speak_for_the_plugin(plugin, digits_checkpoint, tmp_path):
    helped = " ".join(_cli(plugin, "quantize", "--help").stdout.split())
    assert "fp16 (fp16: half, onnx)" in helped and "static (int8:" in helped
    assert "half (takes fp16)" in helped and "onnx (takes dynamic/fp16/qat/static)" in helped
    refused = _cli(plugin, "quantize", digits_checkpoint, "--method", "dynamic", "--format", "half",
                   "--out", tmp_path / "x", code=2)
    assert "no route to --format half" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1

    # the format table's own tests need no edit for a new format and a new method
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           str(REPO / "tests" / "formats" / "test_format_table.py"),
                           "-k", "consistently or knows_every_format or complete or unknown_format or whole_table"],
                          env=plugin, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:]
