"""``build_runner``: compile ``edgekit-run`` for an architecture against ExecuTorch's own libraries.

One build per (sources, ExecuTorch build, compiler, CPU flags), kept in the ``native`` part of
edgekit's cache as a folder that runs as it is: ``edgekit-run`` plus ``lib/`` with the libraries
it may load (RUNPATH ``$ORIGIN/lib``, so a copy of the folder runs from anywhere). The compiler
is started with an argument list; the build is written under a temporary name and renamed. The
compiler's own temporary files go there too (TMPDIR), so a killed build leaves nothing in /tmp,
and the next build of the entry removes what a killed one left in it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgekit._version import __version__
from edgekit.core.errors import EdgekitError
from edgekit.native.toolchain import Toolchain, find_toolchain
from edgekit.native.wheel import ExecutorchDist, executorch_dist
from edgekit.core.cache import entry_dir

RUNNER_NAME = "edgekit-run"
SOURCES = Path(__file__).resolve().parent / "runner"
# Linked (XNNPACK registers itself from a static initializer: kept with --no-as-needed) ...
LINKED = ("libexecutorch.so", "libexecutorch_threadpool.so", "libexecutorch_backend_xnnpack.so")
# ... and loaded at start when they sit in lib/ (a program with operators outside the delegate needs them).
KERNELS = ("libexecutorch_kernels_optimized.so", "libexecutorch_kernels_quantized.so")
# The files of each runtime's backend (backend.h); every other source is shared by both programs.
BACKEND_SOURCES = {
    "executorch": ("program.cpp", "runtime_setup.cpp", "executorch_log.cpp"),
    "onnxruntime": ("ort_backend.cpp", "ort_library.cpp", "ort_library.h"),
    "ncnn": ("ncnn_backend.cpp",),
}
BUILT = "build.json"  # written last into a finished build's folder
BUILD_PREFIX = ".build."  # a build in progress, in the entry's folder
COMPILE_TIMEOUT_S = 900.0
Progress = Callable[[str], None]


@dataclass(frozen=True)
class NativeRunner:
    """A built ``edgekit-run``: the folder it runs from, and what it was built from."""

    folder: Path
    arch: str
    cpu: str | None
    key: str
    toolchain: Toolchain
    dist: ExecutorchDist

    @property
    def binary(self) -> Path:
        return self.folder / RUNNER_NAME

    def library(self, name: str) -> Path:
        return self.folder / "lib" / name


def sources(backend: str = "executorch") -> list[Path]:
    """The shared sources and ``backend``'s own (the other backends' files left out)."""
    others = {name for key, names in BACKEND_SOURCES.items() if key != backend for name in names}
    found = sorted(p for p in SOURCES.iterdir() if p.suffix in (".cpp", ".h") and p.name not in others) \
        if SOURCES.is_dir() else []
    if not any(p.suffix == ".cpp" for p in found):
        raise EdgekitError(f"the native runner's sources are missing from {SOURCES}; reinstall edgekit")
    return found


def common_flags(toolchain: Toolchain, cpu: str | None) -> list[str]:
    """What every backend's build of edgekit-run compiles with: C++17, -O2, the core's tuning,
    hardening, and edgekit's version."""
    return ["-std=c++17", "-O2", *toolchain.cpu_flags(cpu), "-fstack-protector-strong", "-D_FORTIFY_SOURCE=2",
            f'-DEDGEKIT_RUN_VERSION="{__version__}"']


def compile_flags(toolchain: Toolchain, dist: ExecutorchDist, cpu: str | None) -> list[str]:
    include = dist.include
    return [
        *common_flags(toolchain, cpu), "-DC10_USING_CUSTOM_GENERATED_MACROS",
        f'-DEDGEKIT_EXECUTORCH_VERSION="{dist.version}"',
        "-I", str(include), "-I", str(include / "executorch" / "runtime" / "core" / "portable_type" / "c10"),
    ]


def link_argv(toolchain: Toolchain, dist: ExecutorchDist, objects: list[Path], out: Path) -> list[str]:
    return [
        toolchain.cxx, "-s", *map(str, objects), "-o", str(out), "-L", str(dist.lib),
        "-Wl,--no-as-needed", *(f"-l{name[3:-3]}" for name in LINKED), "-Wl,--as-needed",
        "-lpthread", "-ldl", "-Wl,-z,relro,-z,now", "-Wl,-rpath,$ORIGIN/lib",
    ]


def compile_runner(toolchain: Toolchain, dist: ExecutorchDist, cpu: str | None, out: Path) -> None:
    compile_program(toolchain, sources("executorch"), compile_flags(toolchain, dist, cpu),
                    lambda objects: link_argv(toolchain, dist, objects, out), out)


