"""requirements.txt pinned to the host's versions, and the target platform's wheels (``--wheels``).

The pins are the versions this host exported and verified the model with, so the board runs
the same runtime. Wheels come from ``pip download --only-binary=:all: --platform TAG ...
--python-version X.Y``: binary wheels for the board, fetched on any host, installable offline.

A target names the newest platform tag its board accepts (``manylinux_2_28_aarch64``: glibc
2.28). pip takes each ``--platform`` literally, and wheels are tagged with the oldest glibc they
need (numpy's aarch64 wheel ``manylinux_2_17``, pydantic-core's ``manylinux2014``), so the
download names the whole family the board's pip accepts: every manylinux tag from that glibc down
to the architecture's oldest (``platform_family``); pure-python wheels (``none-any``) always fit.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import EdgekitError, InputFileError, UsageError
from edgekit.core.children import popen_kwargs
from edgekit import formats

DOWNLOAD_TIMEOUT_S = 3600.0
_PLATFORM = re.compile(r"[a-z0-9_]+")  # fullmatch: "$" would let a trailing newline through
_PYTHON_VERSION = re.compile(r"3\.\d{1,2}")
_NETWORK_SIGNS = (
    "Failed to establish a new connection", "NewConnectionError", "Temporary failure in name resolution",
    "Network is unreachable", "Connection refused", "ConnectTimeoutError", "Read timed out",
    "ProxyError", "SSLError", "No route to host", "Failed to resolve", "NameResolutionError",
)
NETWORK_SIGNS = _NETWORK_SIGNS  # what pip prints when an index does not answer (edgekit.emulate reads it too)


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


# What a bundle's requirements.txt may hold: the lines ``Pins.text`` writes, nothing else. pip
# reads far more from such a file (any option: -i/--index-url=, --extra-index-url, -f, --trusted-host,
# -r, -c, -e; URLs and paths instead of names; markers; ``\\`` continuations; ``${ENV}``; a
# ``coding:`` comment that re-decodes the file) and runs as root under ``verify --emulate``, so
# a requirement line is ``name==version`` and an index line names one of the format table's indexes.
MAX_REQUIREMENTS_BYTES = 64 << 10
MAX_REQUIREMENT_LINES = 200
_PIN = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)=="
    r"(?P<version>(?:[0-9]{1,9}!)?[0-9]{1,9}(?:\.[0-9]{1,9}){0,9}(?:(?:a|b|rc)[0-9]{1,9})?(?:\.post[0-9]{1,9})?"
    r"(?:\.dev[0-9]{1,9})?)"
)
_INDEX_LINE = re.compile(r"(?P<option>--index-url|--extra-index-url) (?P<url>\S+)")
INDEX_URL = re.compile(r"https?://(?:[A-Za-z0-9._~!&()*+,;=:%-]{1,256}@)?(?:[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])"
                       r"(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~!&()*+,;=:@%/-]{0,1000})?")  # no quotes, blanks, \\ or ${}
_CODING = re.compile(r"coding[:=]")


@dataclass(frozen=True)
class Requirements:
    """A checked requirements.txt: its pins and the index options edgekit wrote into it."""

    pins: tuple[str, ...]  # "name==version"
    index_url: str | None = None
    extra_index_url: str | None = None


def format_indexes(fmt=None) -> frozenset[tuple[str, str]]:
    """The index lines a bundle's requirements may hold, as (option, URL): those edgekit writes
    for the format entry ``fmt`` (for any format when None)."""
    entries = [fmt] if fmt is not None else [formats.get(name) for name in formats.names()]
    return frozenset(pair for entry in entries
                     for pair in (("--index-url", entry.board.index_url), ("--extra-index-url", entry.board.extra_index_url)) if pair[1])


def parse_requirements(text: str, where: str, indexes=None) -> Requirements:
    """``text`` as edgekit writes requirements.txt, else InputFileError naming the first bad line.

    Lines are blank, ``# comments``, ``name==version``, or ``--index-url URL`` /
    ``--extra-index-url URL`` (each once), an (option, URL) pair in ``indexes`` (when None:
    any http(s) URL of plain characters)."""
    if len(text) > MAX_REQUIREMENTS_BYTES:
        raise InputFileError(f"{where} is larger than {MAX_REQUIREMENTS_BYTES >> 10} KiB; a bundle's pins are a few lines")
    bad = next((c for c in text if not (" " <= c <= "~" or c in "\r\n")), None)
    if bad is not None:
        raise InputFileError(f"{where} holds the character {bad!r}; requirements are plain ASCII lines")
    lines = text.splitlines()
    if len(lines) > MAX_REQUIREMENT_LINES:
        raise InputFileError(f"{where} has more than {MAX_REQUIREMENT_LINES} lines")
    pins: dict[str, str] = {}
    found: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if "\\" in line or "${" in line:
            raise InputFileError(f"{where} line {number}: a backslash or ${{...}} (pip would join lines or expand "
                                 "the environment); requirements are name==version lines")
        if not stripped:
            continue
        if stripped.startswith("#"):
            if _CODING.search(stripped):
                raise InputFileError(f"{where} line {number}: a 'coding:' comment (pip would decode the file with it)")
            continue
        pin = _PIN.fullmatch(stripped)
        if pin:
            key = pin["name"].lower().replace("_", "-").replace(".", "-")
            if key in pins:
                raise InputFileError(f"{where} line {number}: {pin['name']} is pinned twice")
            pins[key] = stripped
            continue
        index = _INDEX_LINE.fullmatch(stripped)
        if index and index["option"] not in found and INDEX_URL.fullmatch(index["url"]) and (
                indexes is None or (index["option"], index["url"]) in indexes):
            found[index["option"]] = index["url"]
            continue
        hint = "pip options, URLs, paths and markers are refused"
        if index and indexes is not None:
            allowed = ", ".join(f"{option} {url}" for option, url in sorted(indexes))
            hint = (f"the only index lines allowed are edgekit's own for this format ({allowed}), once each"
                    if indexes else "this bundle's format names no package index")
        raise InputFileError(f"{where} line {number} {stripped[:80]!r} is not name==version: {hint}")
    return Requirements(tuple(pins.values()), found.get("--index-url"), found.get("--extra-index-url"))


def read_requirements(path: Path, fmt: str | None = None) -> Requirements:
    """A bundle's requirements.txt, read (bounded) and checked with ``parse_requirements`` against
    the indexes of ``fmt`` (the name its bundle.json gives, looked up here once)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_REQUIREMENTS_BYTES + 1)
    except OSError as exc:
        raise InputFileError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_REQUIREMENTS_BYTES:
        raise InputFileError(f"{path} is larger than {MAX_REQUIREMENTS_BYTES >> 10} KiB; a bundle's pins are a few lines")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise InputFileError(f"{path} is not plain ASCII text; requirements are name==version lines") from None
    return parse_requirements(text, str(path), format_indexes(formats.get(fmt) if fmt is not None else None))


