"""A Python-free aarch64 userland for a native bundle: a shell, the few tools ``run.sh`` uses and the
C and C++ runtime libraries, copied out of an arm64 Debian root, and nothing else.

A native bundle claims a board needs no Python. Running its ``run.sh`` inside this root under
QEMU proves it: there is no python3 to fall back on.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from edgekit.emulate import EmulationError
from edgekit.emulate.elf import needed

TOOLS = ("sh", "dirname", "sha256sum", "cat", "tr")  # what run.sh calls (cd, pwd, echo, printf, exec: the shell's own)
LIB_DIRS = ("lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib", "usr/lib")
BIN_DIRS = ("usr/bin", "bin")
LOADER = "ld-linux-aarch64.so.1"
MULTIARCH_LIB = "lib/aarch64-linux-gnu"


@dataclass(frozen=True)
class Userland:
    """Where an architecture's libraries lie in a root, and its dynamic loader."""

    multiarch: str  # the folder libraries are copied into
    loader: str  # the loader's path inside the root
    lib_dirs: tuple[str, ...]


AARCH64 = Userland(MULTIARCH_LIB, f"lib/{LOADER}", LIB_DIRS)
X86_64 = Userland("lib/x86_64-linux-gnu", "lib64/ld-linux-x86-64.so.2",
                  ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "lib", "usr/lib"))
USERLANDS = {"aarch64": AARCH64, "x86_64": X86_64}


def make_board_root(source: Path, dest: Path, programs: list[Path], own_libs: Path | None = None,
                    tools: tuple[str, ...] = TOOLS, userland: Userland = AARCH64) -> Path:
    """``dest`` holding /bin/sh, ``tools`` and the libraries they and ``programs`` need (found in
    ``source``, a root of ``userland``'s architecture); libraries in ``own_libs`` (a bundle's lib/)
    travel with the bundle."""
    bundled = {p.name for p in own_libs.iterdir()} if own_libs is not None and own_libs.is_dir() else set()
    loader = Path(userland.loader).name
    (dest / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    (dest / userland.multiarch).mkdir(parents=True, exist_ok=True)
    (dest / userland.loader).parent.mkdir(parents=True, exist_ok=True)
    for folder in ("proc", "tmp", "dev", "sys"):
        (dest / folder).mkdir(exist_ok=True)
    os.symlink("usr/bin", dest / "bin")
    todo = []
    for tool in tools:
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
            found = _find(source, userland.lib_dirs, name)
            if found is None:
                raise EmulationError(f"the root {source} lacks {name}, which the bundle's programs need")
            target = dest / userland.loader if name == loader else dest / userland.multiarch / name
            shutil.copy2(found, target)
            todo.append(found)
    if not (dest / userland.loader).exists():
        found = _find(source, userland.lib_dirs, loader)
        if found is None:
            raise EmulationError(f"the root {source} lacks the dynamic loader {loader}")
        shutil.copy2(found, dest / userland.loader)
    return dest


def _needed(path: Path) -> list[str]:
    try:
        names = needed(path)
    except ValueError:
        return []  # a script or data file: nothing to load
    for name in names:  # a bundle's program names its libraries: a path would copy any file into the root
        if not name or "/" in name or name.startswith(".") or "\x00" in name:
            raise EmulationError(f"{path.name} names the library {name[:80]!r}, which is not a plain library name")
    return names


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
