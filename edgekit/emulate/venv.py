"""A venv inside the rootfs holding a bundle's requirements, built once per requirements hash.

``python3 -m venv --without-pip`` makes the venv; Debian's own pip wheel
(``/usr/share/python-wheels/pip-*.whl``, from python3-venv) installs into it, run as
``venv/bin/python pip.whl/pip install``. pip works in one process there, so this also runs
with an explicit qemu interpreter (no binfmt). Only binary wheels are accepted: compiling an
sdist under emulation would take hours. The requirements come from the bundle's wheels/
(offline) when it has them, else from the package index (the network is needed then).

A venv counts as built only once ``edgekit-venv.json`` is written into it, last; a folder
without it is an interrupted install and is removed before the next try.

Before an install from an index, this host checks in seconds that those indexes answer and hold
every pin for the board as a CPU build (``index_check``): an unreachable index or a CUDA-only
torch is one line naming the flag that fixes it, not minutes of emulated pip and gigabytes. The
venvs are bounded: the least recently used go beyond a count or a size (``venv_cache``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from edgekit.emulate import EmulationError
from edgekit.emulate.chroot import NOISE, Launcher
from edgekit.core.venv_cache import MARKER, VENVS_DIR  # re-exported: where the venvs live
from edgekit.core.errors import UsageError
from edgekit.core.fileio import write_json
from edgekit.bundle.requirements import INDEX_URL, format_indexes, parse_requirements, NETWORK_SIGNS
from edgekit.core import venv_cache
from edgekit.emulate.index_check import host_ca_bundle
from edgekit.emulate.process import last_error, run_streamed
from edgekit.emulate.rootfs import locked

HOST_CA = "/etc/edgekit/host-ca.crt"
PIP_WHEELS = "usr/share/python-wheels"
_FORWARDED = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "PIP_DEFAULT_TIMEOUT")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Venv:
    path: str  # inside the rootfs
    key: str
    source: str  # "wheels" (the bundle's, offline) | "index"
    built: bool = False  # by this run
    seconds: float = 0.0
    packages: dict[str, str] = field(default_factory=dict)
    evicted: tuple[str, ...] = ()  # what the cache bound removed when this one was made ready (progress lines)

    @property
    def python(self) -> str:
        return f"{self.path}/bin/python"


def requirements_key(requirements: str, wheels: Sequence[Path], python: str, no_deps: bool = False,
                     with_deps: Sequence[str] = ()) -> str:
    """A hash of what the venv holds: the requirement lines, the wheel files, the Python version."""
    mode = f"no-deps except {','.join(with_deps)}" if no_deps else ""
    digest = hashlib.sha256(f"python {python}\n{mode}".encode())
    for line in requirements.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            digest.update(f"req {line}\n".encode())
    for wheel in sorted(wheels, key=lambda p: p.name):
        digest.update(f"wheel {wheel.name} {hashlib.sha256(wheel.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()[:16]


def ensure_venv(
    launcher: Launcher,
    requirements: str,
    wheels: Sequence[Path],
    python: str,
    *,
    timeout_s: float,
    progress: Progress,
    no_deps: bool = False,
    with_deps: Sequence[str] = (),
    index_flag: bool = False,
) -> Venv:
    """The venv for these requirements in ``launcher``'s rootfs, created and filled when missing.

    ``no_deps``: install exactly the pinned list (a bundle whose runtime declares build-time
    dependencies a board does not need; ``formats.Board.no_deps``), except the
    distributions in ``with_deps``, installed first with theirs. ``index_flag``: the
    requirements' index is the user's ``--index-url`` (errors name it so). The venv is held in use
    until ``venv_cache.release_all()``; the cache bound may remove older ones (``Venv.evicted``)."""
    # pip runs as root in the rootfs: only name==version pins and plain index lines reach it
    parse_requirements(requirements, "the requirements to install")
    venv_cache.limits()  # a bad EDGEKIT_EMULATE_MAX_VENVS* is a usage error before minutes of work
    key = requirements_key(requirements, wheels, python, no_deps, with_deps)
    venvs = launcher.host_path(VENVS_DIR)
    venvs.mkdir(parents=True, exist_ok=True)
    with locked(venvs / f".{key}.lock", progress):
        venv_cache.hold(launcher.rootfs, key)
        venv = _ensure(launcher, key, requirements, wheels, python, timeout_s=timeout_s, progress=progress,
                       no_deps=no_deps, with_deps=tuple(with_deps), index_flag=index_flag)
        venv_cache.mark_used(launcher.host_path(venv.path))
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        progress(line)

    venv_cache.evict(launcher.rootfs, keep=key, progress=say)
    return replace(venv, evicted=tuple(lines))


def _ensure(launcher, key, requirements, wheels, python, *, timeout_s, progress, no_deps=False,
            with_deps=(), index_flag=False) -> Venv:
    source = "wheels" if wheels else "index"
    inside = f"{VENVS_DIR}/{key}"
    host_dir = launcher.host_path(inside)
    marker = host_dir / MARKER
    if marker.is_file():
        progress(f"using the cached venv {inside} (requirements hash {key})")
        return Venv(inside, key, source, packages=_read_marker(marker).get("packages", {}))
    if host_dir.exists():
        progress(f"removing an interrupted venv {inside}")
        shutil.rmtree(host_dir)
    pip_wheel = _pip_wheel(launcher)
    if not wheels:  # from an index: ask it here first, in seconds (index_check)
        from edgekit.emulate.index_check import check_indexes

        platform = board_platform(launcher.rootfs)
        progress(f"checking that the package index has every pin for {platform} / Python {python} (on this host)")
        check_indexes(requirements, platform, python, replaced=index_flag)
    started = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix="edgekit-req-", dir=launcher.host_path("/tmp")))
    try:
        (staging / "requirements.txt").write_text(requirements, encoding="utf-8")
        stage_inside = "/" + staging.relative_to(launcher.rootfs).as_posix()
        common = ["--no-cache-dir", "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
                  "--only-binary=:all:"]
        if wheels:
            (staging / "wheels").mkdir()
            for wheel in wheels:
                shutil.copyfile(wheel, staging / "wheels" / wheel.name)
            common += ["--no-index", "--find-links", f"{stage_inside}/wheels"]
        pip_args = [*common, *(["--no-deps"] if no_deps else []), "-r", f"{stage_inside}/requirements.txt"]
        (staging / "tmp").mkdir()  # pip's scratch space: removed with the staging folder, even after a kill
        env = launcher.env({**(_network_env(launcher) if not wheels else {}), "TMPDIR": f"{stage_inside}/tmp"})
        progress(f"creating a venv for the bundle's requirements ({'bundle wheels' if wheels else 'package index'})")
        first = _first_with_deps(requirements, with_deps) if no_deps else []
        if first:
            (staging / "first.txt").write_text("".join(f"{line}\n" for line in first), encoding="utf-8")
        steps = (
            ("python3 -m venv", ["/usr/bin/python3", "-m", "venv", "--without-pip", inside]),
            *([("pip install (with dependencies)", [f"{inside}/bin/python", pip_wheel, "install", *common,
                                                   "-r", f"{stage_inside}/first.txt"])] if first else []),
            ("pip install", [f"{inside}/bin/python", pip_wheel, "install", *pip_args]),
        )
        for what, command in steps:
            done = run_streamed(launcher.argv(command), what=f"{what} (emulated)", timeout_s=timeout_s, env=env,
                                on_line=lambda line: _pip_line(line, progress))
            if done.returncode != 0:
                raise install_error(what, done.tail, done.returncode, bool(wheels))
        packages = _installed(host_dir)
        seconds = time.monotonic() - started
        from edgekit.core.venv_cache import now, tree_bytes

        created = now()
        write_json(marker, {
            "key": key, "python": python, "source": source, "requirements": requirements,
            "wheels": [w.name for w in wheels], "packages": packages, "seconds": round(seconds, 1),
            "created": created, "used": created, "bytes": tree_bytes(host_dir),
        })
    except BaseException:
        shutil.rmtree(host_dir, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress(f"venv ready in {seconds:.0f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(packages.items())))
    return Venv(inside, key, source, built=True, seconds=seconds, packages=packages)


def install_error(what: str, tail, returncode: int, offline: bool) -> EmulationError:
    """One line for a failed pip step in the rootfs: its cause, not pip's last words. An index
    that did not answer makes pip end with "No matching distribution found for numpy==..." though
    nothing is wrong with numpy: say that the index was not reachable from the rootfs."""
    reason = last_error(tail, NOISE) or f"exit status {returncode}"
    text = "\n".join(tail)
    if not offline and any(sign in text for sign in NETWORK_SIGNS):
        hosts = sorted(set(re.findall(r"(?:host='|resolve ')([A-Za-z0-9.-]+)'", text)))
        where = f" ({', '.join(hosts)})" if hosts else ""
        return EmulationError(
            f"installing the bundle's requirements in the emulated rootfs failed ({what}): the package index{where} "
            f"was not reachable from the rootfs (it uses this host's DNS and proxy settings), so pip said: {reason}; "
            "pass --index-url URL of a reachable index, or verify a bundle made with --wheels")
    looked = re.search(r"Looking in indexes: (\S+(?:, \S+)*)", text)  # pip names no index when it is PyPI alone
    if not offline and "(from versions: none)" in text:
        return EmulationError(
            f"installing the bundle's requirements in the emulated rootfs failed ({what}): {reason}: "
            f"{looked.group(1) if looked else 'https://pypi.org/simple'} "
            "listed no version of it for this board (no aarch64 wheel for its Python, or the index did not answer); "
            "pass --index-url URL of an index that has it, or verify a bundle made with --wheels")
    return EmulationError(f"installing the bundle's requirements in the emulated rootfs failed ({what}): {reason}")


def board_platform(rootfs: Path) -> str:
    """The newest manylinux tag the rootfs's pip accepts (its glibc: Debian's libc6 package)."""
    status = Path(rootfs) / "var/lib/dpkg/status"
    try:
        with open(status, encoding="utf-8", errors="replace") as fh:
            text = fh.read(64 << 20)
    except OSError:
        text = ""
    found = re.search(r"^Package: libc6\n(?:[^\n]+\n)*?Version: 2\.(\d{1,2})", text, re.M)
    return f"manylinux_2_{found.group(1) if found else 28}_aarch64"


def _first_with_deps(requirements: str, names: Sequence[str]) -> list[str]:
    """The index options and the pins of ``names`` from ``requirements`` (installed with their dependencies)."""
    import re

    wanted = {name.lower().replace("_", "-") for name in names}
    out, pins = [], []
    for line in requirements.splitlines():
        text = line.split("#", 1)[0].strip()
        if text.startswith(("--index-url", "-i ", "--extra-index-url")):
            out.append(text)
        found = re.match(r"^([A-Za-z0-9._-]+)\s*==", text)
        if found and found.group(1).lower().replace("_", "-") in wanted:
            pins.append(text)
    return out + pins if pins else []


def with_index_url(requirements: str, index_url: str) -> tuple[str, str | None]:
    """``requirements`` installing from ``index_url``: (new text, the index URL it replaced, if any).

    The text is checked line by line first (``edgekit.bundle.requirements.parse_requirements``):
    a pip option of the bundle's own in any spelling (``--index-url=X``, ``-i X``, ``-f``...)
    is an InputFileError, never carried over. What is kept (pins, comments, edgekit's
    ``--extra-index-url``) has passed that check."""
    if not isinstance(index_url, str) or not INDEX_URL.fullmatch(index_url):
        raise UsageError(f"--index-url must be an http(s) URL of plain characters (no quotes, spaces, "
                         f"backslashes or ${{...}}), got {index_url!r}")
    checked = parse_requirements(requirements, "the bundle's requirements.txt", format_indexes())
    kept = [line for line in requirements.splitlines() if line.split()[:1] != ["--index-url"]]
    return "".join(f"{line}\n" for line in [f"--index-url {index_url}", *kept]), checked.index_url


def _pip_wheel(launcher: Launcher) -> str:
    found = sorted(launcher.host_path(PIP_WHEELS).glob("pip-*.whl"))
    if not found:
        raise EmulationError(f"the rootfs {launcher.rootfs} has no pip wheel in /{PIP_WHEELS} (is python3-venv installed?); rebuild it with --rebuild")
    return f"/{PIP_WHEELS}/{found[-1].name}/pip"


def _network_env(launcher: Launcher) -> dict[str, str]:
    """What pip inside needs to reach the index as the host does: DNS, the host's CA bundle, proxies."""
    resolv = Path("/etc/resolv.conf")
    if resolv.is_file():
        dest = launcher.host_path("/etc/resolv.conf")
        if dest.is_symlink():
            dest.unlink()
        shutil.copyfile(resolv, dest)
    env = {name: os.environ[name] for name in _FORWARDED if os.environ.get(name)}
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        urls = [u for u in os.environ.get(name, "").split() if u.startswith(("http://", "https://"))]
        if urls:
            env[name] = " ".join(urls)

    ca = host_ca_bundle()
    if ca is not None:
        dest = launcher.host_path(HOST_CA)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ca, dest)
        env["PIP_CERT"] = HOST_CA
    return env


def _pip_line(line: str, progress: Progress) -> None:
    if any(marker in line for marker in NOISE):
        return
    if line.lstrip().startswith(("Collecting", "Downloading", "Processing", "Installing", "Successfully", "ERROR", "WARNING")):
        progress(f"pip: {line.strip()}")


def _installed(venv_dir: Path) -> dict[str, str]:
    packages = {}
    for info in venv_dir.glob("lib/python3*/site-packages/*.dist-info"):
        match = re.fullmatch(r"(.+)-([^-]+)\.dist-info", info.name)
        if match:
            packages[match.group(1).lower().replace("_", "-")] = match.group(2)
    return dict(sorted(packages.items()))


def _read_marker(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}
