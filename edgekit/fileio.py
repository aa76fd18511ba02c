"""Atomic writes: an interrupted run never leaves a half-written file under the final name."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from edgekit.errors import EdgekitError, InputFileError, UsageError


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temp_prefix(final: Path) -> str:
    """``.NAME.PID-``: temporaries beside ``final`` carry the pid of the process that made them."""
    return f".{final.name}.{os.getpid()}-"


def temp_sibling(final: str | os.PathLike) -> Path:
    """A fresh, unused name beside ``final`` in edgekit's temporary pattern (nothing is created)."""
    import secrets

    final = Path(final)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_"
    while True:
        token = "".join(secrets.choice(alphabet) for _ in range(8))
        path = final.with_name(f"{_temp_prefix(final)}{token}.tmp")
        if not path.exists():
            return path


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def clean_stale_temps(final: str | os.PathLike) -> list[Path]:
    """Remove what killed runs left beside ``final``: edgekit's own temporary names only.

    Those are ``.NAME.PID-XXXXXXXX.tmp`` (files from ``atomic_path``, folders from
    ``atomic_dir``) and ``.NAME.old-PID`` (a folder being replaced), whose process PID no longer
    runs, plus ``.NAME.XXXXXXXX.tmp`` from edgekit versions that did not record the pid. Anything
    else, however it is named, is left alone. Returns what was removed.
    """
    final = Path(final)
    parent = final.parent
    name = re.escape(final.name)
    with_pid = re.compile(rf"^\.{name}\.(\d+)-[a-z0-9_]{{8}}\.tmp$|^\.{name}\.old-(\d+)$")
    without_pid = re.compile(rf"^\.{name}\.[a-z0-9_]{{8}}\.tmp$")
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = with_pid.match(entry.name)
        if match:
            if _pid_alive(int(match.group(1) or match.group(2))):
                continue
        elif not without_pid.match(entry.name):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            continue
        removed.append(entry)
    return removed


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it over ``final`` only on success."""
    final = Path(final)
    parent = final.parent
    if final.is_dir():
        raise UsageError(f"output path {final} is a folder; name a file")
    created = make_dirs(parent)
    clean_stale_temps(final)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(final), suffix=".tmp", dir=parent)
    except OSError as exc:  # e.g. a folder of /proc: it exists, but nothing can be created in it
        prune_empty(created)
        raise EdgekitError(f"cannot write output file {final}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    done = False
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp creates 0600; match a normal open()
        os.replace(tmp, final)
        done = True
        _fsync_dir(parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if not done:
            prune_empty(created)


def write_bytes(final: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(final) as tmp:
        tmp.write_bytes(data)
    return Path(final)


def write_text(final: str | os.PathLike, text: str) -> Path:
    return write_bytes(final, text.encode("utf-8"))


def write_json(final: str | os.PathLike, obj) -> Path:
    return write_text(final, json.dumps(obj, indent=2, sort_keys=True) + "\n")


MAX_JSON_BYTES = 64 << 20  # manifests, bundle descriptions, bench results: far below this
MAX_JSON_DEPTH = 32


def read_json(path: str | os.PathLike, what: str = "JSON file") -> dict:
    """A JSON object from a file we did not necessarily write: size and nesting are bounded."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{what} not found: {path}")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise InputFileError(f"{what} {path} is larger than {MAX_JSON_BYTES >> 20} MiB; refusing to read it")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFileError(f"{what} {path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise InputFileError(f"{what} {path} is nested too deeply") from None
    if not isinstance(obj, dict):
        raise InputFileError(f"{what} {path} must hold a JSON object, not {type(obj).__name__}")
    if json_depth(obj) > MAX_JSON_DEPTH:
        raise InputFileError(f"{what} {path} is nested more than {MAX_JSON_DEPTH} levels deep")
    return obj


def json_depth(obj, limit: int = MAX_JSON_DEPTH + 1) -> int:
    """Nesting depth of a parsed JSON value (stops counting past ``limit``)."""
    depth, level = 0, [obj]
    while level and depth <= limit:
        depth += 1
        nxt = []
        for value in level:
            if isinstance(value, dict):
                nxt.extend(v for v in value.values() if isinstance(v, (dict, list)))
            elif isinstance(value, list):
                nxt.extend(v for v in value if isinstance(v, (dict, list)))
        level = nxt
    return depth


def ensure_writable_dir(path: str | os.PathLike) -> Path:
    path = Path(path)
    make_dirs(path)
    return path


def make_dirs(path: str | os.PathLike) -> list[Path]:
    """Create ``path`` and missing parents; the folders it created (outermost first).

    Raises EdgekitError when it cannot be created or written (exit 1, "output folder").
    """
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EdgekitError(f"cannot create output folder {path}: {exc.strerror or exc}") from None
    if not path.is_dir():
        raise EdgekitError(f"cannot create output folder {path}: a file is in the way")
    if not os.access(path, os.W_OK | os.X_OK):
        raise EdgekitError(f"output folder {path} is not writable")
    return list(reversed(missing))


def prune_empty(created: list[Path]) -> None:
    """Remove folders ``make_dirs`` created, innermost first, as long as they are empty."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            return


def swap_in_dir(new: str | os.PathLike, final: str | os.PathLike, then=None) -> None:
    """Make the folder ``new`` appear as ``final``; a previous ``final`` is replaced and removed.

    On Linux the two folders trade places in one ``renameat2(RENAME_EXCHANGE)`` call, so there
    is no moment without a complete ``final``; elsewhere the old folder is renamed aside first.
    ``then`` runs right after the swap, before the old folder is removed (a sibling file that
    must follow the folder, e.g. a bundle's archive, commits there).
    """
    new, final = Path(new), Path(final)
    then = then or (lambda: None)
    if not final.exists():
        os.replace(new, final)
        then()
        _fsync_dir(final.parent)
        return
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if old.exists():  # left by an earlier process with this pid
        shutil.rmtree(old, ignore_errors=True)
    if _exchange(new, final):
        os.replace(new, old)  # the previous folder, now under the work name: out of the way first
    else:
        os.replace(final, old)
        os.replace(new, final)
    then()
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    return False  # EINVAL/ENOSYS (filesystem or kernel without it): fall back


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike, overwrite: bool = True, then=None) -> Iterator[Path]:
    """Build a folder under a temporary name, then swap it in as ``final`` on success.

    On failure the temporary folder is removed and any previous ``final`` is untouched. What
    killed runs left beside ``final`` (see ``clean_stale_temps``) is removed first.
    """
    final = Path(final)
    if final.exists() and not final.is_dir():
        raise EdgekitError(f"output path {final} exists and is not a folder")
    if final.exists() and not overwrite:
        raise EdgekitError(f"output folder {final} already exists")
    created = make_dirs(final.parent)
    clean_stale_temps(final)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(final), suffix=".tmp", dir=final.parent))
    except OSError as exc:
        prune_empty(created)
        raise EdgekitError(f"cannot create output folder {final}: {exc.strerror or exc}") from None
    os.chmod(tmp, 0o777 & ~_current_umask())
    done = False
    try:
        yield tmp
        swap_in_dir(tmp, final, then)
        done = True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if not done:
            prune_empty(created)  # a failed run leaves no empty folders behind either


@contextlib.contextmanager
def working_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Run third-party code that writes into the current folder inside ``path`` instead
    (edgekit's commands are single-threaded while they do; the old folder comes back after)."""
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield Path(path)
    finally:
        os.chdir(previous)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()
