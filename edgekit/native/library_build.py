"""``edgekit-run`` built with a backend over a runtime's C library (``ort_build``: ONNX Runtime's from
its wheel; ``ncnn_build``: ncnn's built from its source): what the two builds share.

One build per (sources, library, compiler, CPU flags), cached in the ``native`` part of edgekit's
cache as a folder that runs as it is (``edgekit-run`` and ``lib/<library>``), written under a
temporary name and renamed; builds of the same architecture and core that it supersedes are removed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

from edgekit.core.cache import entry_dir
from edgekit.core.fileio import write_json
from edgekit.native.build import (BUILT, RUNNER_NAME, _built, _locked, _remove_killed_builds, compile_program,
                                  install_staged, prune_superseded, sources)
from edgekit.native.toolchain import Toolchain

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LibraryRunner:
    """A built ``edgekit-run`` over a runtime's C library (``LIBRARY_NAME``, in its ``lib/``); each
    backend's runner adds what its library was built from."""

    LIBRARY_NAME: ClassVar[str] = ""
    folder: Path
    arch: str
    cpu: str | None
    key: str
    toolchain: Toolchain

    @property
    def binary(self) -> Path:
        return self.folder / RUNNER_NAME

    @property
    def library(self) -> Path:
        return self.folder / "lib" / self.LIBRARY_NAME


def build_key(backend: str, facts: list) -> str:
    """The build's key: ``backend``'s sources and the ``facts`` (JSON-able) it is built from."""
    digest = hashlib.sha256()
    for path in sources(backend):
        digest.update(f"{path.name}\n".encode() + path.read_bytes())
    digest.update(json.dumps(facts).encode())
    return digest.hexdigest()[:16]


def entry_for(prefix: str, arch: str, key: str) -> Path:
    return entry_dir("native", f"{prefix}-{arch}-{key}")


def build_with_library(entry: Path, *, backend: str, prefix: str, key: str, toolchain: Toolchain, cpu: str | None,
                       flags: list[str], link: Callable[[list[Path], Path], list[str]], library: Path,
                       library_name: str, facts: dict, what: str, progress: Progress) -> None:
    """Compile ``backend``'s edgekit-run into ``entry`` beside ``lib/<library_name>`` (a copy of
    ``library``), unless a finished build of ``key`` is there; ``facts`` go into its build.json."""
    arch = toolchain.arch
    with _locked(entry / ".build.lock"):
        if _built(entry, key) and (entry / "lib" / library_name).is_file():
            return
        _remove_killed_builds(entry)
        progress(f"compiling {RUNNER_NAME} ({what}) for {arch}{f' ({cpu})' if cpu else ''} "
                 f"with {Path(toolchain.cxx).name}")
        with tempfile.TemporaryDirectory(prefix=".build.", dir=entry) as tmp:
            staged = Path(tmp) / RUNNER_NAME
            compile_program(toolchain, sources(backend), flags, lambda objects: link(objects, staged), staged)
            (Path(tmp) / "lib").mkdir()
            shutil.copyfile(library, Path(tmp) / "lib" / library_name)
            install_staged(Path(tmp), entry)
        write_json(entry / BUILT, {"schema": "edgekit.native-build", "backend": backend, "key": key, "arch": arch,
                                   "cpu": cpu, "compiler": toolchain.version, **facts})
        prune_superseded(entry, prefix, arch, cpu, backend)
