"""Interrupted runs lose nothing: the real CLI, in its own process group, is SIGKILLed at seeded
random moments within its measured duration. Each time the previous artifact at the final name
stays complete and loadable (checksums verified, model loaded), and a re-run (``--resume`` for
training) completes and clears what the killed runs left behind."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from edgekit.formats.artifacts import load_manifest

SEED = 1337
KILLS = 3
REPO = Path(__file__).resolve().parent.parent
CALIB = REPO / "calib_data" / "digits"

pytestmark = pytest.mark.slow


@pytest.fixture()
def env(tmp_path):
    return {**os.environ, "EDGEKIT_NO_PROGRESS": "1", "EDGEKIT_CACHE_DIR": str(tmp_path / "cache"),
            "TORCH_CPP_LOG_LEVEL": "ERROR", "OMP_NUM_THREADS": "1"}


def _argv(*args) -> list[str]:
    return [sys.executable, "-m", "edgekit", *map(str, args)]


def _complete(args, env, timeout=300) -> float:
    """Run to the end; the seconds it took."""
    started = time.monotonic()
    proc = subprocess.run(_argv(*args), env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return time.monotonic() - started


def _kill_after(args, env, delay: float) -> bool:
    """Start the command in its own process group, SIGKILL the group after ``delay`` seconds.
    False when it finished first."""
    proc = subprocess.Popen(_argv(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        proc.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def _delays(seconds: float, count: int, salt: int) -> list[float]:
    rng = random.Random(SEED + salt)
    return [rng.uniform(0.0, seconds) for _ in range(count)]


def _leftovers(final: Path) -> list[str]:
    """edgekit's temporaries (and a training work folder) beside ``final``."""
    return sorted(p.name for p in final.parent.iterdir()
                  if p.name.startswith(f".{final.name}.") or p.name == f"{final.name}.partial")


def _assert_loadable(folder: Path) -> None:
    """Checksums of every listed file match, every model file loads, reference data reads."""
    import onnxruntime as ort
    import torch

    from edgekit.formats.reference import read_reference
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(folder)  # verifies size + SHA-256 of every listed file
    for entry in manifest.files:
        path = folder / entry.path
        if entry.format == "checkpoint":
            load_model_from_artifact(folder, manifest)
        elif entry.format == "onnx":
            ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        else:
            torch.jit.load(str(path), map_location="cpu")
    if (folder / "reference.npz").exists():
        assert read_reference(folder / "reference.npz")
    for path in folder.iterdir():
        assert not path.name.startswith("."), f"a temporary inside the artifact: {path}"
        if path.suffix in (".json", ".jsonl") and path.name != "metrics.jsonl":
            json.loads(path.read_text())


def _assert_bundle_intact(folder: Path, archive_required: bool = True) -> None:
    """The folder is a whole bundle; its archive, when there, is whole and holds the same files.
    (Killed between its two commits, a bundle may lack its archive: never a mismatched one.)"""
    from edgekit.bundle.layout import read_bundle_json
    from edgekit.bundle.verify import verify_checksums

    verify_checksums(folder)  # every file, and no extra one
    read_bundle_json(folder)
    path = folder.parent / f"{folder.name}.tar.gz"
    if not path.exists() and not archive_required:
        return
    with tarfile.open(path) as archive:  # the archive is whole too, and of this very folder
        names = archive.getnames()
        sums = archive.extractfile(f"{folder.name}/SHA256SUMS").read()
    assert f"{folder.name}/model.onnx" in names
    assert sums == (folder / "SHA256SUMS").read_bytes(), "the archive beside the folder is of another build"


