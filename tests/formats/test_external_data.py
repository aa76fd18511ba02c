"""ONNX external data (models over 2 GB): export, quantize, bundle and bench carry model.onnx.data.

A real 2.4 GB model takes minutes and ~5 GB of RAM (benchmarks/external_data.py); here the
same code paths run on the digits CNN, either forced with ``--external-data`` or by lowering
the size at which edgekit switches to external data.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from conftest import one_line_error
from typer.testing import CliRunner

from edgekit.core import onnx_files
from edgekit.formats.artifacts import load_manifest
from edgekit.cli.app import app
from edgekit.core.errors import InputFileError

runner = CliRunner()
CALIB = Path(__file__).resolve().parents[2] / "calib_data" / "digits"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _matmul_model(weight: np.ndarray):
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, weight.shape[0]])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None, weight.shape[1]])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def external_export(digits_checkpoint, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("external") / "fp32"
    result = runner.invoke(app, ["export", str(digits_checkpoint), "--format", "onnx", "--external-data", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


# --- the file pair --------------------------------------------------------------------------


def test_save_splits_weights_into_one_data_file_and_loads_back(tmp_path):
    weight = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    path = tmp_path / "model.onnx"
    assert onnx_files.save(_matmul_model(weight), path, external=True) == ["model.onnx.data"]
    data = tmp_path / "model.onnx.data"
    assert data.stat().st_size == weight.nbytes  # the one big tensor, nothing else
    assert path.stat().st_size < 1024
    assert data.stat().st_mode & 0o777 == path.stat().st_mode & 0o777
    loaded = onnx_files.load(path)
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), weight)
    assert onnx_files.data_files(path) == ["model.onnx.data"]
    # Saving again without external data removes the stale data file (onnx would append to it).
    assert onnx_files.save(loaded, path, external=False) == []
    assert not data.exists() and onnx_files.data_files(path) == []


def test_the_switch_is_by_size(tmp_path, monkeypatch):
    weight = np.ones((64, 32), np.float32)
    assert onnx_files.tensor_bytes(_matmul_model(weight)) == weight.nbytes
    assert onnx_files.save(_matmul_model(weight), tmp_path / "small.onnx") == []
    monkeypatch.setattr(onnx_files, "EXTERNAL_DATA_THRESHOLD", weight.nbytes - 1)
    assert onnx_files.save(_matmul_model(weight), tmp_path / "big.onnx") == ["big.onnx.data"]


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "sub/w.bin", "", "w.bin\x00x", "link.bin", "missing.bin"])
def test_hostile_or_broken_locations_are_refused(tmp_path, location):
    (tmp_path / "outside.bin").write_bytes(b"\0" * 8192)
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "w.bin").write_bytes(b"\0" * 8192)
    (folder / "link.bin").symlink_to(tmp_path / "outside.bin")
    model = _matmul_model(np.zeros((64, 32), np.float32))
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "8192")):
        tensor.external_data.add(key=key, value=value)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(InputFileError, match="external data|not a file beside the model"):
        onnx_files.load(path)
    result = runner.invoke(app, ["quantize", str(path), "--method", "dynamic", "--out", str(tmp_path / "q")])
    assert "external data" in one_line_error(result, 2)
    assert not (tmp_path / "q").exists()


def test_a_cut_data_file_is_an_input_error(tmp_path):
    path = tmp_path / "model.onnx"
    onnx_files.save(_matmul_model(np.ones((64, 32), np.float32)), path, external=True)
    data = tmp_path / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(InputFileError, match="external data cannot be read"):
        onnx_files.load(path)


# --- export -----------------------------------------------------------------------------------


def test_export_writes_graph_and_data_and_matches_the_float_model(digits_checkpoint, external_export):
    import onnxruntime as ort

    from edgekit.formats.reference import read_reference
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(external_export)  # verifies both files' checksums
    entry = manifest.file("onnx")
    data = folder / "model.onnx.data"
    assert entry.data_files == [{"path": "model.onnx.data", "sha256": _sha256(data), "bytes": data.stat().st_size}]
    assert entry.sha256 == _sha256(folder / "model.onnx") and entry.details["external_data"] == ["model.onnx.data"]
    assert entry.total_bytes == (folder / "model.onnx").stat().st_size + data.stat().st_size
    # The weights live in the data file: nearly all the float model's parameter bytes.
    ckpt_folder, ckpt = load_manifest(digits_checkpoint)
    model = load_model_from_artifact(ckpt_folder, ckpt)
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert 0.9 * param_bytes < data.stat().st_size <= param_bytes
    assert (folder / "model.onnx").stat().st_size < 0.1 * data.stat().st_size
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    for inputs, expected in read_reference(folder / "reference.npz").values():
        np.testing.assert_allclose(session.run(None, inputs)[0], expected, atol=1e-4, rtol=1e-3)
    assert entry.metrics["parity"]["max_abs"] < 1e-4


def test_models_past_the_threshold_get_external_data_without_asking(digits_checkpoint, tmp_path, monkeypatch):
    """What happens to every model over 2 GB, shown with the threshold lowered to 10 kB."""
    monkeypatch.setattr(onnx_files, "EXTERNAL_DATA_THRESHOLD", 10_000)
    result = runner.invoke(app, ["export", str(digits_checkpoint), "--format", "onnx", "--out", str(tmp_path / "e")])
    assert result.exit_code == 0, result.output
    _, manifest = load_manifest(tmp_path / "e")
    assert [d["path"] for d in manifest.file("onnx").data_files] == ["model.onnx.data"]
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == ["manifest.json", "model.onnx", "model.onnx.data", "reference.npz"]


def test_a_changed_data_file_fails_the_checksum(external_export, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(external_export, copy)
    data = copy / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(InputFileError, match="external data file .* does not match its manifest checksum"):
        load_manifest(copy)
    data.unlink()
    result = runner.invoke(app, ["bundle", str(copy), "--out", str(tmp_path / "b")])
    assert "external data file missing" in one_line_error(result, 2)
    assert not (tmp_path / "b").exists()


def test_manifest_data_paths_may_not_leave_the_folder(external_export, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(external_export, copy)
    doc = json.loads((copy / "manifest.json").read_text())
    doc["files"][0]["data_files"][0]["path"] = "../model.onnx.data"
    (copy / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match="escapes the artifact folder"):
        load_manifest(copy)


# --- quantize, optimise, bundle, bench ------------------------------------------------------


@pytest.fixture(scope="module")
def external_bundle(external_export, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("external-int8")
    steps = (
        ["quantize", str(external_export / "model.onnx"), "--method", "static", "--calib", str(CALIB),
         "--target", "rpi4", "--out", str(base / "int8")],
        ["export", str(base / "int8"), "--format", "onnx", "--optimize", "--out", str(base / "export")],
        ["bundle", str(base / "export"), "--target", "rpi4", "--out", str(base / "rpi4")],
    )
    for argv in steps:
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, (argv[0], result.output)
    return base


def test_int8_from_an_external_data_model_keeps_the_layout(external_export, external_bundle):
    from edgekit.formats.reference import read_reference

    for stage in ("int8", "export"):
        folder, manifest = load_manifest(external_bundle / stage)
        entry = manifest.file("onnx")
        assert [d["path"] for d in entry.data_files] == ["model.onnx.data"], stage
    _, fp32 = load_manifest(external_export)
    assert entry.total_bytes < 0.4 * fp32.file("onnx").total_bytes  # int8 weights: about a quarter
    assert entry.details["ort_optimization"] == "extended"
    cases = read_reference(external_bundle / "export" / "reference.npz")
    from edgekit.formats.evaluation import onnx_predictor

    predict = onnx_predictor(external_bundle / "export" / "model.onnx")
    for inputs, expected in cases.values():
        assert (predict(inputs).argmax(1) == expected.argmax(1)).mean() >= 0.8


def test_the_bundle_carries_and_checksums_the_data_file(external_bundle):
    import tarfile

    from edgekit.bundle.verify import read_checksums

    bundle = external_bundle / "rpi4"
    sums = read_checksums(bundle)
    assert sums["model.onnx.data"] == _sha256(bundle / "model.onnx.data")
    assert _sha256(bundle / "model.onnx.data") == _sha256(external_bundle / "export" / "model.onnx.data")
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["model_data_files"] == ["model.onnx.data"]
    assert info["model_bytes"] == (bundle / "model.onnx").stat().st_size + (bundle / "model.onnx.data").stat().st_size
    with tarfile.open(external_bundle / "rpi4.tar.gz") as tar:
        assert "rpi4/model.onnx.data" in tar.getnames()
    result = runner.invoke(app, ["verify", str(bundle)])
    assert result.exit_code == 0 and "files match SHA256SUMS" in result.stdout


def test_bench_counts_the_data_file_in_the_model_size(external_bundle, tmp_path):
    out = tmp_path / "bench.json"
    result = runner.invoke(app, ["bench", str(external_bundle / "rpi4"), "--min-runs", "3", "--min-time", "0.05",
                                 "--warmup", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    model = json.loads(out.read_text())["results"][0]["model"]
    bundle = external_bundle / "rpi4"
    assert model["bytes"] == (bundle / "model.onnx").stat().st_size + (bundle / "model.onnx.data").stat().st_size
    assert model["sha256"] == _sha256(bundle / "model.onnx")


def test_the_bundle_runs_where_it_is_copied_to(external_bundle, tmp_path):
    """The runner on a copied bundle (as on a board): ORT finds the data file beside the graph."""
    import shutil
    import subprocess
    import sys

    board = tmp_path / "board"
    shutil.copytree(external_bundle / "rpi4", board)
    proc = subprocess.run([sys.executable, str(board / "check_outputs.py"), "--model", str(board / "model.onnx"),
                           "--format", "onnx"], capture_output=True, text=True, cwd=tmp_path, check=False,
                          env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr
    from edgekit.board.check import read_output

    doc, verdict = read_output(proc.stdout)
    assert verdict.startswith("PASS: ")
    assert doc["top1_agreement"] >= 0.8 and doc["cosine"] >= 0.95
