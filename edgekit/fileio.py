"""Atomic writes: an interrupted run never leaves a half-written file under the final name."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from edgekit.errors import EdgekitError, InputFileError


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it over ``final`` only on success."""
    final = Path(final)
    parent = final.parent
    ensure_writable_dir(parent)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp creates 0600; match a normal open()
        os.replace(tmp, final)
        _fsync_dir(parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_bytes(final: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(final) as tmp:
        tmp.write_bytes(data)
    return Path(final)


def write_text(final: str | os.PathLike, text: str) -> Path:
    return write_bytes(final, text.encode("utf-8"))


def write_json(final: str | os.PathLike, obj) -> Path:
    return write_text(final, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: str | os.PathLike, what: str = "JSON file") -> dict:
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{what} not found: {path}")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFileError(f"{what} {path} is not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise InputFileError(f"{what} {path} must hold a JSON object, not {type(obj).__name__}")
    return obj


def ensure_writable_dir(path: str | os.PathLike) -> Path:
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EdgekitError(f"cannot create output folder {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise EdgekitError(f"output folder {path} is not writable")
    return path


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Build a folder under a temporary name, then swap it in as ``final`` on success.

    On failure the temporary folder is removed and any previous ``final`` is untouched.
    """
    final = Path(final)
    ensure_writable_dir(final.parent)
    if final.exists() and not final.is_dir():
        raise EdgekitError(f"output path {final} exists and is not a folder")
    if final.exists() and not overwrite:
        raise EdgekitError(f"output folder {final} already exists")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    os.chmod(tmp, 0o777 & ~_current_umask())
    try:
        yield tmp
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()
