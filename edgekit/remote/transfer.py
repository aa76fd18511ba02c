"""Put a bundle on the board once: re-use a copy whose SHA256SUMS matches, else copy it.

A bundle lives on the board at ``REMOTE_DIR/<target>-<variant>-<first 16 hex of the sha256 of
its SHA256SUMS>``: the name changes whenever any file does, so runs of different bundles never
overwrite each other. A copy counts as present only when its SHA256SUMS is the same file as
ours and ``sha256sum -c`` passes on the board. A copy is unpacked into a temporary folder,
checked there, then renamed into place.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from edgekit.bundle.layout import CHECKSUMS
from edgekit.bundle.tarball import stream_tar
from edgekit.errors import RemoteError
from edgekit.fileio import sha256_file
from edgekit.remote import scripts, ssh

PROBE_TIMEOUT_S = 60.0
TRANSFER_TIMEOUT_S = 1800.0


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


def probe(target: ssh.SshTarget, base: str, name: str, python: str) -> str | None:
    """Check the board (python, tools); returns the sha256 of its copy's SHA256SUMS if intact."""
    done = ssh.run(target, scripts.PROBE, [base, name, python], timeout_s=PROBE_TIMEOUT_S + target.connect_timeout_s)
    if done.timed_out:
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


def place(target: ssh.SshTarget, bundle: Path, info: dict, base: str, python: str, on_line=None) -> Placement:
    """Make sure the board holds ``bundle`` (re-used if intact, else copied); see the module doc."""
    name = remote_name(bundle, info)
    digest = sha256_file(bundle / CHECKSUMS)
    say = on_line or (lambda line: None)
    say(f"connecting to {target.display()}")
    if probe(target, base, name, python) == digest:
        placement = Placement(base, name, copied=False)
        say(f"re-using the bundle already on the board: {placement.path}")
        return placement
    placement = Placement(base, name, copied=True)
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    say(f"copying the bundle ({size / 1024:.0f} KB) to {target.display()}:{placement.path}")
    mtime = int(time.time())
    done = ssh.run(target, scripts.RECEIVE, [base, name], timeout_s=TRANSFER_TIMEOUT_S,
                   feed=lambda pipe: stream_tar(bundle, pipe, mtime), on_line=on_line)
    if done.timed_out:
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
