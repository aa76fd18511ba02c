"""``edgekit verify --emulate`` of native bundles: edgekit-run on emulated Cortex-A72 (rpi4) and A76
(rpi5), no Python in the loop, outputs compared with this host's; as root its run.sh in a root that has
no Python at all. Needs qemu-user-static and the aarch64 cross compiler (.ci/setup installs both); the
Python-free root needs root and the cached rootfs (benchmarks/emulated_verify.sh builds it)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

pytestmark = pytest.mark.slow
pytest.importorskip("executorch")
runner = CliRunner()


@pytest.fixture(scope="module")
def int8_pte(digits_checkpoint, tmp_path_factory) -> Path:
    from conftest import CALIB_DIGITS

    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    if shutil.which("qemu-aarch64-static") is None or shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("needs qemu-user-static and crossbuild-essential-arm64 (apt-get install; .ci/setup does)")
    base = tmp_path_factory.mktemp("native-emulate")
    quantize(digits_checkpoint, "static", base / "q", "rpi4", calib=CALIB_DIGITS, formats=("executorch",))
    export(base / "q", base / "export", formats=("executorch",), target="rpi4")
    return base / "export"


@pytest.mark.parametrize("target, core", [("rpi4", "cortex-a72"), ("rpi5", "cortex-a76")])
def test_a_native_bundle_reproduces_the_host_bit_for_bit(int8_pte, target, core, tmp_path):
    bundle = tmp_path / target
    made = runner.invoke(app, ["bundle", str(int8_pte), "--target", target, "--runtime", "native", "--out", str(bundle),
                               "--force"])
    assert made.exit_code == 0, made.output
    report_path = tmp_path / "verify.json"
    result = runner.invoke(app, ["verify", str(bundle), "--emulate", "--json", str(report_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    emulation = report["emulation"]
    assert report["passed"] and emulation["qemu_cpu"] == core  # pinned to the target's core, never "max"
    assert emulation["machine"] == "aarch64" and emulation["python"] is None
    assert emulation["runtime"]["name"] == "executorch-native"
    assert emulation["bit_identical"] is True  # int8 on XNNPACK: the same bits on ARM and on this host
    for check in report["batches"]:
        assert check["emulated_vs_host"]["max_abs"] == 0.0 and check["emulated_vs_host"]["top1_agreement"] == 1.0
    assert report["bench"]["ok"] and report["bench"]["result"]["mode"] == "emulated"
    assert report["bench"]["result"]["runtime"]["name"] == "executorch-native"
    entry = emulation["entry_point"]
    if os.geteuid() == 0 and emulation["rootfs"]:
        assert entry["ok"] and entry["python_in_root"] is False and entry["verdict"].startswith("PASS: model.pte on aarch64")
        assert entry["outputs_sha256"]
    assert "PASS: the emulated aarch64 board reproduces" in result.output


def test_a_bundle_built_for_one_core_is_not_emulated_as_another(int8_pte, tmp_path):
    """A runner compiled for the A76 uses instructions the A72 lacks: verify emulates the core in bundle.json."""
    bundle = tmp_path / "rpi5"
    assert runner.invoke(app, ["bundle", str(int8_pte), "--target", "rpi5", "--runtime", "native", "--out", str(bundle),
                               "--force"]).exit_code == 0
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["native"]["cpu"] == "cortex-a76"
    from edgekit.emulate.host import qemu_cpus
    from edgekit.emulate.native import pinned_cpu

    assert pinned_cpu(info["native"]["cpu"], qemu_cpus(Path(shutil.which("qemu-aarch64-static")))) == "cortex-a76"
