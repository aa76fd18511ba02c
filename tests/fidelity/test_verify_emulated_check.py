"""``verify --emulate`` of a native rpi4 bundle exits non-zero when the bundle's own check fails on the
emulated board (it said PASS two lines after the check's FAIL): a real bundle, edgekit-run under QEMU.

The check fails the way the issue saw it (the int8 program's top-1 is not the float reference's on
the board's sample): the reference's float outputs are rolled along the class axis, and the bundle's
SHA256SUMS written again, as a bundle made from another export would hold them."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

pytest.importorskip("executorch")
runner = CliRunner()


@pytest.mark.slow  # trains the digits model, cross-compiles edgekit-run (cached), runs it under QEMU
def test_verify_emulate_fails_when_the_bundles_own_check_fails(digits_checkpoint, tmp_path):
    if shutil.which("qemu-aarch64-static") is None or shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("needs qemu-aarch64-static and the aarch64 cross compiler")
    from conftest import CALIB_DIGITS

    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    quantize(digits_checkpoint, "static", tmp_path / "q", "rpi4", calib=CALIB_DIGITS, formats=("executorch",))
    export(tmp_path / "q", tmp_path / "export", formats=("executorch",), target="rpi4")
    bundle = tmp_path / "bundle"
    made = runner.invoke(app, ["bundle", str(tmp_path / "export"), "--target", "rpi4", "--runtime", "native",
                               "--out", str(bundle)])
    assert made.exit_code == 0, made.output

    reference = bundle / "reference.npz"
    with np.load(reference) as data:
        arrays = {key: data[key] for key in data.files}
    for key in arrays:
        if key.endswith("/output"):
            arrays[key] = np.roll(arrays[key], 1, axis=-1)  # every sample's top-1 moves to another class
    with open(reference, "wb") as fh:
        np.savez(fh, **arrays)
    digest = hashlib.sha256(reference.read_bytes()).hexdigest()
    sums = bundle / "SHA256SUMS"
    sums.write_text("".join(f"{digest}  reference.npz\n" if line.endswith("  reference.npz") else line + "\n"
                            for line in sums.read_text().splitlines()))

    result = runner.invoke(app, ["verify", str(bundle), "--emulate", "--no-bench", "--timeout", "600"])
    assert result.exit_code != 0, result.output
    assert "bundle check: sh run.sh check" in result.stdout and "FAILED" in result.stdout
    assert "PASS: the emulated" not in result.stdout
    assert "top1_agreement" in result.stderr.strip().splitlines()[-1]
