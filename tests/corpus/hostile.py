"""Helpers that make hostile and damaged inputs for the reliability tests (test_hostile_*.py,
test_interrupt*.py, test_determinism*.py). Imported as ``corpus.hostile``; no tests here."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path


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
