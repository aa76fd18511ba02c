"""ONNX Runtime's shared library for an architecture, from its own ``onnxruntime`` wheel.

The wheel's ``onnxruntime/capi/libonnxruntime.so.<version>`` is self-contained (glibc 2.28,
libstdc++), which is what a native ONNX bundle ships. For this host's architecture the installed
package's library is used; for another one (a board) the wheel of the installed version is fetched
once with ``pip download --platform`` (``edgekit.native.wheel.download``), checked by SHA-256
(against the value edgekit pins for the versions it knows, else the index's, which pip checks), and
its library, licence and third-party notices are kept in the ``native`` part of edgekit's cache.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgekit.core.errors import EdgekitError, UsageError
from edgekit.native.toolchain import host_arch
from edgekit.native.wheel import PLATFORMS, PYTHON_TAG, download, unpack_pinned
from edgekit.native.wheel import installed_version as wheel_version
from edgekit.core.cache import entry_dir
from edgekit.core.fileio import write_json

DIST = "onnxruntime"
LIBRARY = "libonnxruntime.so"  # its name in a bundle's lib/ (ort_library.cpp opens this name)
NOTICES = ("LICENSE", "ThirdPartyNotices.txt")
KNOWN_SHA256 = {
    ("1.32.0", "manylinux_2_28_aarch64"): "2303372a85299b6757b0e11e1cbf13e410ddf7e10c37f4b37e99d1c90e7daf7c",
    ("1.32.0", "manylinux_2_28_x86_64"): "5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d",
}
READY = "ready.json"
MAX_LIBRARY_BYTES = 512 << 20
Progress = Callable[[str], None]


@dataclass(frozen=True)
class OrtDist:
    """Where one build of ONNX Runtime's library and its notices are."""

    version: str
    arch: str
    library: Path
    notices: tuple[Path, ...]  # the licence and the third-party notices, where present
    source: str  # "installed" | "wheel"
    wheel_sha256: str | None = None


def installed_version() -> str:
    return wheel_version(DIST, "a native ONNX bundle ships the onnxruntime package's library: pip install onnxruntime")


def onnxruntime_dist(arch: str, progress: Progress | None = None) -> OrtDist:
    """ONNX Runtime's library of this host's onnxruntime version, built for ``arch``."""
    progress = progress or (lambda message: None)
    version = installed_version()
    if arch == host_arch():
        found = _installed(version, arch)
        if found is not None:
            return found
    if arch not in PLATFORMS:
        raise UsageError(f"no onnxruntime wheel is published for {arch!r}; the native runtime needs aarch64 or x86_64")
    return _unpacked(version, arch, progress)


def _installed(version: str, arch: str) -> OrtDist | None:
    import importlib.util

    spec = importlib.util.find_spec(DIST)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    library = root / "capi" / f"{LIBRARY}.{version}"
    if not library.is_file():
        return None
    return OrtDist(version, arch, library, tuple(p for p in (root / n for n in NOTICES) if p.is_file()), "installed")


def _unpacked(version: str, arch: str, progress: Progress) -> OrtDist:
    platform = PLATFORMS[arch]
    entry = entry_dir("native", f"{DIST}-{version}-{PYTHON_TAG}-{platform}")
    ready = _read_ready(entry / READY)
    if ready is not None and (entry / "dist" / LIBRARY).is_file():
        return _dist_in(entry / "dist", version, arch, ready.get("sha256"))
    wheel = download(version, platform, entry, progress, dist=DIST)
    known = KNOWN_SHA256.get((version, platform))
    digest = unpack_pinned(wheel, entry, known, lambda dest: _extract(wheel, version, dest),
                           f"ONNX Runtime's library from {wheel.name}", progress)

    write_json(entry / READY, {"schema": "edgekit.native-onnxruntime", "version": version, "platform": platform,
                               "wheel": wheel.name, "sha256": digest, "pinned": known is not None})
    wheel.unlink()  # the library and notices are kept: the cache holds only what bundles use
    return _dist_in(entry / "dist", version, arch, digest)


def _dist_in(folder: Path, version: str, arch: str, digest: str | None) -> OrtDist:
    return OrtDist(version, arch, folder / LIBRARY, tuple(p for p in (folder / n for n in NOTICES) if p.is_file()),
                   "wheel", digest)


def _extract(wheel: Path, version: str, dest: Path) -> None:
    """The library (as ``LIBRARY``) and the notices out of the wheel, by their exact member names."""
    wanted = {f"{DIST}/capi/{LIBRARY}.{version}": LIBRARY, **{f"{DIST}/{name}": name for name in NOTICES}}
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = wanted.get(info.filename)
            if name is None:
                continue
            if info.file_size > MAX_LIBRARY_BYTES:
                raise EdgekitError(f"{wheel.name}'s {info.filename} is larger than {MAX_LIBRARY_BYTES >> 20} MiB; "
                                   "not unpacking it")
            with archive.open(info) as src, open(dest / name, "wb") as out:
                shutil.copyfileobj(src, out)
    if not (dest / LIBRARY).is_file():
        raise EdgekitError(f"{wheel.name} lacks {DIST}/capi/{LIBRARY}.{version}; it cannot make a native ONNX bundle")


def _read_ready(path: Path) -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("schema") == "edgekit.native-onnxruntime":
            return doc
    return None
