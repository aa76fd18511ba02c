"""The emulation cache's venvs: what a rootfs holds, which are in use, and the bound on them.

Each bundle's requirements get a venv in the rootfs (``/opt/edgekit/venvs/<hash>/``, see
``venv.py``), and every new pin or wheel set makes another: a few runs of the TorchScript and ONNX
bundles grew one cache to 9.9 GB. So the venvs are bounded: after each run gets its venv, the
least recently used ones beyond ``EDGEKIT_EMULATE_MAX_VENVS`` (default 6) or beyond
``EDGEKIT_EMULATE_MAX_VENVS_GB`` in all (default 3) are removed, and the run says which. A venv
another run is building (its ``.<hash>.lock``) or using (``.<hash>.use``, held shared for as long as
a process uses it) is never removed; nor is the one this run uses.

Stdlib and ``edgekit.core.fileio`` only: ``edgekit.core.cache`` lists these venvs (``edgekit cache``)
without importing the rest of the emulation package.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from edgekit.core.errors import UsageError
from edgekit.core.fileio import tree_size, write_json

VENVS_DIR = "/opt/edgekit/venvs"
MARKER = "edgekit-venv.json"
MAX_VENVS_ENV = "EDGEKIT_EMULATE_MAX_VENVS"
MAX_GB_ENV = "EDGEKIT_EMULATE_MAX_VENVS_GB"
DEFAULT_MAX_VENVS = 6
DEFAULT_MAX_GB = 3.0
_KEY = re.compile(r"[0-9a-f]{16}")
_MAX_MARKER_BYTES = 1 << 20

_held: dict[str, object] = {}  # use-lock path -> its open file, held (shared) until release_all()


@dataclass(frozen=True)
class VenvEntry:
    key: str
    path: Path  # on this host
    bytes: int
    complete: bool  # its marker is written (an interrupted install has none)
    used: str = ""  # ISO time of its last use ("" when unknown)
    created: str = ""
    source: str = ""  # "wheels" | "index"
    packages: dict = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """``numpy 2.4.6, onnxruntime 1.32.0, +17 more`` (the main packages first)."""
        main = [f"{name} {self.packages[name]}" for name in ("numpy", "onnxruntime", "torch", "executorch", "fastapi")
                if name in self.packages]
        rest = len(self.packages) - len(main)
        return ", ".join(main + ([f"+{rest} more"] if rest > 0 else [])) or ("an interrupted install" if not self.complete
                                                                             else "no packages")


def venvs_dir(rootfs: Path) -> Path:
    return Path(rootfs) / VENVS_DIR.lstrip("/")


def list_venvs(rootfs: Path) -> list[VenvEntry]:
    """The venvs in ``rootfs``, most recently used first (the interrupted ones last)."""
    folder = venvs_dir(rootfs)
    found = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    for entry in entries:
        if not _KEY.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        marker = read_marker(path / MARKER)
        size = marker.get("bytes") if isinstance(marker.get("bytes"), int) else tree_bytes(path)
        found.append(VenvEntry(
            entry.name, path, int(size), bool(marker), used=str(marker.get("used") or marker.get("created") or ""),
            created=str(marker.get("created") or ""), source=str(marker.get("source") or ""),
            packages=marker.get("packages") if isinstance(marker.get("packages"), dict) else {},
        ))
    return sorted(found, key=lambda v: (v.complete, v.used), reverse=True)


def read_marker(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_MARKER_BYTES + 1)
        doc = json.loads(data) if len(data) <= _MAX_MARKER_BYTES else None
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def mark_used(venv_dir: Path) -> None:
    """Record that a run uses this venv now (its place in the least-recently-used order)."""
    marker = read_marker(venv_dir / MARKER)
    if marker:
        size = marker["bytes"] if isinstance(marker.get("bytes"), int) else tree_bytes(venv_dir)  # older markers: once
        write_json(venv_dir / MARKER, {**marker, "used": now(), "bytes": size})


def hold(rootfs: Path, key: str) -> None:
    """Hold venv ``key`` in use (a shared lock) until ``release_all``: no run evicts it meanwhile."""
    path = venvs_dir(rootfs) / f".{key}.use"
    if str(path) in _held:
        return
    fh = open(path, "a+")
    fcntl.flock(fh, fcntl.LOCK_SH)
    _held[str(path)] = fh


def release_all() -> None:
    """Let go of every venv this process held (``hold``)."""
    while _held:
        _, fh = _held.popitem()
        with contextlib.suppress(OSError):
            fh.close()


def limits() -> tuple[int, int]:
    """(most venvs, most bytes in all) from the environment, else the defaults; a bad value is a UsageError."""
    count_text = os.environ.get(MAX_VENVS_ENV, "").strip()
    gb_text = os.environ.get(MAX_GB_ENV, "").strip()
    try:
        count = int(count_text) if count_text else DEFAULT_MAX_VENVS
        gb = float(gb_text) if gb_text else DEFAULT_MAX_GB
    except ValueError:
        raise UsageError(f"{MAX_VENVS_ENV} must be a whole number (1-1000) and {MAX_GB_ENV} a number of GB "
                         f"(0.1-10000), got {count_text!r} / {gb_text!r}") from None
    if not 1 <= count <= 1000 or not 0.1 <= gb <= 10000:
        raise UsageError(f"{MAX_VENVS_ENV} must be within 1-1000 and {MAX_GB_ENV} within 0.1-10000, got {count} / {gb:g}")
    return count, int(gb * (1 << 30))


def evict(rootfs: Path, keep: str, progress: Callable[[str], None] = lambda line: None) -> list[VenvEntry]:
    """Remove the least recently used venvs of ``rootfs`` until at most ``limits()`` remain
    (never ``keep``, nor one another run builds or uses); returns what was removed."""
    max_count, max_bytes = limits()
    venvs = list_venvs(rootfs)
    removed = []
    kept_count = len(venvs)
    kept_bytes = sum(v.bytes for v in venvs)
    for victim in reversed(venvs):  # the interrupted ones first, then the least recently used
        over = kept_count > max_count or kept_bytes > max_bytes
        if not over and victim.complete:
            break
        if victim.key == keep or not _remove_if_free(rootfs, victim):
            continue
        removed.append(victim)
        kept_count -= 1
        kept_bytes -= victim.bytes
        progress(f"emulation cache: removed the venv {victim.key} ({_size(victim.bytes)}: {victim.summary}; last used "
                 f"{victim.used or 'unknown'}) to keep at most {max_count} venvs and {_size(max_bytes)} "
                 f"({MAX_VENVS_ENV}, {MAX_GB_ENV} change that)" if victim.complete else
                 f"emulation cache: removed the interrupted venv {victim.key} ({_size(victim.bytes)})")
    return removed


def _remove_if_free(rootfs: Path, victim: VenvEntry) -> bool:
    """Remove ``victim`` when no run holds its build or use lock (both taken here while it goes)."""
    folder = venvs_dir(rootfs)
    handles = []
    try:
        for name in (f".{victim.key}.lock", f".{victim.key}.use"):
            fh = open(folder / name, "a+")
            handles.append(fh)
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        if victim.path.is_symlink() or not victim.path.is_dir():
            return False
        shutil.rmtree(victim.path)
        return True
    except OSError:
        return False
    finally:
        for fh in handles:
            fh.close()


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (links not followed)."""
    return tree_size(path)[0]


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MB"
