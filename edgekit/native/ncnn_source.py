"""ncnn's shared library for an architecture, built from the source distribution of the installed ncnn.

ncnn's wheels carry only a Python extension (the library is linked into it); its source
distribution on the package index carries the whole C++ library and its C API (``c_api.h``).
The sdist of the installed ``ncnn`` version is fetched once (its address and SHA-256 from the
index's JSON API; the digest edgekit pins for the versions it knows is checked too), unpacked,
and built with CMake for the architecture (the cross compiler's toolchain for a board: no
Vulkan, no OpenMP, no tools; one ``libncnn.so`` without a versioned SONAME, so a bundle's
``lib/libncnn.so`` is what the runner asks for). The library, the headers the C API needs
(``c_api.h`` and the build's ``platform.h`` / ``ncnn_export.h``) and ncnn's licence are kept in the
``native`` part of edgekit's cache; the source and build trees are removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import urljoin, urlsplit

from edgekit.core.cache import entry_dir
from edgekit.core.errors import EdgekitError
from edgekit.core.fileio import sha256_file, write_json
from edgekit.native.build import _locked
from edgekit.native.toolchain import CROSS, Toolchain, find_toolchain
from edgekit.native.wheel import installed_version as wheel_version

DIST = "ncnn"
LIBRARY = "libncnn.so"  # its name in a bundle's lib/ (the runner's NEEDED entry)
HEADERS = ("c_api.h", "platform.h", "ncnn_export.h")
LICENSE = "LICENSE.txt"
INDEX_JSON = "https://pypi.org/pypi/ncnn/json"
KNOWN_SHA256 = {"1.0.20261020": "ad8cdd63e9755cfa8e23b9b6d9ce46156077d80298a89e7c3ba325ffccfca200"}
MAX_SDIST_BYTES = 256 << 20
BUILD_JOBS = 2
DOWNLOAD_TIMEOUT_S = 300.0
BUILD_TIMEOUT_S = 3600.0
READY = "ready.json"
CMAKE_OPTIONS = ("-DNCNN_VULKAN=OFF", "-DNCNN_BUILD_TOOLS=OFF", "-DNCNN_BUILD_EXAMPLES=OFF",
                 "-DNCNN_BUILD_BENCHMARK=OFF", "-DNCNN_BUILD_TESTS=OFF", "-DNCNN_PYTHON=OFF", "-DNCNN_SHARED_LIB=ON",
                 "-DNCNN_OPENMP=OFF", "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class NcnnLibrary:
    """One build of ncnn's library: where it, its C headers and its licence are."""

    version: str
    arch: str
    library: Path
    include: Path
    license: Path
    sdist_sha256: str


def installed_version() -> str:
    return wheel_version(DIST, "a native ncnn bundle builds the installed ncnn's library from its source: "
                               "pip install ncnn")


def ncnn_library(arch: str, progress: Progress | None = None) -> NcnnLibrary:
    """ncnn's library of this host's ncnn version, built for ``arch`` once and cached."""
    progress = progress or (lambda message: None)
    version = installed_version()
    toolchain = find_toolchain(arch)  # a missing compiler is one line naming its package, before any download
    cmake = shutil.which("cmake")
    if cmake is None:
        raise EdgekitError("building ncnn's library needs CMake; install it: apt-get install cmake")
    entry = entry_dir("native", f"ncnn-{version}-{arch}")
    with _locked(entry / ".build.lock"):
        found = _ready_in(entry, version, arch)
        if found is not None:
            return found
        sdist, digest = fetch_sdist(version, progress)
        progress(f"building ncnn {version}'s library for {arch} from its source with {Path(toolchain.cxx).name} "
                 f"(once, {BUILD_JOBS} jobs: cached in {entry})")
        _build(sdist, toolchain, cmake, entry)
        write_json(entry / READY, {"schema": "edgekit.native-ncnn", "version": version, "arch": arch,
                                   "compiler": toolchain.version, "sdist": sdist.name, "sdist_sha256": digest})
    found = _ready_in(entry, version, arch)
    if found is None:
        raise EdgekitError(f"the ncnn build in {entry} is incomplete; remove it and build again")
    return found


def fetch_sdist(version: str, progress: Progress) -> tuple[Path, str]:
    """The sdist ``ncnn-<version>.tar.gz`` in edgekit's cache (downloaded once) and its SHA-256."""
    entry = entry_dir("native", f"ncnn-{version}-sdist")
    name = f"{DIST}-{version}.tar.gz"
    path = entry / name
    with _locked(entry / ".fetch.lock"):
        url, want = _index_entry(version, name) if not (entry / f"{name}.sha256").is_file() else \
            (None, (entry / f"{name}.sha256").read_text(encoding="ascii").strip())
        pinned = KNOWN_SHA256.get(version)
        if pinned and want != pinned:
            raise EdgekitError(f"the package index's SHA-256 of {name} ({want}) is not the one edgekit pins ({pinned})")
        if path.is_file() and sha256_file(path) == want:
            return path, want
        if url is None:
            url, want = _index_entry(version, name)
        progress(f"downloading {name} (ncnn's source, once: cached in {entry})")
        with tempfile.NamedTemporaryFile(prefix=".download.", dir=entry, delete=False) as out:
            try:
                _download(url, out)
            except BaseException:
                os.unlink(out.name)
                raise
        got = sha256_file(Path(out.name))
        if got != want:
            os.unlink(out.name)
            raise EdgekitError(f"{name} from the package index has SHA-256 {got}, not the index's {want}; not using it")
        os.replace(out.name, path)
        (entry / f"{name}.sha256").write_text(want + "\n", encoding="ascii")
    return path, want


