"""The cached arm64 Debian rootfs: built once with debootstrap, reused by every later run.

Layout of the cache folder (default ``rootfs`` in ``edgekit.core.cache.cache_root()``: ``$EDGEKIT_CACHE_DIR``,
else ``$XDG_CACHE_HOME/edgekit``, else ``~/.cache/edgekit``)::

    bookworm-arm64-py3.11/              a complete rootfs, keyed by Debian release + its Python
        etc/edgekit-rootfs.json         how and when it was built
        opt/edgekit/venvs/<hash>/       venvs with bundles' requirements (see venv.py)
    .bookworm-arm64.lock                held while a run looks up or builds that release
    .bookworm-arm64.build-<pid>.tmp/    a build in progress; renamed into place only when complete

An interrupted build leaves only a ``.tmp`` folder, which lookups ignore and the next build
removes (after unmounting anything debootstrap left mounted in it).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from edgekit.emulate import EmulationError
from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.fileio import ensure_writable_dir, read_json, write_json
from edgekit.core.cache import cache_root
from edgekit.emulate.process import last_error, run_streamed

DEFAULT_RELEASE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
ARCH = "arm64"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
INFO_PATH = "etc/edgekit-rootfs.json"
INFO_SCHEMA = "edgekit.rootfs"
_RELEASE_RE = re.compile(r"^[a-z][a-z0-9-]{1,30}\Z")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Rootfs:
    path: Path
    release: str
    python: str  # "3.11"
    built: bool = False  # built by this run
    build_s: float | None = None  # seconds this run spent building it
    info: dict = field(default_factory=dict)


def default_cache_dir() -> Path:
    return cache_root() / "rootfs"


def check_release(release: str) -> str:
    if not _RELEASE_RE.match(release or ""):
        raise UsageError(f"--debian-release {release!r} is not a Debian release name such as bookworm or trixie")
    return release


def _prefix(release: str) -> str:
    return f"{release}-{ARCH}"


def find_rootfs(cache_dir: Path, release: str) -> Rootfs | None:
    """A complete cached rootfs for ``release`` (the newest, should there be several), or None."""
    found = []
    for path in Path(cache_dir).glob(f"{_prefix(release)}-py*"):
        info_file = path / INFO_PATH
        if not path.is_dir() or not info_file.is_file():
            continue
        try:  # bounded like every JSON edgekit reads: a damaged entry is skipped, never an error
            info = read_json(info_file, "rootfs description", max_bytes=1 << 20)
        except InputFileError:
            continue
        if info.get("schema") == INFO_SCHEMA and info.get("release") == release and (path / "usr/bin/python3").exists():
            found.append((info_file.stat().st_mtime, Rootfs(path, release, str(info.get("python", "")), info=info)))
    return max(found, key=lambda item: item[0])[1] if found else None


@contextlib.contextmanager
def locked(lock_path: Path, progress: Progress) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created if needed), waiting for another run that holds it."""
    with open(lock_path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another edgekit run that holds {lock_path}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_rootfs(
    cache_dir: Path,
    release: str,
    *,
    debootstrap: Path | None,
    mirror: str = DEFAULT_MIRROR,
    rebuild: bool = False,
    timeout_s: float = 1800.0,
    progress: Progress,
) -> Rootfs:
    """The cached rootfs for ``release``, built first when there is none (or ``rebuild``).

    ``debootstrap`` None means this host cannot build one (no binfmt): only a cached rootfs will do.
    """
    if Path(cache_dir).absolute() == default_cache_dir().absolute():
        from edgekit.core.cache import part_dir

        cache_dir = part_dir("rootfs").absolute()  # tagged as edgekit's (so `edgekit cache --clear` may remove it)
    else:
        cache_dir = ensure_writable_dir(cache_dir)  # the user's --rootfs-cache
    with locked(cache_dir / f".{_prefix(release)}.lock", progress):
        existing = find_rootfs(cache_dir, release)
        if existing is not None and not rebuild:
            progress(f"using the cached rootfs {existing.path}")
            return existing
        if debootstrap is None:
            raise EmulationError(f"no cached {release} arm64 rootfs in {cache_dir}, and building one needs binfmt_misc")
        for stale in cache_dir.glob(f".{_prefix(release)}.build-*.tmp"):
            progress(f"removing an interrupted build: {stale}")
            remove_tree(stale)
        work = cache_dir / f".{_prefix(release)}.build-{os.getpid()}.tmp"
        argv = [str(debootstrap), f"--arch={ARCH}", "--variant=minbase", f"--include={','.join(PACKAGES)}",
                release, str(work), mirror]
        progress(f"building a {release} {ARCH} rootfs with debootstrap (takes minutes; cached for later runs)")
        started = time.monotonic()
        try:
            done = run_streamed(argv, what="debootstrap", timeout_s=timeout_s, on_line=_Condensed(progress))
            if done.returncode != 0:
                reason = last_error(done.tail) or f"exit status {done.returncode}"
                raise EmulationError(f"debootstrap of {release} {ARCH} failed: {reason}")
            python = _python_version(work)
            build_s = time.monotonic() - started
            info = {
                "schema": INFO_SCHEMA, "release": release, "arch": ARCH, "python": python,
                "packages": list(PACKAGES), "mirror": mirror, "build_s": round(build_s, 1),
                "built": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            }
            write_json(work / INFO_PATH, info)
            final = cache_dir / f"{_prefix(release)}-py{python}"
            _swap_in(work, final)
        finally:
            if work.exists():
                remove_tree(work)
        progress(f"rootfs ready in {build_s:.0f} s: {final}")
        return Rootfs(final, release, python, built=True, build_s=build_s, info=info)


def _python_version(root: Path) -> str:
    link = root / "usr/bin/python3"
    with contextlib.suppress(OSError):
        match = re.fullmatch(r"python(\d+\.\d+)", os.readlink(link))
        if match:
            return match.group(1)
    versions = sorted(p.name[len("python"):] for p in (root / "usr/lib").glob("python3.*") if p.is_dir())
    if not versions:
        raise EmulationError(f"debootstrap finished but {root} holds no python3")
    return versions[-1]


def _swap_in(work: Path, final: Path) -> None:
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(work, final)
        remove_tree(old)
    else:
        os.replace(work, final)


# ---------------------------------------------------------------------------------------------
# Removing a rootfs safely: never follow a bind mount out of it


def _unescape(field_text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_text)


def mounts_below(path: Path) -> list[str]:
    """Mount points at or under ``path``, deepest first."""
    root = os.path.realpath(path)
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            parts = line.split()
            if len(parts) > 4:
                point = _unescape(parts[4])
                if point == root or point.startswith(root + "/"):
                    found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def remove_tree(path: Path) -> None:
    """Remove a (partial) rootfs, lazily unmounting whatever is still mounted inside it first."""
    for point in mounts_below(path):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    left = mounts_below(path)
    if left:
        raise EmulationError(f"{left[0]} is still mounted; unmount it, then remove {path} by hand")
    shutil.rmtree(path, ignore_errors=True)


class _Condensed:
    """debootstrap prints a line per package and step; pass on each step's first and every 25th package."""

    STEPS = ("Retrieving", "Validating", "Extracting", "Unpacking", "Configuring")

    def __init__(self, progress: Progress):
        self.progress = progress
        self.counts: dict[str, int] = {}

    def __call__(self, line: str) -> None:
        words = line.split()
        step = words[1] if len(words) == 3 and words[0] == "I:" else ""  # "I: Unpacking bash..."
        if step not in self.STEPS:
            self.progress(f"debootstrap: {line}")
            return
        count = self.counts[step] = self.counts.get(step, 0) + 1
        if count == 1 or count % 25 == 0:
            self.progress(f"debootstrap: {step} packages ({count}: {words[2].rstrip('.')})")
