"""Helpers that make hostile and damaged inputs for the reliability tests (test_hostile_*.py,
test_interrupt*.py, test_determinism*.py). Imported as ``corpus.hostile``; no tests here."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import stat
from pathlib import Path

import pytest


class Payload:
    """Unpickling this runs ``os.system(command)``: the classic malicious checkpoint."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def touch_command(marker: Path) -> str:
    return f"touch {marker}"


def write_evil_zip(path: Path, marker: Path) -> Path:
    """A torch.save (zip) checkpoint whose unpickling would create ``marker``."""
    import torch

    torch.save({"model": {"conv.weight": Payload(touch_command(marker))}, "meta": "{}"}, path)
    return path


def write_evil_raw(path: Path, marker: Path) -> Path:
    """A raw legacy pickle (what ``torch.save(..., _use_new_zipfile_serialization=False)`` and
    plain ``pickle.dump`` make) whose unpickling would create ``marker``."""
    with open(path, "wb") as fh:
        pickle.dump({"model": Payload(touch_command(marker)), "meta": "{}"}, fh, protocol=2)
    return path


EVIL_WRITERS = {"torch-zip": write_evil_zip, "raw-pickle": write_evil_raw}


def copy_artifact(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


def rehash(folder: Path) -> None:
    """Rewrite manifest.json's sizes and checksums so they match the files again (an attacker's
    file is consistent with its manifest: only loading it can tell it is hostile)."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    for entry in manifest["files"]:
        data = (folder / entry["path"]).read_bytes()
        entry["sha256"], entry["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
    carried = []  # reference.npz, tokenizer.json: as they are now
    for name in ("reference.npz", "tokenizer.json"):
        if (folder / name).is_file():
            data = (folder / name).read_bytes()
            carried.append({"path": name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
    manifest["extra_files"] = carried
    path.write_text(json.dumps(manifest))


def edit_manifest(folder: Path, **changes) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))


def as_language_model(folder: Path) -> None:
    """Make a checkpoint artifact claim to hold a language model (so `generate` will load it)."""
    edit_manifest(folder, task={"type": "language-modeling", "metric": "next_token_accuracy"})


def assert_one_line_error(result, code: int, message: str | None = None) -> None:
    """A CliRunner result: exit ``code``, ``Error: <one line>`` on stderr, no traceback.

    Exit 3 (a broken budget) is a verdict, not an error: said once (stdout or stderr), no ``Error:``.
    """
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    if code == 3:
        assert "Error:" not in result.stderr and "Traceback" not in result.output, result.stderr
        said = [line for line in (result.stdout + result.stderr).splitlines() if message and message in line]
        assert len(said) == 1, (result.stdout, result.stderr)
        return
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr
    assert "internal error" not in errors[0], errors[0]
    if message is not None:
        assert message in errors[0], errors[0]


def leftovers(folder: Path, name: str) -> list[str]:
    """``name`` and edgekit temporaries of it (``.name.*``) in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name == name or p.name.startswith(f".{name}."))


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder`` with its kind and content (files by SHA-256, links by target)."""
    state = {}
    for path in folder.rglob("*"):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            state[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            state[rel] = ("dir",)
        else:
            state[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return state


@pytest.fixture(scope="module", name="bundle")
def rpi4_onnx_bundle(digits_static, tmp_path_factory) -> Path:
    """An int8 ONNX bundle for rpi4 (aarch64): its requirements.txt holds numpy and onnxruntime pins."""
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    root = tmp_path_factory.mktemp("round2-bundle")
    exported, _ = export(digits_static, root / "int8", formats=("onnx",), target="rpi4")
    return build_bundle(exported, "rpi4", root / "rpi4", archive=False)


def lstat_tree(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder`` by lstat (a FIFO is never opened): kind and content/identity."""
    state = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root, name)
            info = os.lstat(path)
            rel = str(path.relative_to(folder))
            if stat.S_ISLNK(info.st_mode):
                state[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                state[rel] = ("dir",)
            elif stat.S_ISREG(info.st_mode):
                state[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), info.st_mode)
            else:
                state[rel] = ("special", stat.S_IFMT(info.st_mode), info.st_ino, info.st_rdev)
    return state


def rehash_sums(folder: Path) -> None:
    """Rewrite SHA256SUMS over the folder's regular files, as an attacker who edits a bundle does."""
    lines = []
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root, name)
            rel = path.relative_to(folder).as_posix()
            if rel != "SHA256SUMS" and stat.S_ISREG(os.lstat(path).st_mode):
                lines.append((rel.split("/"), f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {rel}\n"))
    (folder / "SHA256SUMS").write_text("".join(line for _, line in sorted(lines)))


def child_pids() -> set[int]:
    """Live descendants of this process (a zombie awaiting its wait() does not count)."""
    import psutil

    alive = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return alive
