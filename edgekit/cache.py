"""edgekit's cache folder: where it is, what each part holds and weighs, and clearing those parts.

The root is ``$EDGEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgekit``, else ``~/.cache/edgekit``.
Only the sub-folders edgekit itself writes (``PARTS``) are ever removed; anything else found there
is listed as foreign and left alone, so pointing ``EDGEKIT_CACHE_DIR`` at a shared folder by
mistake cannot delete someone else's files.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from edgekit.errors import EdgekitError, UsageError

PARTS = {
    "calibration": "activation ranges from static calibration, reused when model, data and settings match",
    "text": "tokenized text corpora for the language models",
    "rootfs": "arm64 Debian userlands for `edgekit verify --emulate` (built with debootstrap)",
}


def cache_root() -> Path:
    """``$EDGEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgekit``, else ``~/.cache/edgekit``."""
    if env := os.environ.get("EDGEKIT_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "edgekit"


@dataclass(frozen=True)
class CachePart:
    name: str
    path: str
    exists: bool
    bytes: int
    files: int
    description: str
    ours: bool  # an edgekit part (clearable) or a foreign entry (never touched)

    def to_dict(self) -> dict:
        return asdict(self)


def usage(root: Path | None = None) -> list[CachePart]:
    """Every edgekit part (present or not), then whatever else lies in the cache root."""
    root = cache_root() if root is None else Path(root)
    parts = []
    for name, description in PARTS.items():
        path = root / name
        size, files = _size(path)
        parts.append(CachePart(name, str(path), path.exists(), size, files, description, True))
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            if entry.name not in PARTS:
                size, files = _size(entry)
                parts.append(CachePart(entry.name, str(entry), True, size, files, "not edgekit's: left alone", False))
    return parts


def clear(names: list[str] | None = None, root: Path | None = None) -> list[CachePart]:
    """Remove the named edgekit parts (all of them by default); returns what was removed (sizes before)."""
    root = cache_root() if root is None else Path(root)
    names = list(names) if names else list(PARTS)
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise UsageError(f"unknown cache part {unknown[0]!r}; choose from: {', '.join(PARTS)}")
    removed = []
    for part in usage(root):
        if part.name not in names or not part.ours or not part.exists:
            continue
        path = Path(part.path)
        if path.is_symlink() or not path.is_dir():
            path.unlink()  # a link is removed, never what it points to
        else:
            _refuse_mounted(path)
            try:
                shutil.rmtree(path)
            except OSError as exc:
                raise EdgekitError(f"could not remove {path}: {exc.strerror or exc} (files owned by root? "
                                   "the emulated rootfs is built as root)") from None
        removed.append(part)
    return removed


def _size(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``, never following links; unreadable folders count as empty."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size, 1
    total = files = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
                    files += 1
            except OSError:
                continue
    return total, files


def _refuse_mounted(path: Path) -> None:
    """A rootfs with /proc or a bind mount still mounted in it (a run in progress) is not removed."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    prefix = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) > 1:
            point = fields[1].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                raise EdgekitError(f"{point} is mounted (an emulated run in progress?); not clearing {path}")
