"""A native bundle benchmarked over SSH against a REAL sshd on 127.0.0.1: the board runs edgekit-run, so it
needs a shell and coreutils but no Python (the remote python given is one that does not exist)."""

from __future__ import annotations

import json
import platform
import uuid
from pathlib import Path

import pytest
from sshd_fixture import procs_with, sshd  # noqa: F401 - sshd is a pytest fixture
from typer.testing import CliRunner

from edgekit.cli.app import app

pytest.importorskip("executorch")
runner = CliRunner()
HOST_TARGET = {"x86_64": "x86-64"}.get(platform.machine())


@pytest.fixture(scope="module")
def native_bundle(digits_checkpoint, tmp_path_factory) -> Path:
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    if HOST_TARGET is None:
        pytest.skip(f"no edgekit target for {platform.machine()}")
    base = tmp_path_factory.mktemp("remote-native")
    export(digits_checkpoint, base / "export", formats=("executorch",), target=HOST_TARGET)
    return build_bundle(base / "export", HOST_TARGET, base / "native", runtime="native")


def test_a_native_bundle_runs_on_a_board_without_python(sshd, native_bundle, tmp_path):
    remote = tmp_path / f"edgekit-board-{uuid.uuid4().hex[:12]}"
    out = tmp_path / "remote.json"
    result = runner.invoke(app, ["bench", str(native_bundle), *sshd.cli_args(), "--remote-dir", str(remote),
                                 "--remote-python", "/nonexistent/python3", "--min-runs", "10", "--min-time", "0",
                                 "--threads", "1", "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    [doc] = json.loads(out.read_text())["results"]
    assert doc["mode"] == "remote" and doc["runtime"]["name"] == "executorch-native"
    assert doc["runtime"]["torch_imported"] is False and doc["host"]["python"] is None
    assert doc["timing"]["runs"] >= 10 and doc["model"]["variant"].endswith("-native")
    copied = [p for p in remote.iterdir() if not p.name.startswith(".")]
    assert len(copied) == 1 and (copied[0] / "edgekit-run").is_file()
    assert not list(copied[0].rglob("*.py"))  # nothing Python was sent to the board
    assert not procs_with(remote.name)
