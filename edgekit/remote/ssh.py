"""The ssh command line (an argument list), running it, and one-line errors for its failures.

edgekit never builds a local shell string: ``ssh`` is started with an argument list. The one
string that is shell text is the remote command, which sshd hands to the remote user's shell:
it is ``sh -c SCRIPT edgekit ARG...`` with every word passed through ``shlex.quote``.
~/.ssh/config is honoured (nothing here overrides it except BatchMode=yes, and ConnectTimeout
unless the user sets one with --ssh-option).
"""

from __future__ import annotations

import collections
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Sequence

from edgekit.core.children import popen_kwargs
from edgekit.core.errors import InputFileError, RemoteError
from edgekit.remote.hosts import Host, check_port, parse_host, parse_ssh_option

SSH_FAILED = 255  # ssh's own exit status for connection and authentication failures
DEFAULT_CONNECT_TIMEOUT_S = 10
LineSink = Callable[[str], None]


@dataclass(frozen=True)
class SshTarget:
    """How to reach the board."""

    host: Host
    port: int | None = None
    identity: Path | None = None
    options: tuple[str, ...] = ()
    connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S

    @classmethod
    def make(cls, host: str | Host, port: int | None = None, identity: str | Path | None = None,
             options: Sequence[str] = (), connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S) -> "SshTarget":
        """Validate everything (UsageError/InputFileError) before any process starts."""
        parsed = host if isinstance(host, Host) else parse_host(host)
        check_port(port)
        key = None
        if identity is not None:
            key = Path(identity).expanduser()
            if not key.is_file():
                raise InputFileError(f"--identity {identity}: key file not found")
        return cls(parsed, port, key, tuple(parse_ssh_option(o) for o in options), int(connect_timeout_s))

    def argv(self, remote_command: str) -> list[str]:
        """``ssh [options] -- DESTINATION REMOTE_COMMAND`` as an argument list."""
        ssh = shutil.which("ssh")
        if ssh is None:
            raise RemoteError("the OpenSSH client (ssh) is not installed here; install it (apt-get install openssh-client)")
        argv = [ssh, "-T", "-x", "-a"]
        for option in self.options:  # before edgekit's own: for ssh the first value given wins
            argv += ["-o", option]
        argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}"]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.identity is not None:
            argv += ["-i", str(self.identity)]
        return argv + ["--", self.host.destination, remote_command]

    def display(self) -> str:
        return f"{self.host}" + (f" port {self.port}" if self.port else "")

    def ssh_words(self) -> list[str]:
        """``ssh [-p N] [-i KEY] DEST``: for commands shown to the user in messages."""
        words = ["ssh"]
        if self.port is not None:
            words += ["-p", str(self.port)]
        if self.identity is not None:
            words += ["-i", str(self.identity)]
        return words + [self.host.destination]


def command(script: str, *args: str) -> str:
    """The remote command line: ``sh -c SCRIPT edgekit ARG...``, every word shell-quoted."""
    return " ".join(shlex.quote(str(word)) for word in ("sh", "-c", script, "edgekit", *args))


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: tuple[str, ...]  # the last lines
    timed_out: bool


def run(target: SshTarget, script: str, args: Sequence[str], *, timeout_s: float,
        feed: Callable[[IO[bytes]], None] | None = None, on_line: LineSink | None = None) -> Completed:
    """Run ``script`` on the board. ``feed`` writes to the remote stdin (then it is closed);
    stderr lines go to ``on_line`` as they arrive. After ``timeout_s`` ssh is killed
    (``timed_out``); whatever runs on the board is the caller's to stop."""
    argv = target.argv(command(script, *args))
    out: list[bytes] = []
    err: collections.deque = collections.deque(maxlen=40)
    expired = threading.Event()

    def expire() -> None:
        if proc.poll() is None:
            expired.set()
            proc.kill()

    def pump_err() -> None:
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            err.append(line)
            if on_line is not None and line.strip():
                on_line(line)

    readers = [threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True),
               threading.Thread(target=pump_err, daemon=True)]
    watchdog = threading.Timer(timeout_s, expire)
    watchdog.daemon = True
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if feed else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen_kwargs())
    except OSError as exc:
        raise RemoteError(f"cannot start ssh: {exc}") from None
    try:  # from here on an interrupt (Ctrl-C, SIGTERM) must not leave ssh running
        for thread in (*readers, watchdog):
            thread.start()
        if feed is not None:
            try:
                feed(proc.stdin)
            except (BrokenPipeError, ConnectionResetError):
                pass  # ssh ended early (e.g. could not connect): its status and stderr say why
            finally:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        proc.wait()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for thread in readers:
            if thread.ident is not None:  # started
                thread.join(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
    stdout = b"".join(out).decode("utf-8", "replace")
    return Completed(proc.returncode, stdout, tuple(err), expired.is_set())


def connection_error(target: SshTarget, stderr: Sequence[str]) -> RemoteError:
    """ssh exited 255: one line naming the cause (unreachable, refused, auth, host key) and a fix."""
    text = "\n".join(stderr)
    host, dest = target.display(), target.host.destination
    port = target.port or 22
    if "Could not resolve hostname" in text:
        return RemoteError(f"cannot resolve host {target.host.address!r}: check the name, or add it to ~/.ssh/config")
    if "Connection refused" in text:
        return RemoteError(f"cannot connect to {target.host} port {port}: connection refused; "
                           "is sshd running on the board, and is --port right?")
    if any(s in text for s in ("Connection timed out", "Operation timed out", "timed out during banner exchange")):
        return RemoteError(f"cannot connect to {host}: connection timed out; is the board on and on this network?")
    if any(s in text for s in ("No route to host", "Network is unreachable")):
        return RemoteError(f"cannot reach {host}: no route to the host; check the address and the network")
    if any(s in text for s in ("Permission denied", "Too many authentication failures")):
        return RemoteError(f"authentication to {host} failed (key login only; edgekit never asks for a password): "
                           f"install your key with `ssh-copy-id {dest}` or pass --identity KEY")
    if "Host key verification failed" in text or "IDENTIFICATION HAS CHANGED" in text:
        return RemoteError(f"the host key of {host} is unknown or has changed: run `{shlex.join(target.ssh_words())} true` "
                           "once to check and accept it (or pass --ssh-option StrictHostKeyChecking=accept-new)")
    if any(s in text for s in ("Connection closed", "Connection reset", "kex_exchange_identification")):
        return RemoteError(f"{host} closed the connection before login; is it an SSH server, and does it allow you in?")
    last = next((line.strip() for line in reversed(stderr) if line.strip()), "no message")
    return RemoteError(f"ssh to {host} failed: {last}")
