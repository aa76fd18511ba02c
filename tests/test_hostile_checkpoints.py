"""No code execution from data: checkpoints crafted to run code when unpickled are refused by
every command that reads one, and the payload never runs. Everything edgekit writes reads back
without pickle (weights_only=True, allow_pickle=False, JSON)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from corpus.hostile import (
    EVIL_WRITERS,
    as_language_model,
    assert_one_line_error,
    copy_artifact,
    leftovers,
    rehash,
)
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


def _hostile_checkpoint(digits_checkpoint: Path, tmp_path: Path, kind: str, marker: Path) -> Path:
    folder = copy_artifact(digits_checkpoint, tmp_path / "evil")
    EVIL_WRITERS[kind](folder / "checkpoint.pt", marker)
    rehash(folder)  # consistent with its manifest: only unpickling it could tell
    return folder


def _assert_refused(result, marker: Path) -> None:
    assert_one_line_error(result, 2, "refusing to load")
    line = result.stderr.strip().splitlines()[-1]
    assert "unsupported global posix.system" in line, line
    assert "weights_only" not in line and "False" not in line and "trusted source" not in line, line
    assert not marker.exists(), "the pickle payload ran"


COMMANDS = {
    "quantize-static": lambda ck, out: ["quantize", str(ck), "--method", "static", "--out", str(out)],
    "quantize-dynamic": lambda ck, out: ["quantize", str(ck), "--method", "dynamic", "--out", str(out)],
    "export": lambda ck, out: ["export", str(ck), "--out", str(out)],
    "generate": lambda ck, out: ["generate", str(ck), "--prompt", "x", "--max-tokens", "2"],
    "pipeline": lambda ck, out: ["pipeline", "--checkpoint", str(ck), "--out", str(out), "--methods", "dynamic"],
}


@pytest.mark.parametrize("kind", sorted(EVIL_WRITERS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_code_running_checkpoint_is_refused_and_never_runs(digits_checkpoint, tmp_path, command, kind):
    marker = tmp_path / "PWNED"
    folder = _hostile_checkpoint(digits_checkpoint, tmp_path, kind, marker)
    if command == "generate":
        as_language_model(folder)
        rehash(folder)
    out = tmp_path / "out"
    result = runner.invoke(app, COMMANDS[command](folder, out))
    _assert_refused(result, marker)
    if command != "pipeline":  # the pipeline's output folder holds its stages' folders; none was made
        assert leftovers(tmp_path, "out") == []
    else:
        assert not (out / "export").exists() and not (out / "quantized").exists()


@pytest.mark.parametrize("kind", sorted(EVIL_WRITERS))
@pytest.mark.parametrize("where", ["interrupted-in-place", "interrupted-partial", "finished"])
def test_train_resume_refuses_a_code_running_state(digits_checkpoint, tmp_path, kind, where):
    marker = tmp_path / "PWNED"
    out = tmp_path / "run"
    if where == "finished":
        copy_artifact(digits_checkpoint, out)
        state = out / "last.pt"
    elif where == "interrupted-partial":
        copy_artifact(digits_checkpoint, out)
        (tmp_path / "run.partial").mkdir()
        state = tmp_path / "run.partial" / "last.pt"
    else:
        out.mkdir()
        state = out / "last.pt"
    EVIL_WRITERS[kind](state, marker)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    result = runner.invoke(app, ["train", "--resume", "--epochs", "8", "--out", str(out)])
    _assert_refused(result, marker)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the artifact is untouched
    if where == "finished":  # the copy made to train further is gone again
        assert not (tmp_path / "run.partial").exists()


def test_state_dict_option_of_quantize_names_the_refused_global(tmp_path):
    """``quantize --state-dict`` (user models) goes through edgekit/sources/model_source.py."""
    marker = tmp_path / "PWNED"
    evil = EVIL_WRITERS["torch-zip"](tmp_path / "weights.pt", marker)
    result = runner.invoke(app, ["quantize", "tiny_models:tiny_net", "--method", "dynamic",
                                 "--input-shape", "1x3x6x6", "--state-dict", str(evil), "--out", str(tmp_path / "q")])
    assert not marker.exists()
    assert_one_line_error(result, 2, "refusing to load")


def test_state_dict_refusal_gives_no_dangerous_advice(tmp_path):
    marker = tmp_path / "PWNED"
    evil = EVIL_WRITERS["raw-pickle"](tmp_path / "weights.pt", marker)
    result = runner.invoke(app, ["quantize", "tiny_models:tiny_net", "--method", "dynamic",
                                 "--input-shape", "1x3x6x6", "--state-dict", str(evil), "--out", str(tmp_path / "q")])
    assert not marker.exists()
    _assert_refused(result, marker)


# ------------------------------------------------------------------------------------------------
# Everything edgekit writes reads back without pickle


def _is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.split("/", 1)[-1].startswith("code/") for name in archive.namelist())


def _check_readable_without_pickle(path: Path) -> str:
    import torch

    suffix = path.suffix
    if suffix in (".json",):
        json.loads(path.read_text(encoding="utf-8"))
        return "json"
    if suffix == ".jsonl":
        for line in path.read_text(encoding="utf-8").splitlines():
            json.loads(line)
        return "jsonl"
    if suffix in (".npz", ".npy"):
        loaded = np.load(path, allow_pickle=False)
        arrays = [loaded[k] for k in loaded.files] if suffix == ".npz" else [loaded]
        assert all(a.dtype != object for a in arrays), path
        return "numpy"
    if suffix == ".pt":
        if _is_torchscript(path):  # TorchScript: torch.jit's own restricted loader, no Python pickle
            torch.jit.load(str(path), map_location="cpu")
            return "torchscript"
        payload = torch.load(path, map_location="cpu", weights_only=True)
        assert isinstance(payload, dict) and isinstance(payload["model"], dict)
        json.loads(payload["meta"])  # metadata is JSON text, not pickled objects
        return "weights"
    if suffix == ".onnx":
        import onnx

        onnx.checker.check_model(onnx.load(str(path)))
        return "onnx"
    return "other"


def test_every_file_edgekit_writes_reads_back_without_pickle(digits_checkpoint, digits_static, digits_fp32_export,
                                                             tmp_path, monkeypatch):
    from conftest import CALIB_DIGITS

    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    cache = tmp_path / "cache"
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(cache))
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    quantize(digits_checkpoint, "static", tmp_path / "q", "rpi4", calib=CALIB_DIGITS, formats=("onnx",))  # + calib cache
    export(digits_static, tmp_path / "int8", target="rpi4")
    build_bundle(tmp_path / "int8", "rpi4", tmp_path / "bundle")
    lm_config = {"embed_dim": 16, "hidden_size": 32, "n_heads": 2, "max_len": 32}  # + token cache, tokenizer.json
    train(TrainConfig(model="lstm-lm", model_config=lm_config, batch_size=8, max_steps=2), tmp_path / "lm")
    folders = [digits_checkpoint, digits_static, digits_fp32_export, tmp_path / "q", tmp_path / "int8",
               tmp_path / "bundle", tmp_path / "lm", cache]
    kinds: dict[str, int] = {}
    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            kind = _check_readable_without_pickle(path)
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind == "other":
                assert path.suffix in (".py", ".txt", ".gz", "") or path.name in ("SHA256SUMS", "CACHEDIR.TAG"), path
    assert {"json", "jsonl", "numpy", "torchscript", "weights", "onnx"} <= set(kinds), kinds
