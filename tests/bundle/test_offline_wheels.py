"""``edgekit bundle --wheels`` for an offline board: every wheel the board installs, of each platform
tag its glibc accepts, and they install with the index switched off on an emulated arm64 Debian.

pip takes ``--platform`` literally: asked for ``manylinux_2_28_aarch64`` alone it finds no
pydantic-core (tagged ``manylinux2014``) and, asked for ``manylinux2014_aarch64``, no numpy 2.4
(``manylinux_2_17``/``2_27``); a board with glibc 2.28 runs all of them. These tests download the
ONNX bundle's wheels from PyPI (skipped, with the reason, when it cannot be reached).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
PYPI = "https://pypi.org/simple"
# What pip on a Raspberry Pi OS bookworm board (glibc 2.36) accepts, written out by hand.
BOOKWORM_TAGS = [f"manylinux_2_{minor}_aarch64" for minor in range(36, 16, -1)] + ["manylinux2014_aarch64"]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.strip().split("==")
            pins[_normal(name)] = version
    return pins


def _wheel_versions(folder: Path) -> dict[str, str]:
    return {_normal(w.name.split("-")[0]): w.name.split("-")[1] for w in folder.glob("*.whl")}


@pytest.fixture(scope="module")
def wheels_bundle(digits_static, tmp_path_factory) -> Path:
    """The default model's int8 ONNX bundle for rpi4, with --wheels, made through the CLI."""
    from edgekit.emulate.index_check import unreachable
    from edgekit.export.api import export

    problem = unreachable(PYPI)
    if problem:
        pytest.skip(f"PyPI is not reachable from here ({problem}); bundle --wheels downloads from it")
    base = tmp_path_factory.mktemp("offline-wheels")
    export(digits_static, base / "dist", formats=("onnx",), target="rpi4")
    result = runner.invoke(app, ["bundle", str(base / "dist"), "--target", "rpi4", "--out", str(base / "bundles" / "rpi4"),
                                 "--wheels"], env={"PIP_CONFIG_FILE": os.devnull})
    assert result.exit_code == 0, result.output
    assert re.search(r"wheels: \d+ files \([\d.]+ MB\) in ", result.stdout)
    return base / "bundles" / "rpi4"


def test_the_wheelhouse_holds_every_pin_of_both_requirement_files(wheels_bundle):
    wheels = _wheel_versions(wheels_bundle / "wheels")
    for requirements in ("requirements.txt", "requirements-serve.txt"):
        for name, version in _pins(wheels_bundle / requirements).items():
            assert wheels.get(name) == version, (requirements, name, version, sorted(wheels))
    names = [w.name for w in (wheels_bundle / "wheels").glob("*.whl")]
    # the two that broke: an older-glibc binary tag and a pure-python wheel are both in
    assert any(n.startswith("pydantic_core-") and "manylinux2014_aarch64" in n for n in names), names
    assert any(n.startswith("numpy-") and "aarch64" in n for n in names), names
    assert any(n.endswith("-none-any.whl") for n in names)
    assert not [n for n in names if "x86_64" in n or "linux_aarch64.whl" in n.replace("manylinux", "")]
    info = json.loads((wheels_bundle / "bundle.json").read_text())
    assert sorted(info["wheels"]) == sorted(names)


def test_pip_resolves_both_requirement_files_offline_for_the_board(wheels_bundle, tmp_path):
    """pip on this host, index off, the bundle's wheels only, as a glibc 2.36 aarch64 board sees them."""
    platforms = [arg for tag in BOOKWORM_TAGS for arg in ("--platform", tag)]
    for requirements in ("requirements.txt", "requirements-serve.txt"):
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index", "--find-links",
             str(wheels_bundle / "wheels"), "--only-binary=:all:", *platforms, "--python-version", "3.11",
             "--implementation", "cp", "--target", str(tmp_path / "t"), "--disable-pip-version-check",
             "-r", str(wheels_bundle / requirements)],
            capture_output=True, text=True, timeout=300, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
        assert done.returncode == 0, (requirements, done.stdout[-2000:], done.stderr[-2000:])
        assert "Would install" in done.stdout


@pytest.mark.slow
def test_the_wheels_install_offline_on_the_emulated_board_and_the_bundle_checks(wheels_bundle, tmp_path):
    """``verify --emulate`` installs a bundle with wheels/ with ``pip install --no-index --find-links wheels``
    in the arm64 rootfs, then runs the model (and serve.py from its own offline venv) there."""
    from edgekit.emulate.rootfs import default_cache_dir, find_rootfs

    if os.geteuid() != 0:
        pytest.skip("edgekit verify --emulate needs root")
    missing = [tool for tool in ("qemu-aarch64-static", "unshare") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed; apt-get install qemu-user-static")
    if find_rootfs(default_cache_dir(), "bookworm") is None:
        pytest.skip(f"no cached bookworm arm64 rootfs in {default_cache_dir()}; run bash benchmarks/emulated_verify.sh")
    out = tmp_path / "verify.json"
    env = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
    result = runner.invoke(app, ["verify", str(wheels_bundle), "--emulate", "--timeout", "1200", "--json", str(out)],
                           env=env)  # any index, should pip try one, would be a dead end: the install is offline
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["passed"] and report["emulation"]["machine"] == "aarch64"
    venv = report["emulation"]["venv"]
    assert venv["source"] == "wheels" and venv["packages"]["onnxruntime"] == _pins(wheels_bundle / "requirements.txt")["onnxruntime"]
    assert report["serve"]["ok"] and report["serve"]["exit_code"] == 0  # serve.py's stack came from wheels/ too
    assert "PASS" in result.stdout