def host_version(dist: str) -> str:
    """The host's installed version of ``dist``, without a local label (``2.4.1+cpu`` -> ``2.4.1``)."""
    from importlib import metadata

    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        raise EdgekitError(f"{dist} is not installed on this host, so its version cannot be pinned; pip install {dist}") from None
    return version.split("+", 1)[0]


def pin(entry, platform: str, python_version: str) -> Pins:
    """Pins for a bundle of the format ``entry`` (``edgekit.formats.Format``): numpy, what the
    format's runtime needs, and the runtime."""
    check_platform(platform)
    check_python_version(python_version)
    runtime = entry.board.runtime
    versions = {dist: host_version(dist) for dist in ("numpy", *entry.board.requirements, runtime)}
    return Pins(
        requirements=tuple(f"{dist}=={version}" for dist, version in versions.items()),
        runtime={"name": runtime, "version": versions[runtime]},
        platform=platform,
        python_version=python_version,
        index_url=entry.board.index_url,
        extra_index_url=entry.board.extra_index_url,
        no_deps=entry.board.no_deps,
    )


def board_dists(entry) -> tuple[str, ...]:
    """The distributions a board installs for the format ``entry`` (numpy first, the runtime last)."""
    return ("numpy", *entry.board.requirements, entry.board.runtime)


