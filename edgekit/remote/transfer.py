"""Put a bundle on the board once: re-use a copy whose SHA256SUMS matches, else copy it.

A bundle lives on the board at ``REMOTE_DIR/<target>-<variant>-<first 16 hex of the sha256 of
its SHA256SUMS>``: the name changes whenever any file does, so runs of different bundles never
overwrite each other. A copy counts as present only when its SHA256SUMS is the same file as
ours and ``sha256sum -c`` passes on the board. A copy is unpacked into a temporary folder,
checked there, then renamed into place.

Only what SHA256SUMS lists (and SHA256SUMS) is sent, each opened without following a link and
checked to be a plain file before a byte is read: a FIFO would block the copy forever, a link
would send a file from outside the bundle. With a ``Deadline`` (``--timeout``) the probe and the
copy get only the time left of it.
"""

from __future__ import annotations

import os
import re
import stat
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Sequence

from edgekit.bundle.layout import CHECKSUMS
from edgekit.core.errors import InputFileError, RemoteError
from edgekit.core.fileio import sha256_file
from edgekit.remote import scripts, ssh
from edgekit.bundle.verify import plain_files, read_checksums

PROBE_TIMEOUT_S = 60.0
TRANSFER_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Deadline:
    """``seconds`` (the user's --timeout) from ``start`` (a time.monotonic() value) for a whole
    remote run on the board ``where``: the probe, the copy and the runner share it."""

    seconds: float
    start: float
    where: str

    @classmethod
    def after(cls, seconds: float, where: str) -> "Deadline":
        return cls(float(seconds), time.monotonic(), where)

    def left(self) -> float:
        return self.start + self.seconds - time.monotonic()

    def expired(self) -> RemoteError:
        """The one message for a run stopped by --timeout, whichever step it was in."""
        return RemoteError(f"the benchmark on {self.where} did not finish within {self.seconds:g} s; it was stopped "
                           "(raise --timeout, or lower --min-time/--min-runs)")


def _budget(deadline: Deadline | None, cap: float) -> float:
    """Seconds a step may take: ``cap``, or less when the deadline comes first."""
    if deadline is None:
        return cap
    left = deadline.left()
    if left <= 0:
        raise deadline.expired()
    return min(cap, left)


@dataclass(frozen=True)
class Placement:
    """Where the bundle is on the board, and whether this call copied it."""

    base: str  # the remote folder as the user gave it (~/.cache/edgekit)
    name: str  # the bundle's folder in it
    copied: bool

    @property
    def path(self) -> str:
        return f"{self.base.rstrip('/')}/{self.name}" if self.base.rstrip("/") else f"/{self.name}"


def remote_name(bundle: Path, info: dict) -> str:
    """``rpi4-int8-static-onnx-0123456789abcdef``: readable, and unique to the bundle's content."""
    label = f"{info.get('target', 'bundle')}-{info.get('variant') or info.get('format', 'model')}"
    label = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._-")[:60] or "bundle"
    return f"{label}-{sha256_file(bundle / CHECKSUMS)[:16]}"


def probe(target: ssh.SshTarget, base: str, name: str, python: str, deadline: Deadline | None = None) -> str | None:
    """Check the board (python, tools); returns the sha256 of its copy's SHA256SUMS if intact."""
    cap = PROBE_TIMEOUT_S + target.connect_timeout_s
    limit = _budget(deadline, cap)
    done = ssh.run(target, scripts.PROBE, [base, name, python], timeout_s=limit)
    if done.timed_out:
        if limit < cap:
            raise deadline.expired()
        raise RemoteError(f"{target.display()} did not answer within {PROBE_TIMEOUT_S:g} s")
    if done.returncode == ssh.SSH_FAILED:
        raise ssh.connection_error(target, done.stderr)
    markers = [line for line in done.stdout.splitlines() if line.startswith("edgekit:")]
    if done.returncode != 0 or not markers:
        last = next((line for line in reversed(done.stderr) if line.strip()), f"exit status {done.returncode}")
        raise RemoteError(f"cannot prepare {target.display()} for the benchmark: {last.strip()}")
    word, _, rest = markers[-1].partition(" ")
    if word == "edgekit:no-python":
        raise python_missing(target, python)
    if word == "edgekit:no-tool":
        raise RemoteError(f"{rest.strip()} is not installed on {target.display()}; edgekit needs sh, timeout, "
                          "sha256sum, tar, mktemp and grep there (coreutils, tar, grep)")
    if word == "edgekit:have":
        return rest.split()[0] if rest.split() else None
    return None


