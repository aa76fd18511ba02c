"""Native ncnn bundles: edgekit-run's ncnn backend on libncnn.so built for aarch64 from the installed
ncnn's source distribution, held to ncnn's Python wheel on the same files.

The references are independent of the runner: ncnn's wheel in this process (``NcnnRuntime``, the
board package's runtime: the same ncnn release, its own build, x86-64 kernels), the export's
reference.npz (the float model's outputs). The bundle is made through the CLI for the Raspberry Pi 4
and its runner run under QEMU as a Cortex-A72 (the cross compiler's C library). A damaged
``model.ncnn.param`` ends in one ``Error:`` line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("ncnn")
pytest.importorskip("pnnx")

from edgekit.cli.app import app  # noqa: E402
from edgekit.native.toolchain import CROSS  # noqa: E402

TIMEOUT = 600
SYSROOT = CROSS["aarch64"][2]
cli = CliRunner()


def _ok(*args):
    result = cli.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output[-2000:]
    return result


def _needs_cross() -> None:
    missing = [tool for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64-static", "cmake") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install crossbuild-essential-arm64 qemu-user-static cmake)")


def emulated(argv: list, cpu: str = "cortex-a72") -> subprocess.CompletedProcess:
    return subprocess.run(["qemu-aarch64-static", "-cpu", cpu, "-L", SYSROOT, *map(str, argv)], capture_output=True,
                          text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def rpi4_bundles(digits_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """The digits model as ncnn files (fp32; static int8 by ncnn's own calibration), each bundled with
    ``--target rpi4 --runtime native``, as a user does."""
    _needs_cross()
    base = tmp_path_factory.mktemp("native-ncnn")
    _ok("export", digits_checkpoint, "--format", "ncnn", "--out", base / "fp32")
    _ok("quantize", digits_checkpoint, "--method", "static", "--format", "ncnn", "--out", base / "q")
    _ok("export", base / "q", "--out", base / "int8")
    for precision in ("fp32", "int8"):
        _ok("bundle", base / precision, "--target", "rpi4", "--runtime", "native", "--out", base / f"{precision}-rpi4")
    return {precision: base / f"{precision}-rpi4" for precision in ("fp32", "int8")}


def wheel_outputs(param: Path, inputs: np.ndarray) -> np.ndarray:
    from edgekit.board.runtimes.ncnn_runtime import NcnnRuntime

    return NcnnRuntime(param, 1).run([inputs])[0]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_emulated_a72_outputs_equal_the_ncnn_wheel(rpi4_bundles, precision, tmp_path):
    bundle = rpi4_bundles[precision]
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["runtime"]["name"] == "ncnn-native" and info["native"]["libraries"] == ["lib/libncnn.so"]
    from importlib.metadata import version

    assert info["runtime"]["version"] == version("ncnn")
    assert sorted(p.name for p in (bundle / "lib").iterdir()) == ["libncnn.so"]
    assert (bundle / "model.ncnn.bin").is_file() and "BSD" in (bundle / "THIRD_PARTY_NOTICES.txt").read_text()
    out = tmp_path / "native.npz"
    done = emulated([bundle / "edgekit-run", "probe", bundle / "model.ncnn.param", bundle / "reference.npz", out,
                     "--threads", "1"])
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc["machine"] == "aarch64" and doc["runtime"]["name"] == "ncnn-native"
    reference, native = np.load(bundle / "reference.npz"), np.load(out)
    for batch in ("b1", "b7"):
        ours = native[f"{batch}/output"]
        theirs = wheel_outputs(bundle / "model.ncnn.param", reference[f"{batch}/input/input"])
        assert ours.dtype == np.float32 and ours.shape == theirs.shape == reference[f"{batch}/output"].shape
        # the same ncnn release and settings, another build on another instruction set: float rounding apart
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5)
        assert (ours.argmax(1) == theirs.argmax(1)).all()


def test_the_bundle_check_passes_under_emulation_and_names_ncnn(rpi4_bundles):
    bundle = rpi4_bundles["int8"]
    done = emulated([bundle / "edgekit-run", "check", "--model", bundle / "model.ncnn.param", "--reference",
                     bundle / "reference.npz", "--threads", "1", "--min-cosine", "0.99", "--min-top1", "0.8"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("PASS: model.ncnn.param on aarch64")
    version = emulated([bundle / "edgekit-run", "--version"]).stdout
    assert "(ncnn " in version, version
    info = json.loads(emulated([bundle / "edgekit-run", "info", bundle / "model.ncnn.param"]).stdout)
    assert info["format"] == "ncnn" and info["inputs"][0]["sizes"] == [-1, 1, 8, 8]  # the manifest's sample shape


@pytest.mark.parametrize("damage", ["layer-count", "not-ncnn", "bad-layer-line", "empty"])
def test_a_damaged_param_is_one_error_line(rpi4_bundles, tmp_path, damage):
    bundle = Path(shutil.copytree(rpi4_bundles["fp32"], tmp_path / "b"))
    param = bundle / "model.ncnn.param"
    lines = param.read_text().splitlines()
    bad = {"layer-count": [lines[0], "99 " + lines[1].split()[1], *lines[2:]],
           "not-ncnn": ["7767518", *lines[1:]],
           "bad-layer-line": [*lines[:3], "Convolution", *lines[4:]],
           "empty": []}[damage]
    param.write_text("\n".join(bad) + "\n" if bad else "")
    out = tmp_path / "out.npz"
    for argv in (["check", "--model", param, "--reference", bundle / "reference.npz"],
                 ["probe", param, bundle / "reference.npz", out]):
        done = emulated([bundle / "edgekit-run", *argv])
        assert done.returncode == 1, (done.stdout[-500:], done.stderr[-1000:])
        lines_out = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines_out) == 1 and lines_out[0].startswith("Error: ") and "model.ncnn.param" in lines_out[0], \
            done.stderr
    assert not out.exists()  # nothing half-written


def test_verify_and_bench_emulated_count_the_native_bundle(rpi4_bundles, tmp_path):
    """``edgekit verify --emulate`` passes the bundle's own check under QEMU against the host's
    outputs, and ``edgekit bench --emulate`` reports its instructions per inference, counted natively."""
    bundle = rpi4_bundles["fp32"]
    report = tmp_path / "verify.json"
    done = cli.invoke(app, ["verify", str(bundle), "--emulate", "--json", str(report)])
    assert done.exit_code == 0, done.output[-2000:]
    doc = json.loads(report.read_text())
    assert doc["passed"] is True and doc["emulation"]["runtime"]["name"] == "ncnn-native"
    for batch in doc["batches"]:
        assert batch["emulated_vs_host"]["max_abs"] <= 2e-5
    out = tmp_path / "bench.json"
    done = cli.invoke(app, ["bench", str(bundle), "--emulate", "--json", str(out)])
    assert done.exit_code == 0, done.output[-2000:]
    result = json.loads(out.read_text())
    result = result["results"][0] if "results" in result else result
    assert result["runtime"]["name"] == "ncnn-native"
    assert result["emulated"]["cpu"] == "cortex-a72" and result["emulated"]["runner"] == "edgekit-run of the bundle"
    assert result["emulated"]["instructions"]["per_run"] > 10_000

    # the export's own file, counted by edgekit's cached runner for the core (what pipeline --target ranks):
    # the same build and reference inputs as the bundle's, so the same count but for the runs' fixed share
    plain = tmp_path / "plain.json"
    done = cli.invoke(app, ["bench", str(rpi4_bundles["fp32"].parent / "fp32" / "model.ncnn.param"), "--emulate",
                            "--target", "rpi4", "--json", str(plain)])
    assert done.exit_code == 0, done.output[-2000:]
    counted = json.loads(plain.read_text())["results"][0]["emulated"]
    assert counted["runner"].startswith("edgekit-run ") and counted["cpu"] == "cortex-a72"
    assert counted["instructions"]["per_run"] == pytest.approx(result["emulated"]["instructions"]["per_run"], rel=1e-3)


@pytest.mark.parametrize("member", ["../escape.txt", "/abs/path.txt", "link"])
def test_an_sdist_member_outside_its_folder_or_a_link_is_refused_before_unpacking(tmp_path, member):
    import io
    import tarfile

    from edgekit.core.errors import EdgekitError
    from edgekit.native.ncnn_source import _unpack

    sdist = tmp_path / "ncnn-0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        good = tarfile.TarInfo("ncnn-0/CMakeLists.txt")
        good.size = 3
        archive.addfile(good, io.BytesIO(b"abc"))
        bad = tarfile.TarInfo(member)
        if member == "link":
            bad.type, bad.linkname = tarfile.SYMTYPE, "/etc/passwd"
        else:
            bad.size = 3
        archive.addfile(bad, io.BytesIO(b"abc") if member != "link" else None)
    with pytest.raises(EdgekitError, match="unexpected member"):
        _unpack(sdist, tmp_path / "src")
    assert not (tmp_path / "src").exists()  # nothing unpacked
