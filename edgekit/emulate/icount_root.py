"""Put one of this host's (x86-64) programs into a sandbox root with the libraries it loads.

The counting plugin needs Debian's dynamic qemu-aarch64 inside the bundle sandbox: it, its dynamic
loader and its libraries (resolved by ``DT_NEEDED`` from this host's library folders) are copied
there, so the sandbox still holds no host file it was not given.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from edgekit.emulate import EmulationError
from edgekit.emulate.board_root import X86_64, _find, _needed

HOST = Path("/")


def add_host_program(root: Path, program: Path, inside: str) -> None:
    """Copy ``program`` to ``root/inside`` and its libraries (and theirs) into ``root``'s x86-64 folders."""
    dest = root / inside.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(program, dest)
    os.chmod(dest, 0o755)
    loader = Path(X86_64.loader).name
    (root / X86_64.multiarch).mkdir(parents=True, exist_ok=True)
    (root / X86_64.loader).parent.mkdir(parents=True, exist_ok=True)
    todo, seen = [Path(program)], set()
    while todo:
        for name in _needed(todo.pop()):
            if name in seen:
                continue
            seen.add(name)
            found = _find(HOST, X86_64.lib_dirs, name)
            if found is None:
                raise EmulationError(f"this host lacks {name}, which {Path(program).name} needs")
            target = root / X86_64.loader if name == loader else root / X86_64.multiarch / name
            if not target.exists():
                shutil.copy2(found, target)
            todo.append(found)
    if not (root / X86_64.loader).exists():
        found = _find(HOST, X86_64.lib_dirs, loader)
        if found is None:
            raise EmulationError(f"this host lacks the dynamic loader {loader}")
        shutil.copy2(found, root / X86_64.loader)
