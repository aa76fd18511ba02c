"""``build_ncnn_runner``: ``edgekit-run`` with the ncnn backend (``runner/ncnn_backend.cpp``).

The same commands and protocol as the other builds (the shared sources of ``runner/``), one
backend per program. The program is compiled against ncnn's C API (``c_api.h``) and linked to
``libncnn.so`` built from the installed ncnn's source (``ncnn_source``; no versioned SONAME), found
at run time in ``lib/`` beside the program (RUNPATH ``$ORIGIN/lib``). One build per (sources,
library, compiler, CPU flags), cached in the ``native`` part of edgekit's cache as a folder that runs
as it is (``edgekit-run`` and ``lib/libncnn.so``), written under a temporary name and renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgekit._version import __version__
from edgekit.core.cache import entry_dir
from edgekit.native.build import BUILT, RUNNER_NAME, _built, _locked, _remove_killed_builds, compile_program, sources
from edgekit.native.ncnn_source import LIBRARY, NcnnLibrary, ncnn_library
from edgekit.native.toolchain import Toolchain, find_toolchain

BACKEND = "ncnn"
ENTRY_PREFIX = "ncnn-runner"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class NcnnRunner:
    """A built ``edgekit-run`` with the ncnn backend, and what it was built from."""

    folder: Path
    arch: str
    cpu: str | None
    key: str
    toolchain: Toolchain
    dist: NcnnLibrary

    @property
    def binary(self) -> Path:
        return self.folder / RUNNER_NAME

    @property
    def library(self) -> Path:
        return self.folder / "lib" / LIBRARY


def compile_flags(toolchain: Toolchain, dist: NcnnLibrary, cpu: str | None) -> list[str]:
    return ["-std=c++17", "-O2", *toolchain.cpu_flags(cpu), "-fstack-protector-strong", "-D_FORTIFY_SOURCE=2",
            f'-DEDGEKIT_RUN_VERSION="{__version__}"', f'-DEDGEKIT_NCNN_VERSION="{dist.version}"',
            "-I", str(dist.include)]


def link_argv(toolchain: Toolchain, dist: NcnnLibrary, objects: list[Path], out: Path) -> list[str]:
    return [toolchain.cxx, "-s", *map(str, objects), "-o", str(out), "-L", str(dist.library.parent), "-lncnn",
            "-lpthread", "-ldl", "-Wl,-z,relro,-z,now", "-Wl,-rpath,$ORIGIN/lib"]


def build_ncnn_runner(arch: str, cpu: str | None = None, progress: Progress | None = None) -> NcnnRunner:
    """``edgekit-run`` (ncnn backend) for ``arch``, tuned for ``cpu``, built once and cached."""
    progress = progress or (lambda message: None)
    toolchain = find_toolchain(arch)
    dist = ncnn_library(arch, progress)
    key = _key(toolchain, dist, cpu)

    entry = entry_dir("native", f"{ENTRY_PREFIX}-{arch}-{key}")
    runner = NcnnRunner(entry, arch, cpu, key, toolchain, dist)
    with _locked(entry / ".build.lock"):
        if _built(entry, key) and runner.library.is_file():
            return runner
        _remove_killed_builds(entry)
        progress(f"compiling {RUNNER_NAME} (ncnn {dist.version}) for {arch}{f' ({cpu})' if cpu else ''} "
                 f"with {Path(toolchain.cxx).name}")
        with tempfile.TemporaryDirectory(prefix=".build.", dir=entry) as tmp:
            staged = Path(tmp) / RUNNER_NAME
            compile_program(toolchain, sources(BACKEND), compile_flags(toolchain, dist, cpu),
                            lambda objects: link_argv(toolchain, dist, objects, staged), staged)
            (Path(tmp) / "lib").mkdir()
            shutil.copyfile(dist.library, Path(tmp) / "lib" / LIBRARY)
            for name in (RUNNER_NAME, "lib"):
                final = entry / name
                if final.is_dir() and not final.is_symlink():
                    shutil.rmtree(final)
                elif final.exists() or final.is_symlink():
                    final.unlink()
                os.replace(Path(tmp) / name, final)
        from edgekit.core.fileio import write_json

        write_json(entry / BUILT, {"schema": "edgekit.native-build", "backend": BACKEND, "key": key, "arch": arch,
                                   "cpu": cpu, "compiler": toolchain.version, "ncnn_version": dist.version,
                                   "sdist_sha256": dist.sdist_sha256})
        _prune_older(entry, arch, cpu)
    return runner


def _key(toolchain: Toolchain, dist: NcnnLibrary, cpu: str | None) -> str:
    digest = hashlib.sha256()
    for path in sources(BACKEND):
        digest.update(f"{path.name}\n".encode() + path.read_bytes())
    stat = dist.library.stat()
    digest.update(json.dumps([__version__, toolchain.arch, toolchain.version, cpu, dist.version, dist.sdist_sha256,
                              f"{stat.st_size} {stat.st_mtime_ns}"]).encode())
    return digest.hexdigest()[:16]


def _prune_older(current: Path, arch: str, cpu: str | None) -> None:
    """Builds of the same architecture and core from other sources or libraries: superseded."""
    for other in current.parent.glob(f"{ENTRY_PREFIX}-{arch}-*"):
        if other == current or other.is_symlink() or not other.is_dir():
            continue
        try:
            doc = json.loads((other / BUILT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not a finished build of ours (or one in progress): left alone
        if isinstance(doc, dict) and doc.get("backend") == BACKEND and doc.get("arch") == arch and doc.get("cpu") == cpu:
            shutil.rmtree(other, ignore_errors=True)
