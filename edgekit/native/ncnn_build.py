"""``build_ncnn_runner``: ``edgekit-run`` with the ncnn backend (``runner/ncnn_backend.cpp``).

The same commands and protocol as the other builds (the shared sources of ``runner/``), one
backend per program. The program is compiled against ncnn's C API (``c_api.h``) and linked to
``libncnn.so`` built from the installed ncnn's source (``ncnn_source``; no versioned SONAME), found
at run time in ``lib/`` beside the program (RUNPATH ``$ORIGIN/lib``). One build per (sources,
library, compiler, CPU flags), cached in the ``native`` part of edgekit's cache as a folder that runs
as it is (``edgekit-run`` and ``lib/libncnn.so``), written under a temporary name and renamed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

from edgekit._version import __version__
from edgekit.native.build import common_flags
from edgekit.native.library_build import LibraryRunner, build_key, build_with_library, entry_for
from edgekit.native.ncnn_source import LIBRARY, NcnnLibrary, ncnn_library
from edgekit.native.toolchain import Toolchain, find_toolchain

BACKEND = "ncnn"
ENTRY_PREFIX = "ncnn-runner"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class NcnnRunner(LibraryRunner):
    """A built ``edgekit-run`` with the ncnn backend, and what it was built from."""

    LIBRARY_NAME: ClassVar[str] = LIBRARY
    dist: NcnnLibrary


def compile_flags(toolchain: Toolchain, dist: NcnnLibrary, cpu: str | None) -> list[str]:
    return [*common_flags(toolchain, cpu), f'-DEDGEKIT_NCNN_VERSION="{dist.version}"', "-I", str(dist.include)]


def link_argv(toolchain: Toolchain, dist: NcnnLibrary, objects: list[Path], out: Path) -> list[str]:
    return [toolchain.cxx, "-s", *map(str, objects), "-o", str(out), "-L", str(dist.library.parent), "-lncnn",
            "-lpthread", "-ldl", "-Wl,-z,relro,-z,now", "-Wl,-rpath,$ORIGIN/lib"]


def build_ncnn_runner(arch: str, cpu: str | None = None, progress: Progress | None = None) -> NcnnRunner:
    """``edgekit-run`` (ncnn backend) for ``arch``, tuned for ``cpu``, built once and cached."""
    progress = progress or (lambda message: None)
    toolchain = find_toolchain(arch)
    dist = ncnn_library(arch, progress)
    stat = dist.library.stat()
    key = build_key(BACKEND, [__version__, toolchain.arch, toolchain.version, cpu, dist.version, dist.sdist_sha256,
                              f"{stat.st_size} {stat.st_mtime_ns}"])
    entry = entry_for(ENTRY_PREFIX, arch, key)
    build_with_library(entry, backend=BACKEND, prefix=ENTRY_PREFIX, key=key, toolchain=toolchain, cpu=cpu,
                       flags=compile_flags(toolchain, dist, cpu),
                       link=lambda objects, out: link_argv(toolchain, dist, objects, out), library=dist.library,
                       library_name=LIBRARY, what=f"ncnn {dist.version}", progress=progress,
                       facts={"ncnn_version": dist.version, "sdist_sha256": dist.sdist_sha256})
    return NcnnRunner(entry, arch, cpu, key, toolchain, dist)