def compile_program(toolchain: Toolchain, files: list[Path], flags: list[str],
                    link: Callable[[list[Path]], list[str]], out: Path) -> None:
    """Every ``.cpp`` of ``files`` to an object file (one compiler per core at a time), then the
    link (``link(objects)``'s argument list); the compiler's temporary files in a folder beside
    ``out``, removed with it."""
    from concurrent.futures import ThreadPoolExecutor

    folder = out.parent
    scratch = folder / ".cc-tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "TMP": str(scratch), "TEMP": str(scratch)}
    units = [p for p in files if p.suffix == ".cpp"]
    objects = [folder / f"{p.stem}.o" for p in units]
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        list(pool.map(lambda pair: _compile([toolchain.cxx, *flags, "-c", str(pair[0]), "-o", str(pair[1])], env),
                      zip(units, objects)))
    _compile(link(objects), env)
    for path in objects:
        path.unlink()
    shutil.rmtree(scratch, ignore_errors=True)


def build_runner(arch: str, cpu: str | None = None, progress: Progress | None = None) -> NativeRunner:
    """``edgekit-run`` for ``arch`` (tuned for ``cpu``, e.g. cortex-a72), built once and cached."""
    progress = progress or (lambda message: None)
    toolchain = find_toolchain(arch)  # a missing compiler is one line naming its package, before any download
    dist = executorch_dist(arch, progress)
    key = _key(toolchain, dist, cpu)

    entry = entry_dir("native", f"runner-{arch}-{key}")
    runner = NativeRunner(entry, arch, cpu, key, toolchain, dist)
    with _locked(entry / ".build.lock"):
        if _built(entry, key):
            return runner
        _remove_killed_builds(entry)
        progress(f"compiling {RUNNER_NAME} for {arch}{f' ({cpu})' if cpu else ''} with {Path(toolchain.cxx).name}")
        with tempfile.TemporaryDirectory(prefix=BUILD_PREFIX, dir=entry) as tmp:
            staged = Path(tmp) / RUNNER_NAME
            compile_runner(toolchain, dist, cpu, staged)
            (Path(tmp) / "lib").mkdir()
            for name in (*LINKED, *KERNELS):
                if (dist.lib / name).is_file():
                    shutil.copyfile(dist.lib / name, Path(tmp) / "lib" / name)
            install_staged(Path(tmp), entry)
        from edgekit.core.fileio import write_json

        write_json(entry / BUILT, {"schema": "edgekit.native-build", "key": key, "arch": arch, "cpu": cpu,
                                   "compiler": toolchain.version, "executorch_version": dist.version,
                                   "executorch_source": dist.source, "wheel_sha256": dist.wheel_sha256})
        prune_superseded(entry, "runner", arch, cpu)
    return runner


def install_staged(staged: Path, entry: Path) -> None:
    """Move a finished build's ``edgekit-run`` and ``lib/`` from ``staged`` into ``entry``, over what
    an earlier build left there (each by one rename)."""
    for name in (RUNNER_NAME, "lib"):
        final = entry / name
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)
        elif final.exists() or final.is_symlink():
            final.unlink()
        os.replace(staged / name, final)


def _remove_killed_builds(entry: Path) -> None:
    """The ``.build.*`` folders of builds that were killed (SIGKILL skips their clean-up). Called
    under the entry's build lock: no build of this entry is running, so every one is dead."""
    for path in entry.glob(f"{BUILD_PREFIX}*"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


def prune_superseded(current: Path, prefix: str, arch: str, cpu: str | None, backend: str | None = None) -> None:
    """Builds of the same backend, architecture and core from other sources or libraries: superseded.
    The cache keeps one build per (backend, arch, cpu) so it does not grow with every edgekit upgrade
    (ExecuTorch's builds name no backend)."""
    for other in current.parent.glob(f"{prefix}-{arch}-*"):
        if other == current or other.is_symlink() or not other.is_dir():
            continue
        try:
            doc = json.loads((other / BUILT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not a finished build of ours (or one in progress): left alone
        if isinstance(doc, dict) and doc.get("schema") == "edgekit.native-build" and doc.get("backend") == backend \
                and doc.get("arch") == arch and doc.get("cpu") == cpu:
            shutil.rmtree(other, ignore_errors=True)


def _key(toolchain: Toolchain, dist: ExecutorchDist, cpu: str | None) -> str:
    digest = hashlib.sha256()
    for path in sources("executorch"):
        digest.update(f"{path.name}\n".encode() + path.read_bytes())
    digest.update(json.dumps([__version__, toolchain.arch, toolchain.version, cpu, dist.version, dist.source,
                              dist.wheel_sha256 or _libs_digest(dist)]).encode())
    return digest.hexdigest()[:16]


def _libs_digest(dist: ExecutorchDist) -> str:
    """The installed libraries' content (no wheel hash to name them by)."""
    digest = hashlib.sha256()
    for name in LINKED:
        path = dist.lib / name
        stat = path.stat()
        digest.update(f"{name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _built(entry: Path, key: str) -> bool:
    try:
        doc = json.loads((entry / BUILT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("key") == key and (entry / RUNNER_NAME).is_file()


def _compile(argv: list[str], env: dict | None = None) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        raise EdgekitError(f"compiling the native runner did not finish within {COMPILE_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        errors = [line.strip() for line in done.stderr.splitlines() if " error: " in line or line.startswith("collect2")]
        why = errors[0] if errors else (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise EdgekitError(f"compiling the native runner failed: {why[:300]}")


class _locked:
    """An exclusive lock on ``path`` while a build runs (two builds of one key wait for each other)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
