"""requirements.txt pinned to the host's versions, and the target platform's wheels (``--wheels``).

The pins are the versions this host exported and verified the model with, so the board runs
the same runtime. Wheels come from ``pip download --only-binary=:all: --platform TAG
--python-version X.Y``: binary wheels for the board, fetched on any host, installable offline.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import EdgekitError, UsageError
from edgekit.children import popen_kwargs

RUNTIME_DISTS = {"onnx": "onnxruntime", "torchscript": "torch"}
# PyPI's torch wheels for aarch64 Linux pull CUDA libraries (hundreds of MB) a Pi cannot use;
# PyTorch's CPU index carries CPU-only builds of the same versions (and numpy).
INDEX_URLS = {"torchscript": "https://download.pytorch.org/whl/cpu"}
DOWNLOAD_TIMEOUT_S = 3600.0
_PLATFORM = re.compile(r"^[a-z0-9_]+$")
_PYTHON_VERSION = re.compile(r"^3\.\d{1,2}$")
_NETWORK_SIGNS = (
    "Failed to establish a new connection", "NewConnectionError", "Temporary failure in name resolution",
    "Network is unreachable", "Connection refused", "ConnectTimeoutError", "Read timed out",
    "ProxyError", "SSLError", "No route to host",
)


@dataclass(frozen=True)
class Pins:
    """What a bundle's board must install: ``name==version`` lines, for one platform and python."""

    requirements: tuple[str, ...]
    runtime: dict  # {"name": ..., "version": ...}
    platform: str
    python_version: str
    index_url: str | None = None

    def text(self) -> str:
        return "".join([
            "# edgekit bundle requirements: the versions the host verified this model with.\n",
            f"# platform: {self.platform}\n",
            f"# python: {self.python_version}\n",
            "# online:  python3 -m pip install -r requirements.txt\n",
            "# offline: python3 -m pip install --no-index --find-links wheels -r requirements.txt\n",
            *([f"--index-url {self.index_url}\n"] if self.index_url else []),
            *(f"{line}\n" for line in self.requirements),
        ])


def host_version(dist: str) -> str:
    """The host's installed version of ``dist``, without a local label (``2.4.1+cpu`` -> ``2.4.1``)."""
    from importlib import metadata

    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        raise EdgekitError(f"{dist} is not installed on this host, so its version cannot be pinned; pip install {dist}") from None
    return version.split("+", 1)[0]


def pin(fmt: str, platform: str, python_version: str) -> Pins:
    """Pins for a bundle of format ``fmt`` (numpy, and onnxruntime or torch)."""
    check_platform(platform)
    check_python_version(python_version)
    runtime = RUNTIME_DISTS[fmt]
    versions = {dist: host_version(dist) for dist in ("numpy", runtime)}
    return Pins(
        requirements=tuple(f"{dist}=={version}" for dist, version in versions.items()),
        runtime={"name": runtime, "version": versions[runtime]},
        platform=platform,
        python_version=python_version,
        index_url=INDEX_URLS.get(fmt),
    )


def check_platform(platform: str) -> str:
    if not platform:
        raise UsageError("the target names no python platform; pass --platform, e.g. manylinux_2_28_aarch64")
    if not _PLATFORM.match(platform):
        raise UsageError(f"python platform {platform!r} is not a wheel platform tag such as manylinux_2_28_aarch64")
    return platform


def check_python_version(version: str) -> str:
    if not _PYTHON_VERSION.match(version):
        raise UsageError(f"python version {version!r} must look like 3.11")
    return version


def pip_download_argv(requirements: Path, dest: Path, platform: str, python_version: str,
                      python: str | None = None) -> list[str]:
    """The ``pip download`` command line for the target's binary wheels (an argument list)."""
    return [
        python or sys.executable, "-m", "pip", "download",
        "--only-binary=:all:",
        "--platform", check_platform(platform),
        "--python-version", check_python_version(python_version),
        "--implementation", "cp",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar", "off",
        "-r", str(requirements),
        "-d", str(dest),
    ]


def download_wheels(requirements: Path, dest: Path, platform: str, python_version: str) -> list[str]:
    """Fill ``dest`` with wheels for ``requirements`` (and their dependencies); returns the file names."""
    dest.mkdir(parents=True, exist_ok=True)
    argv = pip_download_argv(requirements, dest, platform, python_version)
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=DOWNLOAD_TIMEOUT_S, check=False, **popen_kwargs())
    except subprocess.TimeoutExpired:
        raise EdgekitError(f"pip download of the {platform} wheels took over {DOWNLOAD_TIMEOUT_S:g} s; check the network") from None
    except OSError as exc:
        raise EdgekitError(f"cannot run pip: {exc}") from None
    if proc.returncode != 0:
        raise download_error(proc.stdout + proc.stderr, platform, python_version)
    wheels = sorted(p.name for p in dest.iterdir() if p.is_file())
    not_wheels = [name for name in wheels if not name.endswith(".whl")]
    if not wheels or not_wheels:
        raise EdgekitError(f"pip download left no wheels or non-wheel files ({', '.join(not_wheels) or 'none'}) in {dest}")
    return wheels


def download_error(output: str, platform: str, python_version: str) -> EdgekitError:
    """One line naming why ``pip download`` failed, and what to do about it."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR:")]
    detail = errors[0] if errors else (lines[-1] if lines else "no output")
    what = f"cannot download the wheels for {platform} / Python {python_version}"
    if any(sign in output for sign in _NETWORK_SIGNS):
        return EdgekitError(
            f"{what}: the package index is not reachable ({detail}); connect to the network, "
            "or bundle without --wheels and install on the board from PyPI"
        )
    found = re.search(r"\(from versions: ([^)]*)\)", output)
    if found and found.group(1).strip() in ("", "none"):
        return EdgekitError(
            f"{what}: {detail}; the package index is not reachable from here (offline? proxy?) or has no such "
            "wheel at all; connect to the network, or bundle without --wheels and install on the board from PyPI"
        )
    if found:
        return EdgekitError(
            f"{what}: {detail}; the pinned release has no wheel for {platform} (the versions listed do); "
            "recent numpy/onnxruntime/torch wheels need glibc 2.28: pass --platform manylinux_2_28_aarch64"
        )
    return EdgekitError(f"{what}: {detail}")
