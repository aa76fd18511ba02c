"""Remote benchmarks against a REAL sshd on 127.0.0.1 (see sshd_fixture.py): the board is this machine.

Skipped only when OpenSSH's server is not installed (CI installs it: apt-get install -y openssh-server).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sshd_fixture import keygen, procs_with, sshd  # noqa: F401 - sshd is a pytest fixture
from typer.testing import CliRunner

from edgekit.records.result import from_document
from edgekit.bundle.build import build_bundle
from edgekit.cli.app import app
from edgekit.core.errors import RemoteError
from edgekit.core.fileio import sha256_file
from edgekit.remote import scripts, ssh
from edgekit.remote.bench import run_remote_bench

runner = CliRunner()
FAST = {"min_runs": 5, "min_time_s": 0.0, "warmup": 1, "threads": 1}
FAST_CLI = ["--min-runs", "5", "--min-time", "0", "--warmup", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def int8_onnx_export(digits_static, tmp_path_factory) -> Path:
    from edgekit.export.api import export

    out = tmp_path_factory.mktemp("remote-src") / "int8-static"
    export(digits_static, out, formats=("onnx",), target="rpi4")
    return out


@pytest.fixture(scope="module")
def int8_bundle(int8_onnx_export, tmp_path_factory) -> Path:
    return build_bundle(int8_onnx_export, "rpi4", tmp_path_factory.mktemp("remote-bundle") / "rpi4")


def _connect(server) -> dict:
    return {"port": server.port, "identity": server.client_key, "ssh_options": server.ssh_options}


def _remote_dir(tmp_path: Path) -> Path:
    """A unique marker in the remote path, so the board's processes of this test can be found."""
    return tmp_path / f"edgekit-board-{uuid.uuid4().hex[:12]}"


