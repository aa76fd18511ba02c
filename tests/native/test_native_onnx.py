"""Native ONNX bundles: edgekit-run's ONNX Runtime backend (the wheel's libonnxruntime.so, C API 21
bound at run time), held to Python's ONNX Runtime on the same model file.

The references are independent of the runner: ``onnxruntime.InferenceSession`` in this process
(the same library release, driven through Python), the export's reference.npz (the float model's
outputs), the bundle's SHA256SUMS. Bundles are made through the CLI as a user makes them.
Hostile inputs (a truncated or damaged model.onnx, a missing library) end in one ``Error:`` line.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import CALIB_DIGITS, REPO

TIMEOUT = 600
EDGEKIT = [sys.executable, "-m", "edgekit"]
HOST_TARGET = "x86-64"


def _needs_compiler() -> None:
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler (g++): apt-get install g++")
    if platform.machine() != "x86_64":
        pytest.skip(f"the host bundles here are built for the {HOST_TARGET} target; this host is {platform.machine()}")


def edgekit(*args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([*EDGEKIT, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          stdin=subprocess.DEVNULL)


def run(argv: list, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL, **kwargs)


def one_error_line(done: subprocess.CompletedProcess, code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stdout[-500:], done.stderr[-1000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def onnx_exports(digits_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """The digits model as ONNX for this host's target: fp32, and int8 (static QDQ, calibrated)."""
    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    base = tmp_path_factory.mktemp("native-onnx")
    export(digits_checkpoint, base / "fp32", formats=("onnx",), target=HOST_TARGET)
    quantize(digits_checkpoint, "static", base / "q", HOST_TARGET, calib=CALIB_DIGITS, formats=("onnx",))
    export(base / "q", base / "int8", formats=("onnx",), target=HOST_TARGET)
    return {"fp32": base / "fp32", "int8": base / "int8"}


@pytest.fixture(scope="module")
def host_bundles(onnx_exports, tmp_path_factory) -> dict[str, Path]:
    """``edgekit bundle EXPORT --target x86-64 --runtime native`` for both precisions, through the CLI."""
    _needs_compiler()
    out = tmp_path_factory.mktemp("native-onnx-bundles")
    bundles = {}
    for precision, export in onnx_exports.items():
        done = edgekit("bundle", str(export), "--target", HOST_TARGET, "--runtime", "native",
                       "--out", str(out / precision))
        assert done.returncode == 0, done.stderr[-2000:]
        bundles[precision] = out / precision
    return bundles


def python_ort(model: Path, inputs: np.ndarray) -> np.ndarray:
    """The board package's settings (board/runtimes/onnx_runtime.py), in this process."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: inputs})[0]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_outputs_equal_python_onnxruntime(host_bundles, precision, tmp_path):
    bundle = host_bundles[precision]
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["runtime"]["name"] == "onnxruntime-native"
    assert info["native"]["libraries"] == ["lib/libonnxruntime.so"]
    import onnxruntime

    assert info["runtime"]["version"] == onnxruntime.__version__
    out = tmp_path / "native.npz"
    done = run([bundle / "edgekit-run", "probe", bundle / "model.onnx", bundle / "reference.npz", out, "--threads", "1"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["runtime"]["name"] == "onnxruntime-native"
    reference = np.load(bundle / "reference.npz")
    native = np.load(out)
    batches = sorted({key.split("/")[0] for key in reference.files})
    assert batches == ["b1", "b7"]
    for batch in batches:
        ours = native[f"{batch}/output"]
        theirs = python_ort(bundle / "model.onnx", reference[f"{batch}/input/input"])
        assert ours.dtype == np.float32 and ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)  # the same library, the same settings
        if precision == "fp32":  # and the float model's outputs, as the export's parity check holds them
            np.testing.assert_allclose(ours, reference[f"{batch}/output"], rtol=0, atol=1e-4)
        else:
            assert (ours.argmax(1) == reference[f"{batch}/output"].argmax(1)).mean() >= 0.9


def test_the_board_native_runtime_drives_it(host_bundles):
    """edgekit.board's NativeRuntime (the Python side that runs edgekit-run) on the ONNX build."""
    from edgekit.board.runtimes.native_runtime import NativeRuntime

    bundle = host_bundles["int8"]
    runtime = NativeRuntime(bundle / "model.onnx", 1)
    assert runtime.info["name"] == "onnxruntime-native" and runtime.info["providers"] == ["CPUExecutionProvider"]
    assert runtime.input_specs()[0]["shape"] == [None, 1, 8, 8]
    x = np.load(bundle / "reference.npz")["b7/input/input"]
    np.testing.assert_allclose(runtime.run([x])[0], python_ort(bundle / "model.onnx", x), rtol=0, atol=1e-6)


