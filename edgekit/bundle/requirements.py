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
    extra_index_url: str | None = None
    no_deps: bool = False  # install exactly these pins (pip --no-deps)

    @property
    def deps_flag(self) -> str:
        return " --no-deps" if self.no_deps else ""

    def text(self) -> str:
        return "".join([
            "# edgekit bundle requirements: the versions the host verified this model with.\n",
            f"# platform: {self.platform}\n",
            f"# python: {self.python_version}\n",
            f"# online:  python3 -m pip install{self.deps_flag} -r requirements.txt\n",
            f"# offline: python3 -m pip install{self.deps_flag} --no-index --find-links wheels -r requirements.txt\n",
            *([f"--index-url {self.index_url}\n"] if self.index_url else []),
            *([f"--extra-index-url {self.extra_index_url}\n"] if self.extra_index_url else []),
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
    """Pins for a bundle of format ``fmt``: numpy, what the format's runtime needs, and the runtime."""
    from edgekit import formats

    check_platform(platform)
    check_python_version(python_version)
    entry = formats.get(fmt)
    runtime = entry.board_runtime
    versions = {dist: host_version(dist) for dist in ("numpy", *entry.board_requirements, runtime)}
    return Pins(
        requirements=tuple(f"{dist}=={version}" for dist, version in versions.items()),
        runtime={"name": runtime, "version": versions[runtime]},
        platform=platform,
        python_version=python_version,
        index_url=entry.index_url,
        extra_index_url=entry.extra_index_url,
        no_deps=entry.board_no_deps,
    )


def board_dists(fmt: str) -> tuple[str, ...]:
    """The distributions a board installs for ``fmt`` (numpy first, the runtime last)."""
    from edgekit import formats

    entry = formats.get(fmt)
    return ("numpy", *entry.board_requirements, entry.board_runtime)


def check_wheel_exists(dist: str, version: str, platform: str, python_version: str) -> None:
    """EdgekitError unless the package index has a ``dist==version`` wheel for the board.

    ``pip install --dry-run --no-deps`` for the board's platform: pip reads the index and the
    wheel's metadata only (no download), so this takes about a second.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edgekit-wheel-check-") as scratch:
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                "--only-binary=:all:", "--platform", check_platform(platform),
                "--python-version", check_python_version(python_version), "--implementation", "cp",
                "--target", scratch, "--disable-pip-version-check", "--no-input", "--quiet", f"{dist}=={version}"]
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
                                  check=False, **popen_kwargs())
        except subprocess.TimeoutExpired:
            raise EdgekitError(f"checking for a {dist} {version} wheel for {platform} took over 300 s; check the network") from None
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        if any(sign in output for sign in _NETWORK_SIGNS):
            raise EdgekitError(f"cannot check for a {dist} {version} wheel for {platform} / Python {python_version}: "
                               "the package index is not reachable; connect to the network")
        raise EdgekitError(f"{dist} {version} has no wheel for {platform} / Python {python_version}, so a board of "
                           f"this target cannot run the bundle; choose another format (--format) or target")


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
                      python: str | None = None, no_deps: bool = False) -> list[str]:
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
        *(["--no-deps"] if no_deps else []),
        "-r", str(requirements),
        "-d", str(dest),
    ]


def download_wheels(requirements: Path, dest: Path, platform: str, python_version: str,
                    no_deps: bool = False) -> list[str]:
    """Fill ``dest`` with wheels for ``requirements`` (and their dependencies); returns the file names."""
    dest.mkdir(parents=True, exist_ok=True)
    argv = pip_download_argv(requirements, dest, platform, python_version, no_deps=no_deps)
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
