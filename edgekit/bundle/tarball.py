"""Tar archives of a bundle folder, reproducible (no times, owners or directory order leak in).

``write_tarball`` makes the ``.tar.gz`` beside a bundle; ``stream_tar`` writes the same files,
uncompressed, to a pipe (the copy to a board).
"""

from __future__ import annotations

import gzip
import os
import tarfile
from pathlib import Path
from typing import IO

from edgekit.bundle.layout import SCRIPTS
from edgekit.fileio import atomic_path


def write_tarball(folder: Path, final: Path, top: str, mtime: int = 0) -> Path:
    """Write ``folder``'s files to ``final`` (atomically) under the directory ``top/``."""
    with atomic_path(final) as tmp:
        write_archive(folder, tmp, top, mtime)
    return final


def write_archive(folder: Path, path: Path, top: str, mtime: int = 0) -> None:
    """Write ``folder``'s files into the new file ``path`` as a .tar.gz under ``top/``."""
    with open(path, "xb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            add_folder(tar, folder, top, mtime)
        raw.flush()
        os.fsync(raw.fileno())


def is_bundle_archive(path: Path, top: str, look: int = 16) -> bool:
    """Whether ``path`` is a .tar.gz that ``write_tarball`` made of a bundle named ``top``.

    Only the first members are read (a bundle's ``bundle.json`` sorts among them), so a large
    archive costs no more than a small one.
    """
    try:
        with tarfile.open(path, mode="r|gz") as tar:
            for index, member in enumerate(tar):
                if index == 0 and not (member.isdir() and member.name == top):
                    return False
                if member.name == f"{top}/bundle.json":
                    return True
                if index >= look:
                    return False
    except (OSError, tarfile.TarError, EOFError, ValueError):
        return False
    return False


def stream_tar(folder: Path, out: IO[bytes], mtime: int = 0) -> None:
    """Write ``folder``'s files as an uncompressed tar stream (names relative to the folder)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        add_folder(tar, folder, "", mtime)


def add_folder(tar: tarfile.TarFile, folder: Path, top: str, mtime: int) -> None:
    """Add every file under ``folder`` (sorted; scripts 0755, others 0644) below ``top``."""
    prefix = f"{top}/" if top else ""
    if top:
        tar.addfile(_info(top, tarfile.DIRTYPE, 0o755, mtime))
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            continue  # a bundle holds plain files (SHA256SUMS would not list a link either)
        if path.is_dir():
            tar.addfile(_info(prefix + rel, tarfile.DIRTYPE, 0o755, mtime))
            continue
        info = _info(prefix + rel, tarfile.REGTYPE, 0o755 if rel in SCRIPTS else 0o644, mtime)
        info.size = path.stat().st_size
        with open(path, "rb") as fh:
            tar.addfile(info, fh)


def _info(name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
