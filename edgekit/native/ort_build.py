"""``build_ort_runner``: ``edgekit-run`` with the ONNX Runtime backend (``runner/ort_backend.cpp``, ``ort_library.*``).

The same commands and protocol as the ExecuTorch build (the shared sources of ``runner/``), one
backend per program: a bundle then carries one runtime's library only. The program is compiled
against ONNX Runtime's C header (``ort_headers``) and not linked to the library: it opens
``lib/libonnxruntime.so`` beside itself at start and asks for C API 21 (the library's symbols are
versioned per release; the C API's function table is not). One build per (sources, library,
header, compiler, CPU flags), cached in the ``native`` part of edgekit's cache as a folder that
runs as it is (``edgekit-run`` and ``lib/libonnxruntime.so``), written under a temporary name and
renamed, like the ExecuTorch build.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

from edgekit._version import __version__
from edgekit.native.build import common_flags
from edgekit.native.library_build import LibraryRunner, build_key, build_with_library, entry_for
from edgekit.native.ort_headers import api_version, ort_include
from edgekit.native.ort_wheel import LIBRARY, OrtDist, onnxruntime_dist
from edgekit.native.toolchain import Toolchain, find_toolchain

BACKEND = "onnxruntime"
ENTRY_PREFIX = "ort-runner"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class OrtRunner(LibraryRunner):
    """A built ``edgekit-run`` with the ONNX Runtime backend, and what it was built from."""

    LIBRARY_NAME: ClassVar[str] = LIBRARY
    dist: OrtDist
    api_version: int


def compile_flags(toolchain: Toolchain, include: Path, cpu: str | None) -> list[str]:
    return [*common_flags(toolchain, cpu), "-I", str(include)]


def link_argv(toolchain: Toolchain, objects: list[Path], out: Path) -> list[str]:
    return [toolchain.cxx, "-s", *map(str, objects), "-o", str(out), "-lpthread", "-ldl", "-Wl,-z,relro,-z,now"]


def build_ort_runner(arch: str, cpu: str | None = None, progress: Progress | None = None) -> OrtRunner:
    """``edgekit-run`` (ONNX Runtime backend) for ``arch``, tuned for ``cpu``, built once and cached."""
    progress = progress or (lambda message: None)
    toolchain = find_toolchain(arch)  # a missing compiler is one line naming its package, before any download
    dist = onnxruntime_dist(arch, progress)
    include = ort_include(progress)
    api = api_version(include) or 0
    stat = dist.library.stat()
    key = build_key(BACKEND, [__version__, toolchain.arch, toolchain.version, cpu, dist.version, dist.source,
                              dist.wheel_sha256 or f"{dist.library} {stat.st_size} {stat.st_mtime_ns}",
                              str(include), api_version(include)])
    entry = entry_for(ENTRY_PREFIX, arch, key)
    build_with_library(entry, backend=BACKEND, prefix=ENTRY_PREFIX, key=key, toolchain=toolchain, cpu=cpu,
                       flags=compile_flags(toolchain, include, cpu),
                       link=lambda objects, out: link_argv(toolchain, objects, out), library=dist.library,
                       library_name=LIBRARY, what=f"ONNX Runtime {dist.version}", progress=progress,
                       facts={"onnxruntime_version": dist.version, "onnxruntime_source": dist.source,
                              "wheel_sha256": dist.wheel_sha256, "c_api_header": api})
    return OrtRunner(entry, arch, cpu, key, toolchain, dist, api)