def check_wheel_exists(dist: str, version: str, platform: str, python_version: str) -> None:
    """EdgekitError unless the package index has a ``dist==version`` wheel for the board.

    ``pip install --dry-run --no-deps`` for the board's platform: pip reads the index and the
    wheel's metadata only (no download), so this takes about a second.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edgekit-wheel-check-") as scratch:
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                "--only-binary=:all:", *platform_args(platform),
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
        raise EdgekitError(f"{dist} {version} has no wheel for {family_text(platform)} / Python {python_version}, so a "
                           f"board of this target cannot run the bundle; choose another format (--format) or target")


# The oldest glibc with a manylinux tag per architecture (packaging's ``_manylinux``: PEP 600),
# and the legacy aliases of PEP 513/571/599 for the glibc versions they stand for.
_OLDEST_GLIBC = {"x86_64": 5, "i686": 5}  # every other architecture: 17 (manylinux2014)
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_MANYLINUX = re.compile(r"manylinux_2_(?P<minor>\d{1,2})_(?P<arch>[a-z0-9_]+)")
_LEGACY_TAG = re.compile(r"(?P<alias>manylinux2014|manylinux2010|manylinux1)_(?P<arch>[a-z0-9_]+)")
_MUSLLINUX = re.compile(r"musllinux_1_(?P<minor>\d{1,2})_(?P<arch>[a-z0-9_]+)")


def platform_family(platform: str) -> tuple[str, ...]:
    """Every platform tag a board accepting ``platform`` installs, newest first.

    ``manylinux_2_28_aarch64`` (glibc 2.28) -> ``manylinux_2_28_aarch64`` ... ``manylinux_2_17_aarch64``,
    ``manylinux2014_aarch64``: what pip on that board accepts (never ``linux_aarch64``, a wheel
    built for one machine). A legacy tag stands for its glibc (``manylinux2014_aarch64`` -> 2.17),
    ``musllinux_1_2_*`` includes ``musllinux_1_1_*``; any other tag is taken as it is.
    """
    check_platform(platform)
    legacy = _LEGACY_TAG.fullmatch(platform)
    manylinux = _MANYLINUX.fullmatch(platform)
    if legacy or manylinux:
        arch = (legacy or manylinux)["arch"]
        newest = {v: k for k, v in _LEGACY.items()}[legacy["alias"]] if legacy else int(manylinux["minor"])
        oldest = _OLDEST_GLIBC.get(arch, 17)
        tags = []
        for minor in range(newest, oldest - 1, -1):
            tags.append(f"manylinux_2_{minor}_{arch}")
            if minor in _LEGACY and (minor == 17 or arch in _OLDEST_GLIBC):
                tags.append(f"{_LEGACY[minor]}_{arch}")
        return tuple(tags) or (platform,)
    musl = _MUSLLINUX.fullmatch(platform)
    if musl:
        return tuple(f"musllinux_1_{minor}_{musl['arch']}" for minor in range(int(musl["minor"]), 0, -1))
    return (platform,)


def platform_args(platform: str) -> list[str]:
    """``--platform TAG`` for each tag of ``platform_family(platform)`` (pip takes several)."""
    return [arg for tag in platform_family(platform) for arg in ("--platform", tag)]


def family_text(platform: str) -> str:
    """``manylinux_2_28_aarch64 .. manylinux2014_aarch64`` (or the one tag)."""
    family = platform_family(platform)
    return family[0] if len(family) == 1 else f"{family[0]} .. {family[-1]}"


def glibc_of(platform: str) -> int | None:
    """The glibc minor version a manylinux tag stands for (28 for ``manylinux_2_28_aarch64``), else None."""
    legacy = _LEGACY_TAG.fullmatch(platform)
    if legacy:
        return {v: k for k, v in _LEGACY.items()}[legacy["alias"]]
    manylinux = _MANYLINUX.fullmatch(platform)
    return int(manylinux["minor"]) if manylinux else None


def check_platform(platform: str) -> str:
    if not platform:
        raise UsageError("the target names no python platform; pass --platform, e.g. manylinux_2_28_aarch64")
    if not isinstance(platform, str) or not _PLATFORM.fullmatch(platform):
        raise UsageError(f"python platform {platform!r} is not a wheel platform tag such as manylinux_2_28_aarch64")
    return platform


def check_python_version(version: str) -> str:
    if not isinstance(version, str) or not _PYTHON_VERSION.fullmatch(version):
        raise UsageError(f"python version {version!r} must look like 3.11")
    return version


def pip_download_argv(requirements: Path, dest: Path, platform: str, python_version: str,
                      python: str | None = None, no_deps: bool = False) -> list[str]:
    """The ``pip download`` command line for the target's binary wheels (an argument list): one
    ``--platform`` per tag of the board's platform family (``platform_family``)."""
    return [
        python or sys.executable, "-m", "pip", "download",
        "--only-binary=:all:",
        *platform_args(platform),
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
        glibc = glibc_of(platform)
        arch = platform.rsplit("_", 1)[-1] if glibc is not None else ""
        if glibc is not None and glibc < 28 and arch in ("aarch64", "x86_64"):
            hint = (f"recent numpy/onnxruntime/torch wheels need glibc 2.28: for a board with glibc >= 2.28 pass "
                    f"--platform manylinux_2_28_{arch}")
        else:
            hint = ("bundle without --wheels and install on the board from the index, or pin the release a wheel "
                    "exists for (choose another --python-version or format)")
        return EdgekitError(
            f"{what}: {detail}; the pinned release has no wheel for {family_text(platform)} (the versions listed "
            f"do); {hint}"
        )
    return EdgekitError(f"{what}: {detail}")
