"""Tar archives of a bundle folder, reproducible (no times, owners or directory order leak in).

``write_archive`` makes the ``.tar.gz`` beside a bundle; ``is_bundle_archive`` tells whether an
existing one is a bundle's own (so it may be replaced).
"""

from __future__ import annotations

import gzip
import json
import os
import tarfile
from pathlib import Path
from edgekit.core.ownership import MAX_PROOF_BYTES, parse_sums


def write_archive(folder: Path, path: Path, top: str, mtime: int = 0) -> None:
    """Write ``folder``'s files into the new file ``path`` as a .tar.gz under ``top/``."""
    with open(path, "xb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            add_folder(tar, folder, top, mtime)
        raw.flush()
        os.fsync(raw.fileno())


MAX_ARCHIVE_MEMBERS = 100_000  # far more than any bundle holds (wheels included)


def is_bundle_archive(path: Path, top: str) -> bool:
    """Whether ``path`` is a .tar.gz that ``write_archive`` made of a bundle named ``top``: every
    member must be the bundle's own, so replacing it loses nothing.

    That is: the folder ``top/`` first, then only folders and regular files below it (no links,
    devices or repeats), ``top/bundle.json`` an edgekit bundle description, and every file
    listed in the archived ``top/SHA256SUMS`` (or that list itself), every folder on the way to
    a listed file. The whole archive is read once, as a stream; only names are kept.
    """
    files: set[str] = set()
    folders: set[str] = set()
    sums: list[str] | None = None
    description = None
    try:
        with tarfile.open(path, mode="r|gz") as tar:
            for index, member in enumerate(tar):
                name = member.name
                if index == 0:
                    if not (member.isdir() and name == top):
                        return False
                    continue
                rel = name[len(top) + 1:] if name.startswith(f"{top}/") else ""
                parts = rel.split("/")
                if (index >= MAX_ARCHIVE_MEMBERS or not rel or any(p in ("", ".", "..") for p in parts)
                        or rel in files or rel in folders):
                    return False
                if member.isdir():
                    folders.add(rel)
                    continue
                if not member.isreg():
                    return False  # a link, device or FIFO: never one of the bundle's files
                files.add(rel)
                if rel in ("SHA256SUMS", "bundle.json"):
                    if member.size > MAX_PROOF_BYTES:
                        return False
                    data = tar.extractfile(member).read(MAX_PROOF_BYTES + 1)
                    if rel == "SHA256SUMS":
                        sums = parse_sums(data.decode("utf-8"))
                    else:
                        description = json.loads(data.decode("utf-8"))
    except (OSError, tarfile.TarError, EOFError, ValueError, RecursionError):  # UnicodeDecodeError too
        return False
    if sums is None or not isinstance(description, dict) or description.get("schema") != "edgekit.bundle":
        return False
    listed = set(sums)
    on_the_way = {"/".join(p.split("/")[:i]) for p in listed for i in range(1, p.count("/") + 1)}
    return files <= listed | {"SHA256SUMS"} and folders <= on_the_way


def add_folder(tar: tarfile.TarFile, folder: Path, top: str, mtime: int) -> None:
    """Add every file under ``folder`` (sorted; executable ones, the scripts, 0755, others 0644) below ``top``."""
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
        state = path.stat()
        info = _info(prefix + rel, tarfile.REGTYPE, 0o755 if state.st_mode & 0o100 else 0o644, mtime)
        info.size = state.st_size
        with open(path, "rb") as fh:
            tar.addfile(info, fh)


def _info(name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
