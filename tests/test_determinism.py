"""Determinism: the same inputs, recipe and seed give byte-identical int8 ONNX files (quantized and
exported), identical TorchScript outputs, and manifests whose hashes say so, wherever the run
happens (another process, another output folder, a warm or cold calibration cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgekit.formats.artifacts import load_manifest
from edgekit.core.fileio import sha256_file

REPO = Path(__file__).resolve().parent.parent
CALIB = REPO / "calib_data" / "digits"


def _quantize_in_process(checkpoint, method, out, cache, monkeypatch):
    from edgekit.quantize.api import quantize

    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(cache))
    options = {"calib": CALIB} if method == "static" else {}
    quantize(checkpoint, method, out, "rpi4", **options)
    return out


def _cli(args, cwd: Path, cache: Path) -> None:
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(cache), "EDGEKIT_NO_PROGRESS": "1"}
    proc = subprocess.run([sys.executable, "-m", "edgekit", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def twin_runs(digits_checkpoint, tmp_path_factory):
    """Each method quantized and exported twice: in this process, and by the CLI in another
    process, another working folder and output path, with its own (cold) calibration cache."""
    root = tmp_path_factory.mktemp("determinism")
    runs = {}
    mp = pytest.MonkeyPatch()
    try:
        for method in ("static", "dynamic"):
            a = _quantize_in_process(digits_checkpoint, method, root / "a" / method, root / "cache-a", mp)
            elsewhere = root / "elsewhere" / "deeper"
            elsewhere.mkdir(parents=True, exist_ok=True)
            b = elsewhere / f"q-{method}"
            extra = ["--calib", CALIB] if method == "static" else []
            _cli(["quantize", digits_checkpoint, "--method", method, "--target", "rpi4", *extra, "--out", b],
                 elsewhere, root / "cache-b")
            from edgekit.export.api import export

            ea, _ = export(a, root / "a" / f"export-{method}", target="rpi4")
            eb = elsewhere / f"export-{method}"
            _cli(["export", b, "--out", eb], elsewhere, root / "cache-b")
            runs[method] = (a, b, ea, eb)
    finally:
        mp.undo()
    return runs


@pytest.mark.parametrize("method", ["static", "dynamic"])
def test_int8_onnx_is_byte_identical(twin_runs, method):
    a, b, ea, eb = twin_runs[method]
    assert (a / "model.onnx").read_bytes() == (b / "model.onnx").read_bytes()
    assert (ea / "model.onnx").read_bytes() == (eb / "model.onnx").read_bytes()
    assert (a / "reference.npz").read_bytes() == (b / "reference.npz").read_bytes()


@pytest.mark.parametrize("method", ["static", "dynamic"])
def test_torchscript_outputs_are_identical(twin_runs, method):
    import torch

    from edgekit.formats.reference import read_reference

    a, b, ea, eb = twin_runs[method]
    cases = read_reference(a / "reference.npz")
    for left, right in ((a, b), (ea, eb)):
        first = torch.jit.load(str(left / "model.pt"), map_location="cpu").eval()
        second = torch.jit.load(str(right / "model.pt"), map_location="cpu").eval()
        for inputs, _ in cases.values():
            tensors = [torch.from_numpy(x) for x in inputs.values()]
            with torch.inference_mode():
                assert torch.equal(first(*tensors), second(*tensors))


@pytest.mark.parametrize("method", ["static", "dynamic"])
def test_no_time_path_or_temporary_name_is_embedded(twin_runs, method):
    import onnx

    a, b, ea, eb = twin_runs[method]
    root = str(a.parent.parent)
    for path in (a / "model.onnx", ea / "model.onnx"):
        model = onnx.load(str(path))
        texts = [model.doc_string, model.graph.doc_string, model.producer_version]
        texts += [f"{p.key}={p.value}" for p in model.metadata_props]
        texts += [node.name for node in model.graph.node] + [node.doc_string for node in model.graph.node]
        for text in texts:
            assert root not in text and "/tmp" not in text and ".tmp" not in text and "scratch" not in text, text
            assert not any(token in text for token in ("2024-", "2025-", "2026-", "2027-")), text
    for path in (a / "model.pt", ea / "model.pt"):
        import torch

        extra = {"edgekit.json": ""}
        torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
        provenance = extra["edgekit.json"].decode() if isinstance(extra["edgekit.json"], bytes) else extra["edgekit.json"]
        assert root not in provenance and "/tmp" not in provenance


@pytest.mark.parametrize("method", ["static", "dynamic"])
def test_manifests_record_model_and_recipe_hashes(twin_runs, method):
    a, b, ea, eb = twin_runs[method]
    for folder in (a, b, ea, eb):
        _, manifest = load_manifest(folder)
        for entry in manifest.files:
            assert entry.sha256 == sha256_file(folder / entry.path)
    (_, qa), (_, qb) = load_manifest(a), load_manifest(b)
    # ONNX bytes are identical; TorchScript files carry torch's per-process name mangling
    # (``___torch_mangle_N``), so only their outputs are compared (test above)
    assert qa.file("onnx").sha256 == qb.file("onnx").sha256
    recipe = qa.quantization["recipe_sha256"]
    assert len(recipe) == 64 and recipe == qb.quantization["recipe_sha256"]  # calib path and cache state aside
    assert load_manifest(ea)[1].quantization["recipe_sha256"] == recipe  # carried into the export


def test_recipe_hash_changes_with_the_recipe():
    from edgekit.formats.artifacts import recipe_sha256

    base = {"method": "static", "config": {"calib": "/a", "calibrate_method": "minmax", "per_channel": None}}
    moved = {**base, "config": {**base["config"], "calib": "/elsewhere", "calib_cache": False}}
    assert recipe_sha256(base, "rpi4") == recipe_sha256(moved, "rpi4")
    assert recipe_sha256(base, "rpi4") != recipe_sha256(base, "rpi5")
    assert recipe_sha256(base, "rpi4") != recipe_sha256({**base, "config": {**base["config"], "per_channel": False}}, "rpi4")
    assert recipe_sha256(base, "rpi4") != recipe_sha256({**base, "method": "dynamic"}, "rpi4")


def test_manifest_records_the_calibration_data_hash(twin_runs):
    a, b, _, _ = twin_runs["static"]
    calibration = load_manifest(a)[1].quantization["calibration"]
    assert len(calibration.get("data_sha256", "")) == 64
    assert calibration["data_sha256"] == load_manifest(b)[1].quantization["calibration"]["data_sha256"]


def test_float_export_is_byte_identical(digits_checkpoint, tmp_path):
    from edgekit.export.api import export

    export(digits_checkpoint, tmp_path / "one", target="rpi4")
    export(digits_checkpoint, tmp_path / "two" / "deeper", target="rpi4")
    assert (tmp_path / "one" / "model.onnx").read_bytes() == (tmp_path / "two" / "deeper" / "model.onnx").read_bytes()
    one = np.load(tmp_path / "one" / "reference.npz")
    two = np.load(tmp_path / "two" / "deeper" / "reference.npz")
    assert sorted(one.files) == sorted(two.files) and all(np.array_equal(one[k], two[k]) for k in one.files)
    files = [{f["format"]: f for f in json.loads((folder / "manifest.json").read_text())["files"]}
             for folder in (tmp_path / "one", tmp_path / "two" / "deeper")]
    assert files[0]["onnx"] == files[1]["onnx"]  # size, hash, metrics, parity: all the same
    assert files[0]["torchscript"]["metrics"] == files[1]["torchscript"]["metrics"]
