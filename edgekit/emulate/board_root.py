"""A Python-free aarch64 userland for a native bundle: a shell, the few tools ``run.sh`` uses and the
C and C++ runtime libraries, copied out of an arm64 Debian root, and nothing else.

A native bundle claims a board needs no Python. Running its ``run.sh`` inside this root under
QEMU proves it: there is no python3 to fall back on.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from edgekit.emulate import EmulationError
from edgekit.emulate.elf import needed

TOOLS = ("sh", "dirname", "sha256sum", "cat")  # what run.sh calls (cd, pwd, echo, exec: the shell's own)
LIB_DIRS = ("lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib", "usr/lib")
BIN_DIRS = ("usr/bin", "bin")
LOADER = "ld-linux-aarch64.so.1"
MULTIARCH_LIB = "lib/aarch64-linux-gnu"


def make_board_root(source: Path, dest: Path, programs: list[Path], own_libs: Path | None = None) -> Path:
    """``dest`` holding /bin/sh, ``TOOLS`` and the libraries they and ``programs`` need (found in
    ``source``, an arm64 root); libraries in ``own_libs`` (a bundle's lib/) travel with the bundle."""
    bundled = {p.name for p in own_libs.iterdir()} if own_libs is not None and own_libs.is_dir() else set()
    (dest / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    (dest / MULTIARCH_LIB).mkdir(parents=True, exist_ok=True)
    for folder in ("proc", "tmp", "dev", "sys"):
        (dest / folder).mkdir(exist_ok=True)
    os.symlink("usr/bin", dest / "bin")
    todo = []
    for tool in TOOLS:
        found = _find(source, BIN_DIRS, tool)
        if found is None:
            raise EmulationError(f"{source} has no {tool}; rebuild the emulated rootfs (verify --emulate --rebuild)")
        shutil.copy2(found, dest / "usr" / "bin" / tool)
        todo.append(found)
    todo += [p for p in programs if p.is_file()]
    if own_libs is not None and own_libs.is_dir():
        todo += sorted(own_libs.iterdir())
    seen: set[str] = set()
    while todo:
        for name in _needed(todo.pop()):
            if name in seen or name in bundled:
                continue
            seen.add(name)
            found = _find(source, LIB_DIRS, name)
            if found is None:
                raise EmulationError(f"the arm64 root {source} lacks {name}, which the bundle's programs need")
            target = dest / ("lib" if name == LOADER else MULTIARCH_LIB) / name
            shutil.copy2(found, target)
            todo.append(found)
    if not (dest / "lib" / LOADER).exists():
        found = _find(source, LIB_DIRS, LOADER)
        if found is None:
            raise EmulationError(f"the arm64 root {source} lacks the dynamic loader {LOADER}")
        shutil.copy2(found, dest / "lib" / LOADER)
    return dest


def _needed(path: Path) -> list[str]:
    try:
        return needed(path)
    except ValueError:
        return []  # a script or data file: nothing to load


def _find(root: Path, folders: tuple[str, ...], name: str) -> Path | None:
    """``name`` in ``root``'s ``folders``, its links resolved inside ``root`` (never to the host's files)."""
    for folder in folders:
        path = root / folder / name
        for _ in range(40):
            if not path.is_symlink():
                break
            link = os.readlink(path)
            path = (root / link.lstrip("/")) if link.startswith("/") else path.parent / link
        if path.is_file() and Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root)):
            return path
    return None
