"""edgekit verify / edgekit.emulate without running an emulated board: bundles, errors, cache, numerics.

The end-to-end run under QEMU is in test_emulate_e2e.py (slow; needs root, qemu-user-static,
debootstrap and binfmt_misc).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.emulate import EmulationError
from edgekit.emulate.bundle import open_bundle, wheel_problem
from edgekit.emulate.host import INSTALL_HINT, qemu_cpu_for
from edgekit.emulate.process import run_captured, run_streamed
from edgekit.emulate.report import Tolerance, check_batch
from edgekit.emulate.rootfs import INFO_PATH, INFO_SCHEMA, default_cache_dir, ensure_rootfs, find_rootfs, mounts_below, remove_tree
from edgekit.emulate.venv import requirements_key
from board_files import PROBE

runner = CliRunner()
IS_ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def int8_bundle(digits_static, tmp_path_factory) -> Path:
    """The static int8 digits model, exported as ONNX for rpi4 and bundled."""
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    base = tmp_path_factory.mktemp("emulate-bundle")
    export(digits_static, base / "export", formats=("onnx",), target="rpi4")
    return build_bundle(base / "export", "rpi4", base / "rpi4")


def _copy(bundle: Path, dest: Path) -> Path:
    shutil.copytree(bundle, dest)
    return dest


def _error(result) -> str:
    """The one ``Error:`` line, last on stderr (after any progress lines, which start with "[")."""
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("Error: "), result.output
    assert all(line.startswith("[") for line in lines[:-1]) and "Traceback" not in result.stderr
    return lines[-1]


# ---------------------------------------------------------------------------------------------
# The probe: the same script runs on the host and inside the emulated board


def test_probe_reproduces_the_float_reference(digits_fp32_export, tmp_path):
    out = tmp_path / "out.npz"
    proc = subprocess.run(
        [sys.executable, "-I", str(PROBE), str(digits_fp32_export / "model.onnx"),
         str(digits_fp32_export / "reference.npz"), str(out), "--inputs", "input"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["batches"] == [1, 7] and info["runtime"]["name"] == "onnxruntime"
    reference = np.load(digits_fp32_export / "reference.npz")
    outputs = np.load(out)
    for batch in (1, 7):
        np.testing.assert_allclose(outputs[f"b{batch}/output"], reference[f"b{batch}/output"], atol=1e-4, rtol=1e-3)


def test_probe_runs_int8_torchscript_with_its_engine(digits_static, tmp_path):
    from edgekit.export.api import export

    folder, manifest = export(digits_static, tmp_path / "ts", formats=("torchscript",), target="rpi4")
    engine = manifest.files[0].details["quantized_engine"]
    proc = subprocess.run(
        [sys.executable, "-I", str(PROBE), str(folder / "model.pt"), str(folder / "reference.npz"),
         str(tmp_path / "out.npz"), "--format", "torchscript", "--engine", engine, "--inputs", "input"],
        capture_output=True, text=True, check=False, env={**os.environ, "TORCH_CPP_LOG_LEVEL": "ERROR"},
    )
    assert proc.returncode == 0, proc.stderr
    runtime = json.loads(proc.stdout)["runtime"]
    assert runtime["name"] == "torch" and runtime["engine"] == engine and runtime["version"]
    reference, outputs = np.load(folder / "reference.npz"), np.load(tmp_path / "out.npz")
    for batch in (1, 7):
        got, want = outputs[f"b{batch}/output"], reference[f"b{batch}/output"]
        assert got.shape == want.shape and (got.argmax(1) == want.argmax(1)).mean() >= 0.8


def test_probe_fails_in_one_line_on_a_broken_model(tmp_path, digits_fp32_export):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a model")
    proc = subprocess.run([sys.executable, "-I", str(PROBE), str(bad), str(digits_fp32_export / "reference.npz"),
                           str(tmp_path / "o.npz")], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("Error: ") and "cannot load model.onnx" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "o.npz").exists()


# ---------------------------------------------------------------------------------------------
# Numerics: the verdict per batch


def test_fp32_tolerance_is_absolute():
    host = np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 1.0]], dtype=np.float32)
    ok = check_batch(2, host + 5e-4, host, host, Tolerance.for_precision("fp32"))
    assert ok.passed and ok.bound == 1e-3 and ok.emulated_vs_host["top1_agreement"] == 1.0
    bad = check_batch(2, host + 2e-3, host, host, Tolerance.for_precision("fp32"))
    assert not bad.passed and "max abs difference 0.002 > 0.001" in bad.reason


def test_int8_tolerance_allows_a_few_output_steps_but_not_a_flipped_class():
    host = np.array([[0.0, 25.0, -25.0], [10.0, 0.0, 1.0]], dtype=np.float32)  # range 50 -> bound 0.5
    tol = Tolerance.for_precision("int8")
    steps = check_batch(2, host + np.float32(0.4), host, host, tol)
    assert steps.passed and steps.bound == pytest.approx(0.5)
    assert not check_batch(2, host + np.float32(0.6), host, host, tol).passed
    flipped = host.copy()
    flipped[1] = [0.0, 0.1, 0.0]  # a different top-1 class and direction
    bad = check_batch(2, flipped, host, host, tol)
    assert not bad.passed and "top-1 agreement 50.0% < 100%" in bad.reason and "cosine" in bad.reason


def test_nan_and_shape_mismatch_fail():
    host = np.ones((2, 3), dtype=np.float32)
    nan = host.copy()
    nan[0, 0] = np.nan
    assert not check_batch(2, nan, host, host, Tolerance.for_precision("fp32")).passed
    shaped = check_batch(2, np.ones((2, 4), np.float32), host, host, Tolerance.for_precision("fp32"))
    assert not shaped.passed and "output shape (2, 4) != host's (2, 3)" in shaped.reason


# ---------------------------------------------------------------------------------------------
# Bundles: checksums, wheels, arch


@pytest.mark.parametrize(
    "name, python, problem",
    [
        ("numpy-2.4.6-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl", "3.11", None),
        ("protobuf-7.36.2-cp310-abi3-manylinux2014_aarch64.whl", "3.11", None),
        ("packaging-26.4-py3-none-any.whl", "3.11", None),
        ("numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", None, "is built for manylinux_2_27_x86_64, not aarch64"),
        ("numpy-2.4.6-cp311-cp311-musllinux_1_2_aarch64.whl", None, "not aarch64 Linux (glibc)"),
        ("numpy-2.4.6-cp312-cp312-manylinux_2_28_aarch64.whl", "3.11", "is for cp312, not CPython 3.11"),
        ("protobuf-7.36.2-cp312-abi3-manylinux2014_aarch64.whl", "3.11", "is for cp312"),
        ("README.txt.whl", None, "is not a wheel file name"),
    ],
)
def test_wheel_platform_check(name, python, problem):
    found = wheel_problem(name, "aarch64", python)
    assert (found is None) if problem is None else (problem in found)


def test_open_bundle_reads_the_built_bundle(int8_bundle):
    bundle = open_bundle(int8_bundle)
    assert bundle.model.name == "model.onnx" and bundle.precision == "int8" and bundle.arch == "aarch64"
    assert bundle.input_names == ("input",) and bundle.runner is not None and bundle.requirements is not None
    assert bundle.checked_files >= 7 and bundle.wheels == ()


def test_verify_without_emulate_checks_checksums(int8_bundle):
    result = runner.invoke(app, ["verify", str(int8_bundle)])
    assert result.exit_code == 0, result.output
    assert "files match SHA256SUMS" in result.stdout and "--emulate" in result.stdout


def test_checksum_mismatch_is_one_line(int8_bundle, tmp_path):
    bundle = _copy(int8_bundle, tmp_path / "b")
    with open(bundle / "reference.npz", "ab") as fh:
        fh.write(b"\0")
    result = runner.invoke(app, ["verify", str(bundle), "--emulate"])
    assert result.exit_code == 2
    assert "reference.npz does not match its SHA256SUMS entry" in _error(result)


def test_x86_wheels_in_an_aarch64_bundle_are_refused(int8_bundle, tmp_path):
    from edgekit.bundle.verify import write_checksums

    bundle = _copy(int8_bundle, tmp_path / "b")
    (bundle / "wheels").mkdir()
    (bundle / "wheels" / "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl").write_bytes(b"PK")
    write_checksums(bundle)
    result = runner.invoke(app, ["verify", str(bundle), "--emulate"])
    assert result.exit_code == 2
    message = _error(result)
    platform = json.loads((bundle / "bundle.json").read_text())["python_platform"]
    assert "is built for manylinux_2_27_x86_64, not aarch64" in message and f"--wheels for {platform}" in message


def test_a_bundle_for_another_arch_is_refused(digits_static, tmp_path):
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    export(digits_static, tmp_path / "export", formats=("onnx",), target="rpi4")
    bundle = build_bundle(tmp_path / "export", "x86-64", tmp_path / "x86", force=True)
    result = runner.invoke(app, ["verify", str(bundle), "--emulate"])
    assert result.exit_code == 2 and "is a bundle for x86_64; --emulate runs aarch64 bundles only" in _error(result)


def test_an_export_folder_is_not_a_bundle(digits_fp32_export):
    result = runner.invoke(app, ["verify", str(digits_fp32_export), "--emulate"])
    assert result.exit_code == 2 and "has no bundle.json; make a bundle first" in _error(result)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--timeout", "0"], "--timeout must be a positive number of seconds"),
        (["--atol", "-1"], "--atol must be a number >= 0"),
        (["--launcher", "magic"], "unknown launcher 'magic'; choose one of: auto, binfmt, interpreter"),
        (["--debian-release", "../etc"], "is not a Debian release name"),
        (["--index-url", "ftp://mirror/simple"], "--index-url must be an http(s) URL"),
        (["--index-url", "https://x/simple --trusted-host evil"], "--index-url must be an http(s) URL"),
    ],
)
def test_bad_options(int8_bundle, args, message):
    result = runner.invoke(app, ["verify", str(int8_bundle), "--emulate", *args])
    assert result.exit_code == 2 and message in _error(result)


@pytest.mark.skipif(not IS_ROOT, reason="runs the check as root, then drops to nobody")
def test_not_root_is_a_one_line_error(int8_bundle, tmp_path_factory):
    shared = Path(os.path.realpath("/tmp")) / f"edgekit-emulate-test-{os.getpid()}"
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    try:
        bundle = _copy(int8_bundle, shared / "b")
        for path in [shared, *shared.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        proc = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, "-m", "edgekit", "verify", str(bundle), "--emulate"],
            capture_output=True, text=True, check=False, env={**os.environ, "HOME": str(shared)},
        )
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "Error: edgekit verify --emulate needs root (debootstrap, chroot and mounts); run it as root, e.g. with sudo"
    )


@pytest.mark.skipif(not IS_ROOT, reason="the tool check comes after the root check")
def test_missing_tools_name_the_apt_packages(int8_bundle, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = runner.invoke(app, ["verify", str(int8_bundle), "--emulate", "--rootfs-cache", str(tmp_path / "cache")],
                           env={"PATH": str(empty)})
    assert result.exit_code == 1
    assert f"qemu-aarch64-static not found on PATH; install the emulation tools with: {INSTALL_HINT}" in _error(result)
    assert INSTALL_HINT == "apt-get install qemu-user-static binfmt-support debootstrap"


# ---------------------------------------------------------------------------------------------
# The rootfs cache


def test_default_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "edgekit" / "rootfs"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "edgekit" / "rootfs"


def _fake_rootfs(path: Path, release: str, python: str) -> Path:
    """A folder shaped like a finished rootfs (the lookup reads only its info file and python3)."""
    (path / "usr/bin").mkdir(parents=True)
    (path / "usr/bin/python3").write_text("")
    (path / INFO_PATH).parent.mkdir(parents=True, exist_ok=True)
    (path / INFO_PATH).write_text(json.dumps({"schema": INFO_SCHEMA, "release": release, "python": python}))
    return path


def test_lookup_ignores_unfinished_builds(tmp_path):
    _fake_rootfs(tmp_path / ".bookworm-arm64.build-99.tmp", "bookworm", "3.11")  # interrupted: never reused
    (tmp_path / "bookworm-arm64-py3.12" / "usr").mkdir(parents=True)  # no info file: not complete
    assert find_rootfs(tmp_path, "bookworm") is None
    done = _fake_rootfs(tmp_path / "bookworm-arm64-py3.11", "bookworm", "3.11")
    found = find_rootfs(tmp_path, "bookworm")
    assert found.path == done and found.python == "3.11" and not found.built
    assert find_rootfs(tmp_path, "trixie") is None


def test_without_binfmt_only_a_cached_rootfs_will_do(tmp_path):
    with pytest.raises(EmulationError, match="no cached trixie arm64 rootfs .* building one needs binfmt_misc"):
        ensure_rootfs(tmp_path, "trixie", debootstrap=None, progress=lambda m: None)


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    stale = _fake_rootfs(tmp_path / ".bookworm-arm64.build-1.tmp", "bookworm", "3.11")
    lines = []
    with pytest.raises(EmulationError, match="debootstrap of bookworm arm64 failed"):
        ensure_rootfs(tmp_path, "bookworm", debootstrap=Path(shutil.which("false")), progress=lines.append)
    assert not stale.exists() and any("removing an interrupted build" in line for line in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".bookworm-arm64.lock"]


@pytest.mark.skipif(not IS_ROOT, reason="mounting needs root")
def test_removing_a_rootfs_never_follows_a_bind_mount(tmp_path):
    precious = tmp_path / "host-dev"
    precious.mkdir()
    (precious / "keep").write_text("host file")
    rootfs = tmp_path / ".bookworm-arm64.build-7.tmp"
    (rootfs / "dev").mkdir(parents=True)
    proc = subprocess.run(["mount", "--bind", str(precious), str(rootfs / "dev")], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"bind mounts are not possible here: {proc.stderr.strip()}")
    assert mounts_below(rootfs) == [str((rootfs / "dev").resolve())]
    remove_tree(rootfs)
    assert not rootfs.exists() and (precious / "keep").read_text() == "host file"


# ---------------------------------------------------------------------------------------------
# Small pieces


def test_requirements_key_tracks_what_the_venv_holds(tmp_path):
    base = requirements_key("# pinned\nnumpy==2.4.6\nonnxruntime==1.32.0\n", [], "3.11")
    assert base == requirements_key("numpy==2.4.6\n\nonnxruntime==1.32.0  # the runtime\n", [], "3.11")
    assert base != requirements_key("numpy==2.4.5\nonnxruntime==1.32.0\n", [], "3.11")
    assert base != requirements_key("numpy==2.4.6\nonnxruntime==1.32.0\n", [], "3.13")
    wheel = tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_28_aarch64.whl"
    wheel.write_bytes(b"one")
    with_wheel = requirements_key("numpy==2.4.6\nonnxruntime==1.32.0\n", [wheel], "3.11")
    wheel.write_bytes(b"two")
    assert base != with_wheel != requirements_key("numpy==2.4.6\nonnxruntime==1.32.0\n", [wheel], "3.11")


def test_index_url_replaces_the_bundles_index():
    from edgekit.emulate.venv import with_index_url

    text = "# pinned\n--index-url https://download.pytorch.org/whl/cpu\nnumpy==2.4.6\ntorch==2.13.0\n"
    replaced, old = with_index_url(text, "https://pypi.org/simple")
    assert old == "https://download.pytorch.org/whl/cpu"
    assert replaced.splitlines() == ["--index-url https://pypi.org/simple", "# pinned", "numpy==2.4.6", "torch==2.13.0"]
    assert with_index_url("numpy==2.4.6\n", "https://mirror.example/simple") == (
        "--index-url https://mirror.example/simple\nnumpy==2.4.6\n", None)


def test_index_url_does_not_apply_to_an_offline_bundle(int8_bundle, tmp_path):
    import shutil

    from edgekit.bundle.verify import write_checksums

    copy = tmp_path / "bundle"
    shutil.copytree(int8_bundle, copy)
    (copy / "wheels").mkdir()
    (copy / "wheels" / "numpy-2.4.6-cp311-cp311-manylinux_2_28_aarch64.whl").write_bytes(b"wheel")
    write_checksums(copy)
    result = runner.invoke(app, ["verify", str(copy), "--emulate", "--index-url", "https://pypi.org/simple"])
    assert result.exit_code == 2 and "--index-url applies to bundles without wheels/" in _error(result)


def test_the_rootfs_gets_the_targets_cpu_list(tmp_path):
    """QNNPACK (PyTorch's int8 engine on ARM) will not start when cpuinfo finds no CPU list in /sys."""
    from edgekit.emulate.chroot import write_cpu_list

    write_cpu_list(tmp_path, 4)
    folder = tmp_path / "sys" / "devices" / "system" / "cpu"
    assert {p.name: p.read_text() for p in folder.iterdir()} == {"possible": "0-3\n", "present": "0-3\n", "online": "0-3\n"}
    write_cpu_list(tmp_path, 1)
    assert (folder / "possible").read_text() == "0\n"


def test_qemu_cpu_follows_the_target_core_and_is_never_max():
    cpus = ("cortex-a53", "cortex-a72", "cortex-a76", "max")
    assert qemu_cpu_for("Cortex-A72", cpus) == ("cortex-a72", "")
    assert qemu_cpu_for("Cortex-A76", cpus) == ("cortex-a76", "")
    cpu, note = qemu_cpu_for("Cortex-X4", cpus)  # unknown: the ARMv8.0 baseline, not max (SME: wrong int8)
    assert cpu == "cortex-a72" and "qemu cannot emulate Cortex-X4" in note
    assert qemu_cpu_for("max", cpus)[0] == "cortex-a72"


def test_every_emulated_run_pins_a_real_core():
    """Every target edgekit ships names a core qemu emulates; neither verify path can pick max."""
    from edgekit.emulate.native import pinned_cpu
    from edgekit.core.targets import available_targets, load_target

    available = ("cortex-a35", "cortex-a53", "cortex-a57", "cortex-a72", "cortex-a76", "max", "neoverse-n1")
    for name in available_targets():
        target = load_target(name)
        if target.arch != "aarch64":
            continue
        cpu, note = qemu_cpu_for(target.core, available)
        assert cpu == target.mcpu and cpu != "max" and not note, name
        assert pinned_cpu(target.mcpu, available) == target.mcpu
    assert pinned_cpu(None, available) == "cortex-a72"
    with pytest.raises(Exception, match="cannot emulate cortex-x925"):
        pinned_cpu("cortex-x925", available)


@pytest.mark.parametrize("cpu", ["max", "MAX", "max,sme=off", "max,sme=on", "any", "", " "])
def test_no_launch_can_fall_back_to_qemus_max_cpu(cpu, tmp_path):
    """QEMU's max exposes SME, and XNNPACK's SME int8 kernels gave wrong outputs under it (cosine
    0.89): a bundle.json naming it, or an empty QEMU_CPU (QEMU's default is max), is refused before
    anything runs or is written, on the native path and the chroot path alike."""
    from edgekit.emulate import EmulationError
    from edgekit.emulate.chroot import Launcher, make_launcher
    from edgekit.emulate.host import Binfmt, Tools
    from edgekit.emulate.native import pinned_cpu

    available = ("cortex-a53", "cortex-a72", "cortex-a76", "max")
    if cpu:
        with pytest.raises(EmulationError, match="refusing to emulate QEMU's"):
            pinned_cpu(cpu, available)
    else:
        assert pinned_cpu(cpu, available) == "cortex-a72"  # no core named: the ARMv8.0 baseline, pinned
    assert qemu_cpu_for(cpu, available)[0] == "cortex-a72"
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    tools = Tools(qemu=Path("/usr/bin/qemu-aarch64-static"), qemu_version="", unshare=Path("/usr/bin/unshare"),
                  debootstrap=None)
    with pytest.raises(EmulationError, match="refusing to emulate QEMU's"):
        make_launcher(rootfs, tools, Binfmt(False, reason="test"), cpu)
    assert list(rootfs.iterdir()) == []
    with pytest.raises(EmulationError, match="refusing to emulate QEMU's"):
        Launcher(rootfs, Path("/usr/bin/unshare"), "binfmt", cpu)
    good = make_launcher(rootfs, tools, Binfmt(True, None, True), "cortex-a72")  # F flag: nothing installed
    assert good.env()["QEMU_CPU"] == "cortex-a72"


def test_a_timeout_stops_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(120)\n"
    )
    lines = []
    with pytest.raises(EmulationError, match="sleepy timed out after 3 s; it was stopped"):
        run_streamed([sys.executable, "-c", code], what="sleepy", timeout_s=3, on_line=lines.append)
    assert lines == ["started"]
    child = Path(f"/proc/{pid_file.read_text()}")
    for _ in range(100):  # the grandchild got SIGTERM too; give it a moment to exit
        if not child.exists() or child.joinpath("stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the grandchild {child.name} outlived the timeout")


def test_captured_output_keeps_stdout_whole():
    done = run_captured([sys.executable, "-c", "import sys; print('x' * 5000); print('oops', file=sys.stderr); sys.exit(3)"],
                        what="t", timeout_s=60)
    assert done.returncode == 3 and done.stdout.strip() == "x" * 5000 and done.tail == ("oops",)