def test_run_sh_check_and_info_need_no_python(host_bundles):
    bundle = host_bundles["int8"]
    done = run(["sh", bundle / "run.sh", "verify"], env={"PATH": "/usr/bin:/bin"})  # checksums, then the check
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("PASS: model.onnx"), last
    doc = json.loads(done.stdout[:done.stdout.rindex("\n", 0, len(done.stdout.rstrip()))])
    assert doc["runtime"]["name"] == "onnxruntime-native" and doc["model"]["format"] == "onnx"
    info = json.loads(run(["sh", bundle / "run.sh", "info"]).stdout)
    assert info["inputs"][0]["sizes"] == [-1, 1, 8, 8] and info["format"] == "onnx"
    assert info["onnxruntime_version"] == info["runtime"]["version"]
    notices = (bundle / "THIRD_PARTY_NOTICES.txt").read_text()
    assert "ONNX Runtime" in notices and "MIT License" in notices


def test_edgekit_bench_runs_the_host_bundle(host_bundles, tmp_path):
    out = tmp_path / "bench.json"
    done = edgekit("bench", str(host_bundles["fp32"]), "--min-runs", "5", "--warmup", "1", "--min-time", "0",
                   "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(out.read_text())
    result = doc["results"][0] if "results" in doc else doc
    assert result["runtime"]["name"] == "onnxruntime-native"
    assert result["timing"]["runs"] >= 5
    assert result["memory"]["peak_rss"] > result["memory"]["rss_before_load"] > 0  # MB: the library and the session


SERVE_LINES = ['{"cmd": "run", "n": 3, "warm": 1}', "not json", '{"cmd": "run", "n": 0}', '{"cmd": "finish"}']


def _serve(argv: list, lines: list[str]) -> tuple[dict, list[dict], int]:
    proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        ready = json.loads(proc.stdout.readline())
        replies = []
        for line in lines:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            replies.append(json.loads(proc.stdout.readline()))
        proc.stdin.close()
        return ready, replies, proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_protocol_matches_runner_py(host_bundles):
    """``bench --serve`` (what edgekit bench drives on a board) answers as the Python runner does."""
    bundle = host_bundles["fp32"]
    args = [bundle / "model.onnx", "--serve", "--threads", "1"]
    ready, replies, code = _serve([bundle / "edgekit-run", "bench", *args], SERVE_LINES)
    py_ready, py_replies, py_code = _serve([sys.executable, "-m", "edgekit.board.runner", *args, "--format", "onnx"],
                                           SERVE_LINES)
    assert code == 0 == py_code
    assert list(ready) == list(py_ready) and ready["input_shapes"] == py_ready["input_shapes"]
    for ours, theirs in zip(replies, py_replies):
        assert list(ours) == list(theirs) and ours["ok"] == theirs["ok"]
        if not ours["ok"]:
            assert ours["error"] == theirs["error"]
    assert len(replies[0]["ns"]) == 3
    assert replies[-1]["result"]["runtime"]["name"] == "onnxruntime-native"
    assert sorted(replies[-1]["result"]) == sorted(py_replies[-1]["result"])


def _copy(bundle: Path, dest: Path) -> Path:
    shutil.copytree(bundle, dest)
    return dest


@pytest.mark.parametrize("damage", ["truncated", "zeroed-tail", "not-onnx", "empty"])
def test_damaged_model_is_one_error_line(host_bundles, tmp_path, damage):
    bundle = _copy(host_bundles["fp32"], tmp_path / "b")
    good = (bundle / "model.onnx").read_bytes()
    bad = {"truncated": good[:len(good) // 2], "zeroed-tail": good[:200] + bytes(len(good) - 200),
           "not-onnx": b"PK\x03\x04" + good[4:], "empty": b""}[damage]
    (bundle / "model.onnx").write_bytes(bad)
    out = tmp_path / "out.npz"
    for argv in (["sh", bundle / "run.sh", "check"],
                 [bundle / "edgekit-run", "probe", bundle / "model.onnx", bundle / "reference.npz", out],
                 [bundle / "edgekit-run", "bench", bundle / "model.onnx", "--min-runs", "1"]):
        line = one_error_line(run(argv), 1)
        assert "model.onnx" in line and "ONNX" in line, line
    assert not out.exists()  # nothing half-written
    line = one_error_line(run(["sh", bundle / "run.sh", "verify"]), 1)  # the checksums catch it first
    assert "SHA256SUMS" in line


def test_missing_or_foreign_library_is_one_error_line(host_bundles, tmp_path):
    bundle = _copy(host_bundles["fp32"], tmp_path / "b")
    library = bundle / "lib" / "libonnxruntime.so"
    library.unlink()
    line = one_error_line(run(["sh", bundle / "run.sh", "check"]), 1)
    assert "libonnxruntime.so is missing" in line, line
    library.write_bytes(b"\x7fELF" + bytes(60))  # not a loadable library
    line = one_error_line(run([bundle / "edgekit-run", "info", bundle / "model.onnx"]), 1)
    assert "cannot load the ONNX Runtime library" in line, line
    other = Path("/lib/x86_64-linux-gnu/libz.so.1")  # a real shared library, not ONNX Runtime's
    if other.exists():
        shutil.copyfile(other.resolve(), library)
        line = one_error_line(run([bundle / "edgekit-run", "info", bundle / "model.onnx"]), 1)
        assert "is not an ONNX Runtime library" in line, line


def test_the_onnx_build_names_its_runtime_and_refuses_a_pte(host_bundles):
    """The ONNX build is its own program: its --version names ONNX Runtime, and a .pte is not its format."""
    bundle = host_bundles["fp32"]
    version = run([bundle / "edgekit-run", "--version"]).stdout
    assert "ONNX Runtime 1." in version, version
    fake = bundle.parent / "program.pte"
    fake.write_bytes(b"\x00\x00\x00\x00ET12" + bytes(64))
    line = one_error_line(run([bundle / "edgekit-run", "info", fake]), 1)
    assert "program.pte" in line
    fake.unlink()


@pytest.mark.slow
def test_emulated_verify_of_an_rpi4_bundle(onnx_exports, tmp_path):
    """``edgekit bundle --target rpi4 --runtime native`` (cross-compiled, the aarch64 wheel's library),
    then ``edgekit verify --emulate``: the runner under QEMU (Cortex-A72, sandboxed, no /sys) agrees
    with Python's ONNX Runtime on this host, and run.sh check passes in a Python-free root."""
    if shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64-static") is None:
        pytest.skip("needs the aarch64 cross compiler and qemu-user-static")
    export = tmp_path / "export"
    shutil.copytree(onnx_exports["int8"], export)
    done = edgekit("bundle", str(export), "--target", "rpi4", "--runtime", "native", "--force",
                   "--out", str(tmp_path / "bundle"))
    assert done.returncode == 0, done.stderr[-2000:]
    report = tmp_path / "verify.json"
    done = edgekit("verify", str(tmp_path / "bundle"), "--emulate", "--json", str(report), timeout=1800)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    doc = json.loads(report.read_text())
    assert doc["passed"] is True
    assert doc["emulation"]["qemu_cpu"] == "cortex-a72"
    assert doc["emulation"]["runtime"]["name"] == "onnxruntime-native"
    for batch in doc["batches"]:
        assert batch["emulated_vs_host"]["max_abs"] <= 1e-5
    entry = doc["emulation"].get("entry_point")
    if entry is not None:  # root, binfmt and the cached rootfs: run.sh in a root without Python
        assert entry["ok"] and not entry["python_in_root"], entry


def test_headers_without_apt_are_one_line(tmp_path, monkeypatch):
    """Where neither the system nor edgekit's cache has ONNX Runtime's header and apt is missing: one line naming the package."""
    from edgekit.core.errors import EdgekitError
    from edgekit.native import ort_headers

    if (ort_headers.api_version(ort_headers.SYSTEM_INCLUDE) or 0) >= ort_headers.API_VERSION:
        pytest.skip("this host has libonnxruntime-dev installed")
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(EdgekitError, match=r"libonnxruntime-dev.*no apt-get or dpkg-deb"):
        ort_headers.ort_include()
    assert not (tmp_path / "cache" / "native" / "onnxruntime-headers-trixie" / "include").exists()
