"""Remote input validation and command construction: host strings, ssh options, quoting, scripts.

No sshd needed: bad input must be refused before any ssh process starts (a fake ``ssh`` first on
PATH records whether one was started), and the quoting is checked by real shells.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.core.errors import UsageError
from edgekit.remote import scripts
from edgekit.remote.hosts import check_remote_path, parse_host, parse_ssh_option
from edgekit.remote.ssh import SshTarget, command
from sshd_fixture import fake_ssh

runner = CliRunner()

GOOD_HOSTS = {
    "pi@raspberrypi.local": ("pi", "raspberrypi.local"),
    "raspberrypi": (None, "raspberrypi"),
    "10.0.0.7": (None, "10.0.0.7"),
    "root@192.168.1.20": ("root", "192.168.1.20"),
    "pi@[::1]": ("pi", "::1"),
    "[fe80::1%eth0]": (None, "fe80::1%eth0"),
    "first.last@board-1.lan": ("first.last", "board-1.lan"),
    "pi@my_pi": ("pi", "my_pi"),
}
BAD_HOSTS = [
    "", "pi@host;id", "host;rm -rf ~", "pi@$(id)", "`id`", "pi@host name", "pi@ host", "-oProxyCommand=touch x",
    "pi@-oProxyCommand=x", "-p22", "host:22", "pi@host|cat", "pi@host&", "pi@host>x", "pi@*", "pi@@host", "pi@",
    "@host", "host\n", "host\tx", "[::1", "[zz::1]", "pi;x@host", "999.1.1.1", "1.2.3", "-host", "host.-x",
    "pi@host.", "a" * 300, "pi@[::1%e th0]", "ho'st", 'ho"st', "ho\\st", "pi@host/x",
]


@pytest.mark.parametrize("text", sorted(GOOD_HOSTS))
def test_good_hosts(text):
    host = parse_host(text)
    assert (host.user, host.address) == GOOD_HOSTS[text]
    assert not host.destination.startswith("-")


@pytest.mark.parametrize("text", BAD_HOSTS)
def test_bad_hosts_are_usage_errors(text):
    with pytest.raises(UsageError) as caught:
        parse_host(text)
    assert "\n" not in str(caught.value).strip()


def test_ssh_options_and_remote_paths():
    assert parse_ssh_option("StrictHostKeyChecking=accept-new") == "StrictHostKeyChecking=accept-new"
    assert parse_ssh_option("ProxyJump=pi@bastion") == "ProxyJump=pi@bastion"
    for bad in ("NoEquals", "=x", "Key=", "-oX=y", "Bad Key=x", "BatchMode=no", "batchmode=no", "Key=a\nb"):
        with pytest.raises(UsageError):
            parse_ssh_option(bad)
    for good in ("~/.cache/edgekit", "~", "/tmp/edge kit;touch PWNED", "rel/dir", "/opt/$(x)"):
        assert check_remote_path(good, "--remote-dir") == good
    for bad in ("", "  ", "a\nb", "~root/x", "-rf", "a\x00b"):
        with pytest.raises(UsageError):
            check_remote_path(bad, "--remote-dir")


def test_ssh_argv_is_a_list_with_batchmode_and_user_options_first(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("not really a key")
    target = SshTarget.make("pi@[::1]", port=2222, identity=key, options=["ConnectTimeout=3"])
    argv = target.argv("true")
    assert Path(argv[0]).name == "ssh" and argv[-3:] == ["--", "pi@::1", "true"]
    assert argv.index("ConnectTimeout=3") < argv.index("BatchMode=yes") < argv.index("ConnectTimeout=10")
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == str(key)
    with pytest.raises(Exception, match="key file not found"):
        SshTarget.make("pi@board", identity=tmp_path / "missing")
    with pytest.raises(UsageError, match="--port"):
        SshTarget.make("pi@board", port=70000)


HOSTILE = ["plain", "with space", "semi;colon", "$(touch PWNED)", "`touch PWNED`", "quote'in", 'dq"x', "back\\slash",
           "star*", "~/tilde", "-leading-dash", "new$HOME", "a&&b", "pipe|x", ""]


@pytest.mark.parametrize("shell", ["sh", "bash", "dash"])
def test_remote_command_quoting_survives_a_real_shell(shell, tmp_path):
    """What sshd does with the command line: hand it to the login shell as one string."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    line = command('for a in "$@"; do printf "%s\\n" "$a"; done', *HOSTILE)
    proc = subprocess.run([shell, "-c", line], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert proc.stdout.split("\n")[:-1] == HOSTILE
    assert not (tmp_path / "PWNED").exists()


def _sh(script: str, *args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    return subprocess.run(["sh", "-c", command(script, *args)], cwd=cwd, capture_output=True, text=True, env=env)


def test_probe_script_reports_missing_python_and_a_missing_copy(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = _sh(scripts.PROBE, "~/bundles", "b-1", "/nonexistent/python", cwd=tmp_path, home=home)
    assert proc.stdout.strip() == "edgekit:no-python"
    proc = _sh(scripts.PROBE, "~/bundles", "b-1", sys.executable, cwd=tmp_path, home=home)
    assert proc.stdout.strip() == "edgekit:need"
    folder = home / "bundles" / "b-1"
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("a\n")
    sums = subprocess.run(["sha256sum", "a.txt"], cwd=folder, capture_output=True, text=True, check=True).stdout
    (folder / "SHA256SUMS").write_text(sums)
    proc = _sh(scripts.PROBE, "~/bundles", "b-1", "python3", cwd=tmp_path, home=home)
    from edgekit.core.fileio import sha256_file

    assert proc.stdout.split() == ["edgekit:have", sha256_file(folder / "SHA256SUMS"), "-"]
    (folder / "wheels").mkdir()
    (folder / "wheels" / "x.whl").write_text("damaged after arrival")
    (folder / "SHA256SUMS").write_text(sums + f"{'0' * 64}  wheels/x.whl\n")  # wheels/ is checked on arrival only
    proc = _sh(scripts.PROBE, "~/bundles", "b-1", "python3", cwd=tmp_path, home=home)
    assert proc.stdout.split()[:2] == ["edgekit:have", sha256_file(folder / "SHA256SUMS")]
    (folder / "a.txt").write_text("changed\n")
    assert _sh(scripts.PROBE, "bundles", "b-1", "python3", cwd=tmp_path, home=home).stdout.strip() == "edgekit:need"


@pytest.mark.parametrize("host", ["pi@board;touch PWNED", "pi@$(touch PWNED)", "pi@board name",
                                  "-oProxyCommand=touch PWNED", "pi@-oProxyCommand=touch PWNED", "`id`@board"])
def test_cli_rejects_bad_hosts_before_starting_ssh(host, tmp_path, monkeypatch):
    marker = fake_ssh(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["bench", str(tmp_path), "--host", host])
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("Error: --host ") and len(result.stderr.strip().splitlines()) == 1
    assert not marker.exists() and not (tmp_path / "PWNED").exists()


def test_cli_starts_ssh_for_a_good_host(tmp_path, monkeypatch, onnx_bundle_for_hosts):
    """The control for the test above: the same fake ssh does record a start for a valid host."""
    marker = fake_ssh(tmp_path, monkeypatch)
    result = runner.invoke(app, ["bench", str(onnx_bundle_for_hosts), "--host", "pi@board", "--remote-dir", "/tmp/x"])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: cannot connect to pi@board port 22: connection refused; "
                      "is sshd running on the board, and is --port right?"]
    args = marker.read_text().splitlines()
    assert args[args.index("--") + 1] == "pi@board" and args[-1].startswith("sh -c ")


def test_remote_options_need_host(tmp_path):
    result = runner.invoke(app, ["bench", str(tmp_path), "--remote-python", "/usr/bin/python3", "--timeout", "5"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: --remote-python, --timeout apply only to a remote run; add --host [user@]host"
    result = runner.invoke(app, ["bench", str(tmp_path), str(tmp_path), "--host", "pi@board"])
    assert result.exit_code == 2 and "one bundle or export folder at a time" in result.stderr
    npz = tmp_path / "in.npz"
    npz.write_bytes(b"")
    result = runner.invoke(app, ["bench", str(tmp_path), "--host", "pi@board", "--input", str(npz)])
    assert result.exit_code == 2 and "--input is not supported with --host" in result.stderr


@pytest.fixture(scope="module")
def onnx_bundle_for_hosts(digits_fp32_export, tmp_path_factory) -> Path:
    from edgekit.bundle.build import build_bundle

    return build_bundle(digits_fp32_export, "rpi4", tmp_path_factory.mktemp("hosts") / "rpi4")


def test_a_tampered_bundle_is_refused_before_connecting(onnx_bundle_for_hosts, tmp_path, monkeypatch):
    marker = fake_ssh(tmp_path, monkeypatch)
    bad = tmp_path / "rpi4"
    shutil.copytree(onnx_bundle_for_hosts, bad)
    (bad / "numpy.py").write_text("")
    result = runner.invoke(app, ["bench", str(bad), "--host", "pi@board"])
    assert result.exit_code == 2 and "numpy.py is not listed in SHA256SUMS" in result.stderr
    assert not marker.exists()