def _index_entry(version: str, name: str) -> tuple[str, str]:
    """The sdist's address and SHA-256 from the index's JSON API."""
    try:
        with urllib.request.urlopen(urllib.request.Request(INDEX_JSON, headers={"User-Agent": "edgekit"}),
                                    timeout=DOWNLOAD_TIMEOUT_S) as reply:
            doc = json.loads(reply.read(64 << 20))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EdgekitError(f"cannot read {INDEX_JSON} (the package index must be reachable once; ncnn's build is "
                           f"cached after): {exc}") from None
    files = (doc.get("releases") or {}).get(version) if isinstance(doc, dict) else None
    for item in files or ():
        if isinstance(item, dict) and item.get("packagetype") == "sdist" and item.get("filename") == name:
            url = urljoin(INDEX_JSON, str(item.get("url")))
            digest = str((item.get("digests") or {}).get("sha256", ""))
            if urlsplit(url).scheme == "https" and len(digest) == 64:
                return url, digest
    raise EdgekitError(f"the package index lists no source distribution {name} for ncnn {version}")


def _download(url: str, out) -> None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "edgekit"}),
                                    timeout=DOWNLOAD_TIMEOUT_S) as reply:
            total = 0
            while block := reply.read(1 << 20):
                total += len(block)
                if total > MAX_SDIST_BYTES:
                    raise EdgekitError(f"{url} is larger than {MAX_SDIST_BYTES >> 20} MiB; not ncnn's source")
                out.write(block)
    except (urllib.error.URLError, OSError) as exc:
        raise EdgekitError(f"cannot download ncnn's source from {url}: {exc}") from None


def _build(sdist: Path, toolchain: Toolchain, cmake: str, entry: Path) -> None:
    for stale in entry.glob(".build.*"):  # what a killed build left (we hold the entry's lock)
        shutil.rmtree(stale, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=".build.", dir=entry) as tmp:
        work = Path(tmp)
        _unpack(sdist, work / "src")
        roots = [p for p in (work / "src").iterdir() if (p / "CMakeLists.txt").is_file()]
        if len(roots) != 1:
            raise EdgekitError(f"{sdist.name} does not hold one CMake project; it cannot build ncnn's library")
        source, build = roots[0], work / "build"
        argv = [cmake, "-S", str(source), "-B", str(build), *CMAKE_OPTIONS]
        if toolchain.cross:
            argv.append(f"-DCMAKE_TOOLCHAIN_FILE={_toolchain_file(toolchain, work)}")
        env = {**os.environ, "TMPDIR": tmp, "LC_ALL": "C"}
        _run(argv, "configuring ncnn's build", env)
        _run([cmake, "--build", str(build), "--target", "ncnn", "-j", str(BUILD_JOBS)], "building ncnn's library", env)
        built = build / "src" / LIBRARY
        if not built.is_file():
            raise EdgekitError(f"ncnn's build made no {LIBRARY}")
        staged = work / "dist"
        (staged / "include").mkdir(parents=True)
        shutil.copyfile(built.resolve(), staged / LIBRARY)
        for name in HEADERS:
            header = next((p for p in (source / "src" / name, build / "src" / name) if p.is_file()), None)
            if header is None:
                raise EdgekitError(f"ncnn's source and build lack {name}; cannot compile against its C API")
            shutil.copyfile(header, staged / "include" / name)
        shutil.copyfile(source / LICENSE, staged / LICENSE)
        final = entry / "dist"
        if final.exists():
            shutil.rmtree(final)
        os.replace(staged, final)


def _unpack(sdist: Path, dest: Path) -> None:
    """The sdist's files and folders (member names checked: relative, inside ``dest``; no links or devices)."""
    with tarfile.open(sdist, "r:gz") as archive:
        members = archive.getmembers()
        for member in members:
            parts = Path(member.name).parts
            if not (member.isfile() or member.isdir()) or Path(member.name).is_absolute() or ".." in parts \
                    or member.size > MAX_SDIST_BYTES:
                raise EdgekitError(f"{sdist.name} holds an unexpected member {member.name[:120]!r}; not unpacking it")
            member.mode = 0o755 if member.isdir() else 0o644
        archive.extractall(dest, members=members)


def _toolchain_file(toolchain: Toolchain, work: Path) -> Path:
    """CMake's cross-compiling settings for the toolchain's compilers and libc."""
    cxx = Path(toolchain.cxx)
    cc = cxx.with_name(cxx.name.removesuffix("g++") + "gcc")
    sysroot = toolchain.sysroot or CROSS[toolchain.arch][2]
    path = work / "toolchain.cmake"
    path.write_text("\n".join([
        "set(CMAKE_SYSTEM_NAME Linux)", f"set(CMAKE_SYSTEM_PROCESSOR {toolchain.arch})",
        f"set(CMAKE_C_COMPILER {cc})", f"set(CMAKE_CXX_COMPILER {cxx})", f"set(CMAKE_FIND_ROOT_PATH {sysroot})",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)", "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)", ""]), encoding="utf-8")
    return path


def _run(argv: list[str], what: str, env: dict) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        raise EdgekitError(f"{what} did not finish within {BUILD_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if "error" in line.lower()]
        why = lines[0] if lines else (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise EdgekitError(f"{what} failed: {why[:300]}")


def _ready_in(entry: Path, version: str, arch: str) -> NcnnLibrary | None:
    dist = entry / "dist"
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads((entry / READY).read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("schema") == "edgekit.native-ncnn" and doc.get("version") == version \
                and (dist / LIBRARY).is_file() and all((dist / "include" / h).is_file() for h in HEADERS):
            return NcnnLibrary(version, arch, dist / LIBRARY, dist / "include", dist / LICENSE,
                               str(doc.get("sdist_sha256")))
    return None