def _wait_gone(marker: str, within_s: float = 15.0) -> list[str]:
    """Processes whose command line holds ``marker``, after giving them ``within_s`` to exit."""
    deadline = time.monotonic() + within_s
    while (left := procs_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def test_remote_bench_of_the_int8_bundle_then_reuse(sshd, int8_bundle, tmp_path):
    remote_dir = _remote_dir(tmp_path)
    lines: list[str] = []
    first = run_remote_bench(int8_bundle, sshd.host, remote_dir=str(remote_dir), remote_python=sys.executable,
                             on_line=lines.append, **_connect(sshd), **FAST)
    result = first.result
    assert first.copied is True
    assert result.mode == "remote" and result.target == "rpi4"
    assert result.model.sha256 == sha256_file(int8_bundle / "model.onnx")
    assert result.model.precision == "int8" and result.model.variant == "int8-static-onnx"
    assert result.timing.runs >= 5 and result.timing.p50 > 0 and result.runtime["name"] == "onnxruntime"
    assert result.notes[0].startswith(f"ran on {sshd.host} (copied the bundle to ")
    assert any(line.startswith("copying the bundle") for line in lines)

    copy = Path(first.remote_path)
    assert copy.parent == remote_dir and (copy / "SHA256SUMS").read_bytes() == (int8_bundle / "SHA256SUMS").read_bytes()
    before = (copy.stat().st_ino, (copy / "model.onnx").stat().st_mtime_ns)

    second = run_remote_bench(int8_bundle, sshd.host, remote_dir=str(remote_dir), remote_python=sys.executable,
                              **_connect(sshd), **FAST)
    assert second.copied is False and second.remote_path == first.remote_path
    assert (copy.stat().st_ino, (copy / "model.onnx").stat().st_mtime_ns) == before  # not copied again
    assert "re-used the bundle already at" in second.result.notes[0]
    assert not list((remote_dir / ".runs").iterdir())  # pid files are cleaned up


def test_a_damaged_copy_on_the_board_is_replaced(sshd, int8_bundle, tmp_path):
    remote_dir = _remote_dir(tmp_path)
    kwargs = dict(remote_dir=str(remote_dir), remote_python=sys.executable, **_connect(sshd), **FAST)
    copy = Path(run_remote_bench(int8_bundle, sshd.host, **kwargs).remote_path)
    (copy / "model.onnx").write_bytes(b"garbage")
    again = run_remote_bench(int8_bundle, sshd.host, **kwargs)
    assert again.copied is True and sha256_file(copy / "model.onnx") == sha256_file(int8_bundle / "model.onnx")


def test_cli_remote_bench_of_an_export_folder(sshd, int8_onnx_export, tmp_path):
    out = tmp_path / "bench.json"
    args = ["bench", str(int8_onnx_export), *sshd.cli_args(), "--remote-dir", str(_remote_dir(tmp_path)),
            "--remote-python", sys.executable, "--target", "rpi4", *FAST_CLI, "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert "edgekit bench" in result.stdout and "model.onnx" in result.stdout
    assert "copying the bundle" in result.stderr and "running model.onnx on" in result.stderr
    [bench] = from_document(json.loads(out.read_text()))
    assert bench.mode == "remote" and bench.model.sha256 == sha256_file(int8_onnx_export / "model.onnx")

    # The bundle made on the fly is reproducible, so the next run finds it on the board.
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert "re-using the bundle already on the board" in result.stderr
    assert "re-used the bundle" in from_document(json.loads(out.read_text()))[0].notes[0]


def test_a_file_is_benched_as_the_format_its_folder_lists_it_as(int8_onnx_export, tmp_path):
    """No format is guessed from an unknown suffix: the manifest says what a file is, or it is refused."""
    from edgekit.core.errors import UsageError
    from edgekit.remote.bench import resolve_bundle

    folder, info = resolve_bundle(int8_onnx_export / "model.onnx", "rpi4", None, tmp_path / "a")
    assert info["format"] == "onnx" and (folder / info["model"]).is_file()
    with pytest.raises(UsageError, match="is not a model listed in"):
        resolve_bundle(int8_onnx_export / "manifest.json", "rpi4", None, tmp_path / "b")
    with pytest.raises(UsageError, match="is not the torchscript model listed in"):
        resolve_bundle(int8_onnx_export / "model.onnx", "rpi4", "torchscript", tmp_path / "c")


def test_unreachable_port_is_one_line(sshd, int8_bundle):
    from sshd_fixture import free_port

    result = runner.invoke(app, ["bench", str(int8_bundle), "--host", sshd.host, "--port", str(free_port()), "-q"])
    assert result.exit_code == 1
    assert _error_lines(result.stderr) == [result.stderr.strip()]
    assert "connection refused" in result.stderr and "--port" in result.stderr


def test_wrong_key_is_an_authentication_error(sshd, int8_bundle, tmp_path):
    wrong = keygen(tmp_path / "wrong_ed25519")
    result = runner.invoke(app, ["bench", str(int8_bundle), *sshd.cli_args(key=wrong), "-q"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: authentication to ") and "ssh-copy-id" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_python_on_the_board(sshd, int8_bundle, tmp_path):
    result = runner.invoke(app, ["bench", str(int8_bundle), *sshd.cli_args(), "--remote-dir", str(_remote_dir(tmp_path)),
                                 "--remote-python", "/nonexistent/python3", "-q"])
    assert result.exit_code == 1
    assert result.stderr.strip() == (f"Error: python '/nonexistent/python3' not found on {sshd.host} port {sshd.port}; "
                                     "install python3 there (sudo apt install python3) or pass --remote-python PATH")


def test_missing_numpy_on_the_board_names_the_pip_command(sshd, int8_bundle, tmp_path):
    bare = tmp_path / "bare-venv"  # a real python without numpy or onnxruntime
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    remote_dir = _remote_dir(tmp_path)
    result = runner.invoke(app, ["bench", str(int8_bundle), *sshd.cli_args(), "--remote-dir", str(remote_dir),
                                 "--remote-python", str(bare / "bin" / "python"), "-q"])
    assert result.exit_code == 1
    [line] = _error_lines(result.stderr)
    assert line.startswith(f"Error: numpy is not installed for {bare / 'bin' / 'python'} on {sshd.host}")
    assert "-m pip install -r requirements.txt" in line and f"cd {remote_dir}/rpi4-int8-static-onnx-" in line
    assert not procs_with(remote_dir.name)


def test_timeout_stops_the_runner_on_the_board(sshd, int8_bundle, tmp_path):
    remote_dir = _remote_dir(tmp_path)
    result = runner.invoke(app, ["bench", str(int8_bundle), *sshd.cli_args(), "--remote-dir", str(remote_dir),
                                 "--remote-python", sys.executable, "--min-runs", "1000000000", "--timeout", "2", "-q"])
    assert result.exit_code == 1
    assert result.stderr.strip() == (f"Error: the benchmark on {sshd.host} port {sshd.port} did not finish within 2 s; "
                                     "it was stopped (raise --timeout, or lower --min-time/--min-runs)")
    assert _wait_gone(remote_dir.name) == []


def test_a_lost_connection_leaves_no_runner_behind(sshd, int8_bundle, tmp_path):
    """When the local guard fires first (a hung link), the KILL script stops the run's process group."""
    from edgekit.bundle.layout import read_bundle_json
    from edgekit.remote import transfer

    remote_dir = _remote_dir(tmp_path)
    board = ssh.SshTarget.make(sshd.host, sshd.port, sshd.client_key, sshd.ssh_options)
    placement = transfer.place(board, int8_bundle, read_bundle_json(int8_bundle), str(remote_dir), sys.executable)
    run_id = uuid.uuid4().hex
    done = ssh.run(board, scripts.RUN, [str(remote_dir), placement.name, sys.executable, "600", run_id, "model.onnx",
                                        "--min-runs", "1000000000", "--max-runs", "1000000000", "--threads", "1"],
                   timeout_s=4)
    assert done.timed_out
    assert procs_with(remote_dir.name), "without a terminal the runner outlives its ssh connection"
    ssh.run(board, scripts.KILL, [str(remote_dir), run_id], timeout_s=30)
    assert _wait_gone(remote_dir.name) == []
    assert not (remote_dir / ".runs" / f"{run_id}.pid").exists()


def test_shell_characters_in_remote_paths_stay_literal(sshd, int8_bundle, tmp_path):
    token = uuid.uuid4().hex[:8]
    remote_dir = tmp_path / f"edge kit;touch PWNED-{token}" / f"$(touch PWNED2-{token})"
    python_dir = tmp_path / "py thon;x"
    python_dir.mkdir()
    python = python_dir / "python"  # a python path with a space and a ';' in it
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    run = run_remote_bench(int8_bundle, sshd.host, remote_dir=str(remote_dir), remote_python=str(python),
                           **_connect(sshd), **FAST)
    assert run.result.mode == "remote"
    assert Path(run.remote_path).parent == remote_dir and (remote_dir / Path(run.remote_path).name / "model.onnx").is_file()
    for folder in (Path.home(), tmp_path, Path.cwd(), remote_dir.parent):
        assert not list(folder.glob(f"PWNED*{token}")), folder


def test_remote_home_relative_dir(sshd, int8_bundle):
    """``~/...`` (the default's form) is the board user's home, not a folder named '~'."""
    name = f".cache/edgekit-test-{uuid.uuid4().hex[:8]}"
    try:
        run = run_remote_bench(int8_bundle, sshd.host, remote_dir=f"~/{name}", remote_python=sys.executable,
                               **_connect(sshd), **FAST)
        assert run.remote_path.startswith(f"~/{name}/")
        assert (Path.home() / name / Path(run.remote_path).name / "runner.py").is_file()
        assert not Path("~").exists()
    finally:
        shutil.rmtree(Path.home() / name, ignore_errors=True)


def test_runner_usage_errors_come_back_as_usage_errors(sshd, int8_bundle, tmp_path):
    with pytest.raises(Exception) as caught:
        run_remote_bench(int8_bundle, sshd.host, remote_dir=str(_remote_dir(tmp_path)), remote_python=sys.executable,
                         shapes={"nope": [1, 2]}, **_connect(sshd), **FAST)
    assert caught.type.__name__ == "UsageError" and "nope" in str(caught.value)
    assert not isinstance(caught.value, RemoteError)

