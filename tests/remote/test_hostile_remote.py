"""Remote safety against a REAL sshd on 127.0.0.1 (tests/sshd_fixture.py), beyond
test_remote_bench.py / test_remote_hosts.py: local paths (bundle folder, ssh key) with spaces and
shell metacharacters stay literal, and interrupting edgekit (Ctrl-C, or SIGTERM from a cancelled
CI job) during a remote run leaves no process behind on the board."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sshd_fixture import procs_with, sshd  # noqa: F401 - sshd is a pytest fixture
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
FAST_CLI = ["--min-runs", "5", "--min-time", "0", "--warmup", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def bundle(digits_static, tmp_path_factory) -> Path:
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    root = tmp_path_factory.mktemp("hostile-remote")
    exported, _ = export(digits_static, root / "int8", formats=("onnx",), target="rpi4")
    return build_bundle(exported, "rpi4", root / "rpi4", archive=False)


def _wait_for(predicate, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_local_paths_with_shell_characters_stay_literal(sshd, bundle, tmp_path):  # noqa: F811
    token = uuid.uuid4().hex[:8]
    odd = tmp_path / f"dist dir;touch PWNED-{token}" / f"$(touch PWNED2-{token})" / "`id`"
    shutil.copytree(bundle, odd / "rpi4")
    key_dir = tmp_path / f"keys & $(touch PWNED3-{token})"
    key_dir.mkdir()
    key = key_dir / "id ed25519"
    shutil.copyfile(sshd.client_key, key)
    key.chmod(0o600)
    remote_dir = tmp_path / f"board {token}"
    args = ["bench", str(odd / "rpi4"), "--host", sshd.host, "--port", str(sshd.port), "--identity", str(key),
            "--remote-dir", str(remote_dir), "--remote-python", sys.executable, *FAST_CLI, "-q"]
    for option in sshd.ssh_options:
        args += ["--ssh-option", option]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    copies = [p for p in remote_dir.iterdir() if not p.name.startswith(".")]
    assert len(copies) == 1 and (copies[0] / "model.onnx").is_file()
    for folder in (Path.home(), tmp_path, Path.cwd(), odd, odd.parent, odd.parent.parent, key_dir):
        assert not list(folder.glob(f"PWNED*{token}")), folder


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupting_edgekit_stops_the_run_on_the_board(sshd, bundle, tmp_path, signum):  # noqa: F811
    remote_dir = tmp_path / f"edgekit-board-{uuid.uuid4().hex[:12]}"
    argv = [sys.executable, "-m", "edgekit", "bench", str(bundle), *sshd.cli_args(), "--remote-dir", str(remote_dir),
            "--remote-python", sys.executable, "--min-runs", "1000000000", "--min-time", "0", "--threads", "1",
            "--timeout", "300", "-q"]
    env = {**os.environ, "EDGEKIT_NO_PROGRESS": "1"}
    # Ctrl-C's default disposition, as in a terminal or a CI job: a test run started in the background
    # (`pytest &` without job control) inherits SIGINT ignored, and edgekit rightly keeps it ignored.
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        started = _wait_for(lambda: any("runner.py" in p for p in procs_with(remote_dir.name)), 120)
        assert started, "the runner never started on the board"
        proc.send_signal(signum)  # edgekit only (not its ssh child): as a CI runner cancels a job
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "Error: interrupted" and "Traceback" not in stderr
    # the board's shell exits once the stopped runner is reaped; on a loaded 2-core CI host that once
    # took longer than 20 s, so the test allows a minute (a run left behind stays for 300 s)
    assert _wait_for(lambda: not procs_with(remote_dir.name), 60), procs_with(remote_dir.name)
    assert not list((remote_dir / ".runs").glob("*.pid"))
