"""A venv inside the rootfs holding a bundle's requirements, built once per requirements hash.

``python3 -m venv --without-pip`` makes the venv; Debian's own pip wheel
(``/usr/share/python-wheels/pip-*.whl``, from python3-venv) installs into it, run as
``venv/bin/python pip.whl/pip install``. pip works in one process there, so this also runs
with an explicit qemu interpreter (no binfmt). Only binary wheels are accepted: compiling an
sdist under emulation would take hours. The requirements come from the bundle's wheels/
(offline) when it has them, else from the package index (the network is needed then).

A venv counts as built only once ``edgekit-venv.json`` is written into it, last; a folder
without it is an interrupted install and is removed before the next try.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from edgekit.emulate import EmulationError
from edgekit.emulate.chroot import NOISE, Launcher
from edgekit.errors import UsageError
from edgekit.fileio import write_json

VENVS_DIR = "/opt/edgekit/venvs"
MARKER = "edgekit-venv.json"
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
) -> Venv:
    """The venv for these requirements in ``launcher``'s rootfs, created and filled when missing.

    ``no_deps``: install exactly the pinned list (a bundle whose runtime declares build-time
    dependencies a board does not need; ``formats.Format.board_no_deps``), except the
    distributions in ``with_deps``, installed first with theirs."""
    from edgekit.emulate.rootfs import locked

    key = requirements_key(requirements, wheels, python, no_deps, with_deps)
    venvs = launcher.host_path(VENVS_DIR)
    venvs.mkdir(parents=True, exist_ok=True)
    with locked(venvs / f".{key}.lock", progress):
        return _ensure(launcher, key, requirements, wheels, python, timeout_s=timeout_s, progress=progress,
                       no_deps=no_deps, with_deps=tuple(with_deps))


def _ensure(launcher, key, requirements, wheels, python, *, timeout_s, progress, no_deps=False,
            with_deps=()) -> Venv:
    from edgekit.emulate.process import last_error, run_streamed

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
                reason = last_error(done.tail, NOISE) or f"exit status {done.returncode}"
                raise EmulationError(f"installing the bundle's requirements in the emulated rootfs failed ({what}): {reason}")
        packages = _installed(host_dir)
        seconds = time.monotonic() - started
        write_json(marker, {
            "key": key, "python": python, "source": source, "requirements": requirements,
            "wheels": [w.name for w in wheels], "packages": packages, "seconds": round(seconds, 1),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        })
    except BaseException:
        shutil.rmtree(host_dir, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress(f"venv ready in {seconds:.0f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(packages.items())))
    return Venv(inside, key, source, built=True, seconds=seconds, packages=packages)


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
    """``requirements`` installing from ``index_url``: (new text, the index URL it replaced, if any)."""
    if not re.fullmatch(r"https?://[^\s'\"]+", index_url):
        raise UsageError(f"--index-url must be an http(s) URL, got {index_url!r}")
    replaced = None
    lines = []
    for line in requirements.splitlines():
        words = line.split()
        if words[:1] in (["--index-url"], ["-i"]):
            replaced = words[1] if len(words) > 1 else None
            continue
        lines.append(line)
    return "".join(f"{line}\n" for line in [f"--index-url {index_url}", *lines]), replaced


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
    ca = _host_ca_bundle()
    if ca is not None:
        dest = launcher.host_path(HOST_CA)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ca, dest)
        env["PIP_CERT"] = HOST_CA
    return env


def _host_ca_bundle() -> Path | None:
    """The CA bundle this host trusts (it may hold a proxy's or a company's CA the rootfs lacks)."""
    paths = ssl.get_default_verify_paths()
    candidates = [os.environ.get(n) for n in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")]
    candidates += [paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


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
