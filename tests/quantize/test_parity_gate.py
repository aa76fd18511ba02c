"""The int8 parity gate where it runs: ``quantize`` and ``export`` refuse an int8 file that diverges from
the float model, in one line, and write nothing. (With the parity call removed from
edgekit/quantize/search/accuracy.py or edgekit/export/api.py these tests fail: the diverged file is written.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from corpus.hostile import assert_one_line_error, leftovers
from typer.testing import CliRunner

from edgekit import formats
from edgekit.cli.app import app
from edgekit.quantize.registry import methods_for

runner = CliRunner()
SOURCE = ["diverging_models:cancelling", "--input-shape", "Nx1x8x8"]


@pytest.fixture(scope="module")
def calib(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("diverging-calib")
    np.save(folder / "x.npy", np.random.default_rng(0).standard_normal((64, 1, 8, 8)).astype(np.float32))
    return folder


def test_the_model_really_diverges_in_int8():
    """The reference for the refusals below: fake-quantizing the weights alone ruins the output."""
    import torch

    from diverging_models import cancelling

    model = cancelling().eval()
    x = torch.randn(32, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(x)
        for layer in (model.a, model.b):  # per-channel symmetric int8, the kindest recipe
            w = layer.weight
            scale = w.abs().amax(1, keepdim=True) / 127
            layer.weight.copy_(torch.round(w / scale) * scale)
        got = model(x)
    cosine = float(torch.nn.functional.cosine_similarity(want.flatten(), got.flatten(), dim=0))
    assert cosine < 0.9, cosine


@pytest.mark.parametrize("fmt, method", [(fmt, method) for fmt in formats.names()
                                          for method in methods_for(fmt) if method in ("dynamic", "static")])
def test_quantize_refuses_a_diverged_int8_file(fmt, method, calib, tmp_path):
    """Each format with each int8 method its routes declare (ncnn takes only static)."""
    if not formats.get(fmt).available():
        pytest.skip(f"the {formats.get(fmt).host.extra} extra is not installed")
    out = tmp_path / "int8"
    extra = ["--calib", str(calib)] if method == "static" else []
    result = runner.invoke(app, ["quantize", *SOURCE, "--method", method, "--format", fmt, *extra,
                                 "--target", "rpi4", "--out", str(out)])
    assert_one_line_error(result, 1, "diverges from the float model")
    assert leftovers(tmp_path, "int8") == []


@pytest.fixture(scope="module")
def good_int8(digits_static, tmp_path_factory) -> Path:
    return digits_static


def _with_other_reference(artifact: Path, dest: Path) -> Path:
    """A copy of a good int8 artifact whose recorded float outputs are another model's (reversed
    class order): only export's parity check can notice; every checksum is made consistent."""
    from corpus.hostile import rehash

    shutil.copytree(artifact, dest)
    with np.load(dest / "reference.npz") as data:
        arrays = {key: (data[key][:, ::-1].copy() if key.endswith("/output") else data[key]) for key in data.files}
    with open(dest / "reference.npz", "wb") as fh:
        np.savez(fh, **arrays)
    rehash(dest)
    return dest


@pytest.mark.parametrize("fmt", [name for name in formats.names() if formats.get(name).host.default])
def test_export_refuses_an_int8_file_that_no_longer_matches_the_float_model(good_int8, fmt, tmp_path):
    tampered = _with_other_reference(good_int8, tmp_path / "q")
    manifest = json.loads((tampered / "manifest.json").read_text())
    assert fmt in [f["format"] for f in manifest["files"]]
    result = runner.invoke(app, ["export", str(tampered), "--format", fmt, "--out", str(tmp_path / "dist")])
    assert_one_line_error(result, 1, "int8")
    assert "diverges" in result.stderr or "agreement" in result.stderr or "cosine" in result.stderr, result.stderr
    assert leftovers(tmp_path, "dist") == []


def test_export_of_the_untampered_artifact_passes(good_int8, tmp_path):
    """The control: the same command on the artifact as quantize wrote it succeeds."""
    result = runner.invoke(app, ["export", str(good_int8), "--format", "onnx", "--out", str(tmp_path / "dist")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "dist" / "model.onnx").is_file()