def python_missing(target: ssh.SshTarget, python: str) -> RemoteError:
    return RemoteError(f"python {python!r} not found on {target.display()}; install python3 there "
                       "(sudo apt install python3) or pass --remote-python PATH")


def place(target: ssh.SshTarget, bundle: Path, info: dict, base: str, python: str, on_line=None,
          deadline: Deadline | None = None) -> Placement:
    """Make sure the board holds ``bundle`` (re-used if intact, else copied); see the module doc.

    The bundle is checked first (no link or special file anywhere, every file SHA256SUMS lists
    present: InputFileError) so that nothing is started on the board for a bundle that cannot be
    sent whole; the board checks the hashes (``sha256sum -c``) of what arrives."""
    present = set(plain_files(bundle))
    files = [*read_checksums(bundle), CHECKSUMS]
    missing = next((rel for rel in files if rel not in present), None)
    if missing is not None:
        raise InputFileError(f"bundle file missing: {bundle / missing} (listed in {CHECKSUMS})")
    name = remote_name(bundle, info)
    digest = sha256_file(bundle / CHECKSUMS)
    say = on_line or (lambda line: None)
    say(f"connecting to {target.display()}")
    if probe(target, base, name, python, deadline) == digest:
        placement = Placement(base, name, copied=False)
        say(f"re-using the bundle already on the board: {placement.path}")
        return placement
    placement = Placement(base, name, copied=True)
    size = sum(os.lstat(bundle / rel).st_size for rel in files)
    limit = _budget(deadline, TRANSFER_TIMEOUT_S)
    say(f"copying the bundle ({size / 1024:.0f} KB) to {target.display()}:{placement.path}")
    mtime = int(time.time())
    done = ssh.run(target, scripts.RECEIVE, [base, name], timeout_s=limit,
                   feed=lambda pipe: stream_files(bundle, files, pipe, mtime), on_line=on_line)
    if done.timed_out:
        if limit < TRANSFER_TIMEOUT_S:
            say("copying the bundle was stopped: --timeout ran out")
            raise deadline.expired()
        raise RemoteError(f"copying the bundle to {target.display()} took over {TRANSFER_TIMEOUT_S:g} s; check the link")
    if done.returncode == ssh.SSH_FAILED:
        raise ssh.connection_error(target, done.stderr)
    if done.returncode == scripts.EXIT_BAD_COPY:
        raise RemoteError(f"the bundle arrived damaged on {target.display()} (tar or sha256sum -c failed there); "
                          "check free space on the board and try again")
    if done.returncode != 0 or "edgekit:stored" not in done.stdout:
        last = next((line for line in reversed(done.stderr) if line.strip()), f"exit status {done.returncode}")
        raise RemoteError(f"cannot store the bundle in {base!r} on {target.display()}: {last.strip()}")
    return placement


def stream_files(folder: Path, files: Sequence[str], out: IO[bytes], mtime: int = 0) -> None:
    """Write ``files`` (POSIX paths relative to ``folder``) as an uncompressed tar stream: their
    folders 0755, files 0755 when executable here else 0644, no owners. Each file is opened without
    following a link and without blocking, and must be a plain file (InputFileError)."""
    made: set[str] = set()
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for rel in sorted(files, key=lambda r: r.split("/")):
            parts = rel.split("/")
            for depth in range(1, len(parts)):
                parent = "/".join(parts[:depth])
                if parent not in made:
                    made.add(parent)
                    tar.addfile(_member(parent, tarfile.DIRTYPE, 0o755, mtime))
            with _open_plain(folder / rel) as fh:
                facts = os.fstat(fh.fileno())
                member = _member(rel, tarfile.REGTYPE, 0o755 if facts.st_mode & 0o111 else 0o644, mtime)
                member.size = facts.st_size
                try:
                    tar.addfile(member, fh)
                except (BrokenPipeError, ConnectionResetError):
                    raise  # ssh ended: its status says why
                except OSError as exc:  # e.g. the file shrank while it was sent
                    raise InputFileError(f"cannot send the bundle file {folder / rel}: {exc} (changed during the copy?)") from None


def _open_plain(path: Path) -> IO[bytes]:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise InputFileError(f"cannot read the bundle file {path}: {exc.strerror} (a link or a changed bundle?)") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputFileError(f"{path} is not a plain file (a FIFO, device or socket); a bundle holds plain files only")
    return os.fdopen(fd, "rb")


def _member(name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
