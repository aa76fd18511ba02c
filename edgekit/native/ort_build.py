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

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgekit._version import __version__
from edgekit.native.build import BUILT, RUNNER_NAME, _built, _locked, _remove_killed_builds, compile_program, sources
from edgekit.native.ort_headers import api_version, ort_include
from edgekit.native.ort_wheel import LIBRARY, OrtDist, onnxruntime_dist
from edgekit.native.toolchain import Toolchain, find_toolchain
from edgekit.core.cache import entry_dir

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
    key = _key(toolchain, dist, include, cpu)

    entry = entry_dir("native", f"{ENTRY_PREFIX}-{arch}-{key}")
    runner = OrtRunner(entry, arch, cpu, key, toolchain, dist, api)
    with _locked(entry / ".build.lock"):
        if _built(entry, key) and runner.library.is_file():
            return runner
        _remove_killed_builds(entry)
        progress(f"compiling {RUNNER_NAME} (ONNX Runtime {dist.version}) for {arch}{f' ({cpu})' if cpu else ''} "
                 f"with {Path(toolchain.cxx).name}")
        with tempfile.TemporaryDirectory(prefix=".build.", dir=entry) as tmp:
            staged = Path(tmp) / RUNNER_NAME
            compile_program(toolchain, sources(BACKEND), compile_flags(toolchain, include, cpu),
                            lambda objects: link_argv(toolchain, objects, staged), staged)
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
                                   "cpu": cpu, "compiler": toolchain.version, "onnxruntime_version": dist.version,
                                   "onnxruntime_source": dist.source, "wheel_sha256": dist.wheel_sha256,
                                   "c_api_header": api})
        _prune_older(entry, arch, cpu)
    return runner


def _key(toolchain: Toolchain, dist: OrtDist, include: Path, cpu: str | None) -> str:
    digest = hashlib.sha256()
    for path in sources(BACKEND):
        digest.update(f"{path.name}\n".encode() + path.read_bytes())
    stat = dist.library.stat()
    digest.update(json.dumps([__version__, toolchain.arch, toolchain.version, cpu, dist.version, dist.source,
                              dist.wheel_sha256 or f"{dist.library} {stat.st_size} {stat.st_mtime_ns}",
                              str(include), api_version(include)]).encode())
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