STAGES = {
    "quantize": lambda ck, st, ex, out: ["quantize", ck, "--method", "static", "--calib", CALIB, "--target", "rpi4",
                                         "--out", out],
    "export": lambda ck, st, ex, out: ["export", ck, "--format", "onnx,torchscript", "--out", out],
    "export-int8": lambda ck, st, ex, out: ["export", st, "--format", "onnx", "--out", out],
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_killed_stage_keeps_the_previous_artifact(stage, tmp_path, env, digits_checkpoint, digits_static,
                                                 digits_fp32_export):
    out = tmp_path / "artifact"
    args = STAGES[stage](digits_checkpoint, digits_static, digits_fp32_export, out)
    seconds = _complete(args, env)  # the previous artifact; and how long a run takes here
    _assert_loadable(out)
    killed = 0
    for delay in _delays(seconds, KILLS, salt=len(stage)):
        killed += _kill_after(args, env, delay)
        _assert_loadable(out)  # the previous artifact, or a complete new one: never a mixture
    assert killed >= 1, "no run was killed: the delays are not within the run's duration"
    _complete(args, env)
    _assert_loadable(out)
    assert _leftovers(out) == []  # what the killed runs left is gone after the next run


def test_killed_bundling_keeps_the_previous_bundle(tmp_path, env, digits_static):
    from edgekit.export.api import export

    exported = tmp_path / "int8"
    export(digits_static, exported, formats=("onnx",), target="rpi4")
    out = tmp_path / "dist" / "rpi4"
    args = ["bundle", exported, "--target", "rpi4", "--out", out]
    seconds = _complete(args, env)
    _assert_bundle_intact(out)
    killed = 0
    for delay in _delays(seconds, 2 * KILLS, salt=99):
        killed += _kill_after(args, env, delay)
        _assert_bundle_intact(out, archive_required=False)
    assert killed >= 1
    _complete(args, env)
    _assert_bundle_intact(out)
    assert _leftovers(out) == [] and not [p for p in out.parent.iterdir() if p.name.startswith(".rpi4.tar.gz.")]


TRAIN = ["train", "--set", "width=4", "--batch-size", "32", "--max-steps", "40", "--save-every", "3",
         "--eval-every", "10", "--log-every", "5", "--threads", "1", "--seed", "3"]


def test_killed_training_keeps_the_previous_checkpoint_and_resumes(tmp_path, env):
    out = tmp_path / "run"
    args = [*TRAIN, "--out", out]
    seconds = _complete(args, env)
    _assert_loadable(out)
    _, first = load_manifest(out)
    killed = 0
    for index, delay in enumerate(_delays(seconds, KILLS, salt=7)):
        resume = ["--resume"] if index else []  # a fresh run, then resumed runs, each killed
        killed += _kill_after([*args, *resume], env, delay)
        _assert_loadable(out)  # the finished run is untouched until a new one is complete
        partial = tmp_path / "run.partial"
        if partial.exists():
            assert not (partial / "manifest.json").exists()
            if (partial / "last.pt").exists():  # the resumable state is never half-written
                from edgekit.train.checkpoint import load_train_state

                assert load_train_state(partial / "last.pt")["meta"]["step"] <= 40
    assert killed >= 1
    _complete([*args, "--resume"], env)
    _assert_loadable(out)
    _, last = load_manifest(out)
    assert last.metrics["steps"] == 40 == first.metrics["steps"]
    assert _leftovers(out) == []  # the work folder was swapped in; temporaries are gone


def test_killed_first_training_run_resumes_in_place(tmp_path, env):
    """Without a previous artifact there is nothing to protect: the run trains in --out itself,
    and --resume continues from its last.pt."""
    out = tmp_path / "run"
    args = [*TRAIN, "--out", out]
    probe = tmp_path / "probe"
    seconds = _complete([*TRAIN, "--out", probe], env)
    killed = False
    for delay in sorted(_delays(seconds, 4, salt=11), reverse=True):
        killed = _kill_after(args, env, delay)
        if killed and (out / "last.pt").exists():
            break
    assert killed
    assert not (out / "manifest.json").exists() or load_manifest(out)  # never an artifact that does not load
    _complete([*args, "--resume"] if (out / "last.pt").exists() else args, env)
    _assert_loadable(out)
    assert load_manifest(out)[1].metrics["steps"] == 40 and _leftovers(out) == []
