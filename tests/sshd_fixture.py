"""A real, throw-away OpenSSH server on 127.0.0.1 for the remote (SSH) tests.

``start_sshd(folder)`` runs Debian's ``/usr/sbin/sshd -D -e -f folder/sshd_config`` as a child
process (never a daemon) on a free port, with its own host key, a client key allowed to log in
as the current user, and a client-side known_hosts file in ``folder``. Nothing outside
``folder`` is written except ``/run/sshd`` (sshd's privilege-separation folder, created when
missing). The "board" is this machine; the remote python is ``sys.executable``.

Use the ``sshd`` fixture (module scope) from a test module::

    from sshd_fixture import sshd  # noqa: F401  (pytest finds the fixture by name)
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")
START_TIMEOUT_S = 20.0


@dataclass
class SshServer:
    """A running sshd and what a client needs to reach it."""

    folder: Path
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    process: subprocess.Popen
    log: Path
    ssh_options: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"{self.user}@127.0.0.1"

    def cli_args(self, key: Path | None = None) -> list[str]:
        """``edgekit bench`` options that reach this server (port, key, isolated known_hosts)."""
        args = ["--host", self.host, "--port", str(self.port), "--identity", str(key or self.client_key)]
        for option in self.ssh_options:
            args += ["--ssh-option", option]
        return args

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def procs_with(marker: str) -> list[str]:
    """Like ``pgrep -af MARKER``: command lines holding ``marker`` (read from /proc, so procps
    need not be installed); the remote "board" is this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:  # the process ended while we looked
            continue
        if marker in cmdline:
            found.append(f"{entry.name} {cmdline}")
    return found


def missing_tools() -> str | None:
    """Why the sshd tests cannot run here, or None."""
    if not SSHD.is_file():
        return f"{SSHD} is missing (apt-get install -y openssh-server)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (apt-get install -y openssh-client)"
    return None


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edgekit-test", "-f", str(path)],
                   check=True, capture_output=True)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if the test process dies without its teardown (Linux)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _config(folder: Path, port: int, host_key: Path) -> str:
    return "\n".join([
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {host_key}",
        f"PidFile {folder / 'sshd.pid'}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}",
        "StrictModes no",
        "UsePAM no",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "AuthenticationMethods publickey",
        "X11Forwarding no",
        "AllowTcpForwarding no",
        "AllowAgentForwarding no",
        "PermitTunnel no",
        "PrintMotd no",
        "PrintLastLog no",
        "UseDNS no",
        "MaxStartups 50",
        "LogLevel INFO",
        "",
    ])


def _wait_ready(proc: subprocess.Popen, port: int, log: Path) -> bool:
    """True once the server greets with an SSH banner; False if it exited."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not answer on port {port} within {START_TIMEOUT_S:g} s; log: {log.read_text()}")


def start_sshd(folder: Path) -> SshServer:
    """Start sshd on a free 127.0.0.1 port with throw-away keys kept in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    host_key = keygen(folder / "host_ed25519")
    client_key = keygen(folder / "client_ed25519")
    shutil.copyfile(f"{client_key}.pub", folder / "authorized_keys")
    known_hosts = folder / "known_hosts"
    options = [
        f"UserKnownHostsFile={known_hosts}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=accept-new",
        "IdentitiesOnly=yes",
        "LogLevel=ERROR",
    ]
    # A client config too, for anyone poking at the server by hand: ssh -F folder/ssh_config ...
    (folder / "ssh_config").write_text(
        "Host *\n" + "".join(f"  {o.replace('=', ' ', 1)}\n" for o in options) + f"  IdentityFile {client_key}\n"
    )
    log = folder / "sshd.log"
    last_error = ""
    for _ in range(5):  # the free port can be taken between the probe and sshd's bind
        port = free_port()
        (folder / "sshd_config").write_text(_config(folder, port, host_key))
        with open(log, "wb") as log_fh:
            proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(folder / "sshd_config")],
                                    stdin=subprocess.DEVNULL, stdout=log_fh, stderr=subprocess.STDOUT,
                                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                                    preexec_fn=_die_with_parent)
        if _wait_ready(proc, port, log):
            return SshServer(folder, port, getpass.getuser(), client_key, known_hosts, proc, log, options)
        last_error = log.read_text(errors="replace")
        proc.wait()
        if "Address already in use" not in last_error:
            break
    raise RuntimeError(f"sshd would not start: {last_error.strip()}")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """A running sshd for this test module; skipped when OpenSSH is not installed."""
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.stop()


def fake_ssh(tmp_path: Path, monkeypatch) -> Path:
    """An ``ssh`` first on PATH that records each start and fails like an unreachable host."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "ssh-started"
    fake = bin_dir / "ssh"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {shlex.quote(str(marker))}\n'
                    'echo "ssh: connect to host x port 22: Connection refused" >&2\nexit 255\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return marker
