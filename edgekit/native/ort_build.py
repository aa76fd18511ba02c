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
from typing import Callable

from edgekit._version import __version__
from edgekit.native.build import RUNNER_NAME
from edgekit.native.library_build import build_key, build_with_library, entry_for
from edgekit.native.ort_headers import api_version, ort_include
from edgekit.native.ort_wheel import LIBRARY, OrtDist, onnxruntime_dist
from edgekit.native.toolchain import Toolchain, find_toolchain

BACKEND = "onnxruntime"
ENTRY_PREFIX = "ort-runner"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class OrtRunner:
    """A built ``edgekit-run`` with the ONNX Runtime backend, and what it was built from."""

    folder: Path
    arch: str
    cpu: str | None
    key: str
    toolchain: Toolchain
    dist: OrtDist
    api_version: int

    @property
    def binary(self) -> Path:
        return self.folder / RUNNER_NAME

    @property
    def library(self) -> Path:
        return self.folder / "lib" / LIBRARY


def compile_flags(toolchain: Toolchain, include: Path, cpu: str | None) -> list[str]:
    return ["-std=c++17", "-O2", *toolchain.cpu_flags(cpu), "-fstack-protector-strong", "-D_FORTIFY_SOURCE=2",
            f'-DEDGEKIT_RUN_VERSION="{__version__}"', "-I", str(include)]


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
