"""edgekit-run, the native C++ runner for ExecuTorch programs, held to the Python board scripts.

The binary is compiled once per module (``build_runner``) against the executorch wheel's own headers
and libraries. Every claim is checked against an independent reference: the Python ExecuTorch
runtime's outputs (``edgekit.formats.executorch.predictor``), ``check_outputs.py``/``probe.py``/
``runner.py`` run on the same files, numpy's percentiles, ``np.load``/``zipfile`` for what it
writes, and edgekit's own bench-document reader. Hostile inputs (damaged .npy/.npz/.pte files, bad
command lines) each end in one ``Error:`` line, exit 2 or 1, nothing written, nothing crashed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import CALIB_DIGITS, REPO
from corpus.hostile import child_pids, leftovers, snapshot

LINKED = ("libexecutorch.so", "libexecutorch_backend_xnnpack.so", "libexecutorch_threadpool.so")
KERNELS = ("libexecutorch_kernels_optimized.so", "libexecutorch_kernels_quantized.so")
QEMU = ("qemu-aarch64-static", "-cpu", "cortex-a72", "-L", "/usr/aarch64-linux-gnu")
TIMEOUT = 300


def host_executorch() -> Path:
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("executorch is not installed (pip install 'edgekit-ml[executorch]')")
    return Path(list(spec.submodule_search_locations)[0])


def build_runner(folder: Path, arch: str = "host") -> Path:
    """edgekit-run as edgekit builds it (edgekit.native.build: cached, the wheel's own libraries),
    staged into ``folder`` with only the libraries it links (as a bundle of a delegated program holds).

    ``arch`` "host" builds for this machine; "aarch64" cross-compiles for a Cortex-A72 against the
    aarch64 wheel (fetched once from the package index)."""
    from edgekit.native.build import build_runner as build

    built = build("aarch64", "cortex-a72") if arch == "aarch64" else build(platform.machine(), None)
    (folder / "lib").mkdir(parents=True, exist_ok=True)
    out = folder / "edgekit-run"
    shutil.copyfile(built.binary, out)
    os.chmod(out, 0o755)
    for name in LINKED:
        shutil.copyfile(built.library(name), folder / "lib" / name)
    return out


def place_runner(runner: Path, folder: Path) -> Path:
    """The runner and the libraries it links, copied into ``folder`` (RUNPATH $ORIGIN/lib: they travel together)."""
    (folder / "lib").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(runner, folder / "edgekit-run")
    os.chmod(folder / "edgekit-run", 0o755)
    for name in LINKED:
        shutil.copyfile(runner.parent / "lib" / name, folder / "lib" / name)
    return folder / "edgekit-run"


# ---------------------------------------------------------------------------------------------
# Fixtures: the binary, and real programs exported from the session's digits model


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler (g++): apt-get install g++")
    return build_runner(tmp_path_factory.mktemp("edgekit-run") / "bin")


@pytest.fixture(scope="module")
def fp32_pte(digits_checkpoint, tmp_path_factory) -> Path:
    host_executorch()
    from edgekit.export.api import export

    out = tmp_path_factory.mktemp("native-fp32") / "export"
    export(digits_checkpoint, out, formats=("executorch",), target="rpi4")
    return out


@pytest.fixture(scope="module")
def int8_pte(digits_checkpoint, tmp_path_factory) -> Path:
    host_executorch()
    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    base = tmp_path_factory.mktemp("native-int8")
    quantize(digits_checkpoint, "static", base / "q", "rpi4", calib=CALIB_DIGITS, formats=("executorch",))
    export(base / "q", base / "export", formats=("executorch",), target="rpi4")
    return base / "export"


@pytest.fixture(params=["fp32", "int8"])
def program(request) -> Path:
    return request.getfixturevalue(f"{request.param}_pte")


def run(binary: Path, *args, cwd=None, env=None, stdin=None, timeout=TIMEOUT, prefix=()) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "EDGEKIT_DEBUG"}
    environment.update(env or {})
    return subprocess.run([*prefix, str(binary), *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=environment, input=stdin, timeout=timeout)


def python_board(module: str, *args, cwd=None) -> subprocess.CompletedProcess:
    """One of the Python board scripts (edgekit.board.check / probe / runner) in a subprocess."""
    return subprocess.run([sys.executable, "-m", f"edgekit.board.{module}", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or REPO, timeout=TIMEOUT, env={**os.environ, "TORCH_CPP_LOG_LEVEL": "ERROR"})


def assert_error(done: subprocess.CompletedProcess, code: int, message: str | None = None) -> str:
    """Exit ``code`` (a status, never a signal), exactly one stderr line ``Error: ...``, nothing on stdout."""
    assert done.returncode == code, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stdout == "", (done.stdout[-500:], done.stderr[-500:])
    if message is not None:
        assert message in lines[0], lines[0]
    return lines[0]


def check_doc(done: subprocess.CompletedProcess) -> tuple[dict, str]:
    from edgekit.board.check import read_output

    assert done.returncode in (0, 1), done.stderr
    return read_output(done.stdout)


# ---------------------------------------------------------------------------------------------
# The program itself


def test_version_help_and_usage(runner):
    done = run(runner, "--version")
    assert done.returncode == 0 and done.stdout == "edgekit-run 0.1.0 (ExecuTorch 1.5.1)\n" and done.stderr == ""
    for args in (("--help",), ("bench", "--help"), ("check", "--help"), ("probe", "--help"), ("info", "--help")):
        done = run(runner, *args)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert done.stdout.startswith("usage: edgekit-run") and max(map(len, done.stdout.splitlines())) <= 80
    assert_error(run(runner), 2, "a command is required")
    assert_error(run(runner, "frobnicate"), 2, "unknown command 'frobnicate'")


def test_info_describes_the_program(runner, int8_pte):
    done = run(runner, "info", int8_pte / "model.pte")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    info = json.loads(done.stdout)
    from edgekit.native.program import read_methods  # an independent reader of the same flatbuffer

    methods = read_methods(int8_pte / "model.pte")
    assert info["methods"] == [m.name for m in methods]
    assert info["backends"] == sorted(set(methods[0].delegates)) == info["registered_backends"]
    manifest = json.loads((int8_pte / "manifest.json").read_text())
    bound = manifest["files"][0]["details"]["max_shapes"]["batch"]
    assert info["inputs"] == [{"index": 0, "tag": "Tensor", "dtype": "float32", "sizes": [bound, 1, 8, 8]}]
    assert info["outputs"][0]["sizes"] == [bound, 10] and info["batch_bound"] == bound
    assert info["planned_memory_bytes"] == sum(info["planned_buffers"]) > 0
    assert info["model"]["sha256"] == manifest["files"][0]["sha256"] and info["executorch_version"] == "1.5.1"
    assert info["threads"] == 1 and info["schema"] == "edgekit.native-info"
    assert info["kernels"] == []  # no lib/ beside this binary


# ---------------------------------------------------------------------------------------------
# Outputs: the Python ExecuTorch runtime is the reference


def _reference_cases(folder: Path) -> dict:
    from edgekit.formats.reference import read_reference

    return read_reference(folder / "reference.npz")


def test_outputs_equal_the_python_runtime(runner, program, tmp_path):
    from edgekit.formats.executorch import predictor

    out = tmp_path / "out.npz"
    done = run(runner, "probe", program / "model.pte", program / "reference.npz", out)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    predict = predictor(program / "model.pte")
    with np.load(out, allow_pickle=False) as native:
        assert sorted(native.files) == sorted(f"b{b}/output" for b in _reference_cases(program))
        for batch, (inputs, _) in _reference_cases(program).items():
            want = np.asarray(predict(inputs), dtype=np.float32)
            got = native[f"b{batch}/output"]
            assert got.dtype == np.float32 and got.shape == want.shape
            if "int8" in str(program):
                assert got.tobytes() == want.tobytes()  # bit-identical
            else:
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_the_board_native_runtime_drives_it(runner, int8_pte):
    """edgekit.board's NativeRuntime (the Python side that runs this binary) reads its info and probe."""
    from edgekit.board.runtimes.native_runtime import NativeRuntime
    from edgekit.formats.executorch import predictor

    runtime = NativeRuntime(int8_pte / "model.pte", 1, runner=runner)
    assert runtime.info["version"] == "1.5.1" and runtime.info["providers"] == ["XnnpackBackend"]
    assert runtime.input_specs()[0]["shape"] == [None, 1, 8, 8] and runtime.input_specs()[0]["dtype"] == "float32"
    inputs = _reference_cases(int8_pte)[7][0]
    assert runtime.predict(inputs).tobytes() == np.asarray(predictor(int8_pte / "model.pte")(inputs), np.float32).tobytes()


def test_batches_past_the_planned_bound_run_in_chunks(runner, int8_pte, tmp_path):
    """A batch larger than the program's memory plan is split (as the Python runtime does)."""
    from edgekit.formats.executorch import predictor

    bound = json.loads((int8_pte / "manifest.json").read_text())["files"][0]["details"]["max_shapes"]["batch"]
    rows = 2 * bound + 3
    data = np.random.default_rng(7).standard_normal((rows, 1, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "ref.npz", **{f"b{rows}/input/input": data})
    done = run(runner, "probe", int8_pte / "model.pte", tmp_path / "ref.npz", tmp_path / "out.npz")
    assert done.returncode == 0, done.stderr
    got = np.load(tmp_path / "out.npz")[f"b{rows}/output"]
    assert got.tobytes() == np.asarray(predictor(int8_pte / "model.pte")({"input": data}), np.float32).tobytes()


def test_probe_matches_probe_py(runner, int8_pte, tmp_path):
    native_out, python_out = tmp_path / "native.npz", tmp_path / "python.npz"
    before = set(os.listdir(tmp_path))
    native = run(runner, "probe", int8_pte / "model.pte", int8_pte / "reference.npz", native_out, "--inputs", "input")
    python = python_board("probe", int8_pte / "model.pte", int8_pte / "reference.npz", python_out, "--inputs", "input")
    assert native.returncode == 0 == python.returncode, (native.stderr, python.stderr)
    a, b = json.loads(native.stdout), json.loads(python.stdout)
    assert list(a) == list(b)  # same keys, same order
    assert {k: a[k] for k in ("machine", "format", "threads", "batches")} == {k: b[k] for k in ("machine", "format", "threads", "batches")}
    assert a["python"] is None and a["numpy"] is None and a["runtime"]["name"] == "executorch-native"
    assert a["runtime"]["providers"] == b["runtime"]["providers"] and a["runtime"]["version"] == b["runtime"]["version"]
    with np.load(native_out) as x, np.load(python_out) as y:
        assert x.files == y.files
        for key in x.files:
            assert x[key].dtype == y[key].dtype and x[key].tobytes() == y[key].tobytes()
    with zipfile.ZipFile(native_out) as archive:  # a plain stored zip whose CRCs are right
        assert archive.testzip() is None
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
        assert archive.namelist() == [f"{key}.npy" for key in y.files]
    assert set(os.listdir(tmp_path)) == before | {"native.npz", "python.npz"}  # no temporary left behind
    assert leftovers(tmp_path, "native.npz") == ["native.npz"]


def test_fortran_order_and_zip64_central_directory_are_read(runner, int8_pte, tmp_path):
    """What numpy itself reads, edgekit-run reads: a Fortran-ordered array, zip64 records and extra fields."""
    cases = _reference_cases(int8_pte)
    arrays = {}
    for batch, (inputs, output) in cases.items():
        arrays[f"b{batch}/input/input"] = np.asfortranarray(inputs["input"])
        arrays[f"b{batch}/output"] = output
    members = [(f"{k}.npy", _npy(v)) for k, v in arrays.items()]
    (tmp_path / "ref.npz").write_bytes(_zip64_archive(members))
    with np.load(tmp_path / "ref.npz") as check:  # the reference reader agrees it is valid
        assert np.isfortran(check["b7/input/input"])
    fortran = run(runner, "check", "--model", int8_pte / "model.pte", "--reference", tmp_path / "ref.npz")
    plain = run(runner, "check", "--model", int8_pte / "model.pte")
    assert fortran.returncode == 0 == plain.returncode, fortran.stderr
    assert check_doc(fortran)[0]["outputs_sha256"] == check_doc(plain)[0]["outputs_sha256"]


# ---------------------------------------------------------------------------------------------
# check: the same document and verdict as check_outputs.py


def _compare_check_docs(native: dict, python: dict, exact: bool) -> None:
    def keys(doc):
        return {k: sorted(v) if isinstance(v, dict) and k not in ("batches",) else None for k, v in doc.items()}

    assert keys(native) == keys(python)
    assert native["schema"] == python["schema"] and native["model"] == python["model"]
    assert native["python"] is None and native["runtime"]["name"] == "executorch-native"
    assert native["machine"] == python["machine"] and native["ok"] == python["ok"]
    assert native["failures"] == python["failures"] and list(native["batches"]) == list(python["batches"])
    for batch, ours in native["batches"].items():
        theirs = python["batches"][batch]
        assert sorted(ours) == sorted(theirs) and ours["shape"] == theirs["shape"]
        assert ours["top1_agreement"] == theirs["top1_agreement"]
        if exact:
            assert ours["outputs_sha256"] == theirs["outputs_sha256"]
        for key in ("max_abs", "cosine"):
            assert ours[key] == pytest.approx(theirs[key], abs=1e-6)
    for key in ("max_abs", "cosine", "top1_agreement"):
        assert native[key] == pytest.approx(python[key], abs=1e-6)
    if exact:
        assert native["outputs_sha256"] == python["outputs_sha256"]


def test_check_matches_check_outputs_py(runner, program):
    exact = "int8" in str(program)
    native = run(runner, "check", "--model", program / "model.pte")
    python = python_board("check", "--model", program / "model.pte")
    assert native.returncode == 0 == python.returncode and native.stderr == "", (native.stderr, python.stderr)
    (ours, ours_verdict), (theirs, theirs_verdict) = check_doc(native), check_doc(python)
    _compare_check_docs(ours, theirs, exact)
    assert ours_verdict.startswith("PASS: model.pte on ") and theirs_verdict.startswith("PASS: model.pte on ")
    if exact:
        assert ours_verdict == theirs_verdict
    # limits broken: both FAIL, exit 1, the same failure texts
    limits = ("--max-abs", "1e-9", "--min-cosine", "1.5", "--min-top1", "1.5")
    native = run(runner, "check", "--model", program / "model.pte", *limits)
    python = python_board("check", "--model", program / "model.pte", *limits)
    assert native.returncode == 1 == python.returncode, (native.stderr, python.stderr)
    (ours, ours_verdict), (theirs, theirs_verdict) = check_doc(native), check_doc(python)
    assert ours_verdict.startswith("FAIL: outputs differ from the reference: ")
    assert ours["ok"] is False and len(ours["failures"]) == len(theirs["failures"]) == 3
    if exact:
        assert ours_verdict == theirs_verdict
        _compare_check_docs(ours, theirs, exact)


def test_check_reads_the_bundle_beside_the_binary(runner, int8_pte, tmp_path):
    """Without --model: bundle.json in the binary's own folder names the model; --json writes atomically."""
    bundle = tmp_path / "bundle"
    shutil.copytree(int8_pte, bundle)
    place_runner(runner, bundle)
    (bundle / "bundle.json").write_text(json.dumps({"model": "model.pte", "format": "executorch"}))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    done = run(bundle / "edgekit-run", "check", "--json", tmp_path / "check.json", cwd=elsewhere)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("PASS: model.pte on ") and done.stdout.count("\n") == 1
    doc = json.loads((tmp_path / "check.json").read_text())
    assert doc["model"]["sha256"] == hashlib.sha256((bundle / "model.pte").read_bytes()).hexdigest()
    assert leftovers(tmp_path, "check.json") == ["check.json"]
    # a bundle.json that points outside the bundle is refused
    (bundle / "bundle.json").write_text(json.dumps({"model": "../cwd/../bundle/model.pte"}))
    before = snapshot(tmp_path)
    assert_error(run(bundle / "edgekit-run", "check", cwd=elsewhere), 2, "not a file inside the bundle")
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------------------------------------
# bench: the document, the statistics, the serve protocol


def test_bench_document_statistics_and_memory(runner, int8_pte, tmp_path):
    from edgekit.records.result import from_document

    out, samples = tmp_path / "sub" / "bench.json", tmp_path / "samples.json"
    done = run(runner, "bench", int8_pte / "model.pte", "--threads", "1", "--min-runs", "200", "--min-time", "0.2",
               "--json", out, "--samples-json", samples, "--target", "rpi4")
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "", done.stderr
    doc = json.loads(out.read_text())
    assert out.read_text() == json.dumps(doc, indent=2, sort_keys=True) + "\n"  # json.dumps' own layout
    result = from_document(doc)[0]  # the host's reader accepts it
    ns = np.asarray(json.loads(samples.read_text()), dtype=np.int64)
    timing = doc["results"][0]["timing"]
    assert timing["runs"] == len(ns) >= 200 and ns.sum() / 1e9 == pytest.approx(timing["total_s"], rel=1e-12)
    assert timing["total_s"] >= 0.2  # both min_runs and min_time reached
    for q in (50, 90, 95, 99):
        assert timing[f"p{q}"] == pytest.approx(np.percentile(ns, q) / 1e6, rel=1e-12)
    assert timing["mean"] == pytest.approx(ns.mean() / 1e6, rel=1e-12)
    assert timing["std"] == pytest.approx((ns / 1e6).std(), rel=1e-9)
    assert (timing["min"], timing["max"]) == (ns.min() / 1e6, ns.max() / 1e6)
    r = doc["results"][0]
    assert r["runtime"] == {"name": "executorch-native", "version": "1.5.1", "threads": 1, "engine": None,
                            "providers": ["XnnpackBackend"], "import_ms": 0.0, "torch_imported": False}
    manifest = json.loads((int8_pte / "manifest.json").read_text())["files"][0]
    assert r["model"]["sha256"] == manifest["sha256"] and r["model"]["precision"] == "int8"
    assert r["model"]["variant"] == manifest["details"]["variant"] and r["model"]["accuracy"] == manifest["metrics"]["accuracy"]
    assert r["input_shapes"] == {"input": [1, 1, 8, 8]} and r["settings"]["inputs"] == "manifest"
    assert r["host"]["python"] is None and r["host"]["runtimes"] == {"executorch": "1.5.1"}
    assert r["target"] == "rpi4" and r["mode"] == "local" and r["notes"] == []
    assert 0 < result.memory.rss_before_load <= result.memory.peak_rss < 64.0  # MiB: no Python, no torch
    assert result.throughput_per_s == pytest.approx(timing["runs"] / timing["total_s"])


def test_bench_stopping_rule_and_stdout(runner, int8_pte):
    done = run(runner, "bench", int8_pte / "model.pte", "--min-runs", "20", "--min-time", "0", "--warmup", "0")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    doc = json.loads(done.stdout)  # stdout is exactly the document
    assert doc["results"][0]["timing"]["runs"] == 20
    done = run(runner, "bench", int8_pte / "model.pte", "--min-runs", "5", "--max-runs", "30", "--min-time", "1000",
               "--json", "-", "--emulated", "--batch", "3")
    r = json.loads(done.stdout)["results"][0]
    assert r["timing"]["runs"] == 30 and r["mode"] == "emulated" and r["host"]["emulated"] is True
    assert r["notes"] == ["stopped at --max-runs 30 before reaching --min-time 1000 s"]
    assert r["input_shapes"] == {"input": [3, 1, 8, 8]} and r["settings"]["batch"] == 3
    assert r["host"]["cpu_model"] is None and r["host"]["isa"] == []  # /proc facts are not the target's


def test_bench_result_matches_runner_py(runner, int8_pte, tmp_path):
    """The same keys at every level as runner.py's result, and the same input resolution."""
    args = (int8_pte / "model.pte", "--min-runs", "10", "--min-time", "0", "--threads", "1", "--seed", "3")
    native = run(runner, "bench", *args)
    python = python_board("runner", *args, "--json", tmp_path / "python.json")
    assert native.returncode == 0 == python.returncode, (native.stderr, python.stderr[-2000:])
    ours = json.loads(native.stdout)["results"][0]
    theirs = json.loads((tmp_path / "python.json").read_text())["results"][0]
    assert sorted(ours) == sorted(theirs)
    for table in ("model", "settings", "timing", "memory", "host"):
        assert sorted(ours[table]) == sorted(theirs[table]), table
    assert sorted(ours["runtime"]) == sorted(k for k in theirs["runtime"] if k != "threads_note")
    assert ours["model"] == theirs["model"] and ours["settings"] == theirs["settings"]
    assert ours["input_shapes"] == theirs["input_shapes"] and ours["notes"] == theirs["notes"]
    for key in ("machine", "cpu_model", "board", "logical_cores", "usable_cores", "isa", "os", "emulated"):
        assert ours["host"][key] == theirs["host"][key], key


SERVE_SCRIPT = [
    '{"cmd": "run", "n": 4, "warm": 2}',
    "",
    "not json",
    '{"cmd": "run", "n": 0}',
    '{"cmd": "run", "n": 1.5}',
    '{"cmd": "run", "n": true}',
    '{"cmd": "run", "n": 2, "warm": -1}',
    '{"cmd": "run", "n": 1000001}',
    '{"cmd": "run", "n": 99999999999999999999999}',
    "[1, 2]",
    '{"cmd": "jump", "n": 1}',
    '{"cmd": "run", "n": 3}',
    '{"cmd": "finish"}',
]


def _serve(argv: list[str], lines: list[str]) -> tuple[dict, list[dict], int]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env={**os.environ, "TORCH_CPP_LOG_LEVEL": "ERROR"})
    try:
        ready = json.loads(proc.stdout.readline())
        replies = []
        for line in lines:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            if line.strip():
                replies.append(json.loads(proc.stdout.readline()))
        proc.stdin.close()
        assert proc.stdout.read() == ""
        return ready, replies, proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_protocol_matches_runner_py(runner, int8_pte):
    from edgekit.records.result import from_document

    args = [str(int8_pte / "model.pte"), "--serve", "--threads", "1"]
    ready, replies, code = _serve([str(runner), "bench", *args], SERVE_SCRIPT)
    py_ready, py_replies, py_code = _serve([sys.executable, "-m", "edgekit.board.runner", *args], SERVE_SCRIPT)
    assert code == 0 == py_code
    assert list(ready) == list(py_ready) == ["event", "load_ms", "first_run_ms", "input_shapes", "pid"]
    assert ready["input_shapes"] == py_ready["input_shapes"] and ready["event"] == "ready"
    assert len(replies) == len(py_replies)
    for ours, theirs in zip(replies, py_replies):
        assert list(ours) == list(theirs) and ours["ok"] == theirs["ok"]
        if not ours["ok"]:
            assert ours["error"] == theirs["error"]
        elif "ns" in ours:
            assert len(ours["ns"]) == len(theirs["ns"]) and all(isinstance(v, int) and v > 0 for v in ours["ns"])
            assert ours["settle_ms"] is None or 0 <= ours["settle_ms"] <= 600
    samples = np.asarray(replies[0]["ns"] + replies[-2]["ns"])
    result = replies[-1]["result"]
    assert result["settings"]["serve"] is True and result["timing"]["runs"] == len(samples) == 7
    assert result["timing"]["p50"] == pytest.approx(np.percentile(samples, 50) / 1e6, rel=1e-12)
    assert result["timing"]["p90"] == pytest.approx(np.percentile(samples, 90) / 1e6, rel=1e-12)
    from_document({"schema": "edgekit.bench", "schema_version": 1, "results": [result]})
    assert sorted(result) == sorted(py_replies[-1]["result"])
    assert not child_pids()


def test_serve_end_of_input_and_long_lines(runner, int8_pte):
    ready, replies, code = _serve([str(runner), "bench", str(int8_pte / "model.pte"), "--serve"],
                                  ['{"cmd": "finish"}', "x" * 200_000, '{"cmd": "run", "n": 1}'])
    assert code == 0 and ready["event"] == "ready"
    assert replies[0] == {"ok": False, "error": "no timed runs yet"}
    assert replies[1]["ok"] is False and "longer than" in replies[1]["error"]
    assert replies[2]["ok"] is True and len(replies[2]["ns"]) == 1  # still serving; EOF ends it, exit 0


# ---------------------------------------------------------------------------------------------
# The runtime's log, backends and kernel libraries


def test_runtime_log_only_with_edgekit_debug(runner, int8_pte):
    quiet = run(runner, "check", "--model", int8_pte / "model.pte")
    loud = run(runner, "check", "--model", int8_pte / "model.pte", env={"EDGEKIT_DEBUG": "1"})
    assert quiet.returncode == 0 == loud.returncode
    assert quiet.stderr == "" and "[I " in loud.stderr  # ExecuTorch's info lines, shown on request only
    assert check_doc(quiet) == check_doc(loud)  # and never on stdout


def test_unregistered_backend_names_the_registered_ones(runner, int8_pte, tmp_path):
    data = (int8_pte / "model.pte").read_bytes()
    assert b"XnnpackBackend" in data
    (tmp_path / "other.pte").write_bytes(data.replace(b"XnnpackBackend", b"VulkanBackend\x00"))
    line = assert_error(run(runner, "check", "--model", tmp_path / "other.pte", "--reference",
                            int8_pte / "reference.npz"), 1)
    assert "VulkanBackend" in line and "registered backends: XnnpackBackend" in line


@pytest.mark.slow
def test_transformer_lm_needs_the_kernel_libraries(runner, tmp_path):
    """A transformer-lm program keeps portable operators outside XNNPACK: without the kernel library it
    does not load (one line naming the operator and where the libraries go); with it in lib/ it runs."""
    from edgekit.export.api import export
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    train(TrainConfig(model="transformer-lm", max_steps=20, seed=0), tmp_path / "lm")
    export(tmp_path / "lm", tmp_path / "lm-x", formats=("executorch",))
    model = tmp_path / "lm-x" / "model.pte"
    line = assert_error(run(runner, "check", "--model", model), 1, "forward needs an operator")
    assert "(runtime: " in line and "aten::" in line and "libexecutorch_kernels_optimized.so" in line
    folder = tmp_path / "with-kernels"
    place_runner(runner, folder)
    shutil.copyfile(host_executorch() / "lib" / KERNELS[0], folder / "lib" / KERNELS[0])
    info = json.loads(run(folder / "edgekit-run", "info", model).stdout)
    assert info["kernels"] == [KERNELS[0]] and info["registered_operators"] > 200
    native = run(folder / "edgekit-run", "check", "--model", model)
    python = python_board("check", "--model", model)
    assert native.returncode == 0 == python.returncode, native.stderr
    _compare_check_docs(check_doc(native)[0], check_doc(python)[0], exact=False)


# ---------------------------------------------------------------------------------------------
# Hostile inputs: damaged .npy/.npz/.pte files and command lines


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _raw_npy(header: str, data: bytes = b"") -> bytes:
    text = header.encode("latin1") + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def _stored_zip(members: list[tuple[str, bytes]], compress: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compress) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return buf.getvalue()


def _zip64_archive(members: list[tuple[str, bytes]]) -> bytes:
    """A stored zip whose central directory uses zip64 extra fields and a zip64 end record."""
    body, directory = b"", b""
    for name, data in members:
        raw, crc, offset = name.encode(), zipfile.crc32(data), len(body)
        extra = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0x21, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(raw),
                            len(extra)) + raw + extra + data
        cextra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), offset)
        directory += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0x21, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                                 len(raw), len(cextra), 0, 0, 0, 0, 0xFFFFFFFF) + raw + cextra
    start, size = len(body), len(directory)
    end64 = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(members), len(members), size, start)
    locator = struct.pack("<IIQI", 0x07064B50, 0, start + size, 1)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return body + directory + end64 + locator + end


def _patch_central(data: bytes, field_offset: int, fmt: str, value: int) -> bytes:
    """Overwrite a field of the first central directory record."""
    at = data.index(b"PK\x01\x02") + field_offset
    return data[:at] + struct.pack(fmt, value) + data[at + struct.calcsize(fmt):]


def _set_flags(data: bytes, flag: int) -> bytes:
    out = bytearray(data)
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = out.find(signature)
        while at >= 0:
            struct.pack_into("<H", out, at + offset, struct.unpack_from("<H", out, at + offset)[0] | flag)
            at = out.find(signature, at + 4)
    return bytes(out)


def _hostile_npz(kind: str, good: bytes, arrays: dict, first: str) -> bytes:
    """A damaged archive, made from a good one (``good``, holding ``arrays``): member ``first`` is the
    one whose header or data is damaged."""
    x1 = arrays[first]

    def replacing(member: bytes) -> bytes:  # the archive with that member replaced, its CRC right
        return _stored_zip([(f"{first}.npy", member)] + [(f"{k}.npy", _npy(v)) for k, v in arrays.items() if k != first])

    makers = {
        # truncated files
        "empty": lambda: b"",
        "truncated-half": lambda: good[: len(good) // 2],
        "truncated-end-record": lambda: good[:-10],
        "truncated-member": lambda: good[:200] + good[-22:],
        "not-a-zip": lambda: b"\x93NUMPY" + bytes(range(256)) * 4,
        # bit flips (the CRC catches the data, the parser the rest)
        "flipped-data-byte": lambda: good[:150] + bytes([good[150] ^ 0x40]) + good[151:],
        "flipped-central-signature": lambda: good.replace(b"PK\x01\x02", b"PK\x01\x03", 1),
        "garbage-npy-header": lambda: replacing(_raw_npy("{'descr': '<f4', 'fortran_order': Flase, 'shape': (1, 1, 8, 8), }", x1.tobytes())),
        "header-not-a-dict": lambda: replacing(_raw_npy("__import__('os').system('touch x')", x1.tobytes())),
        "no-npy-magic": lambda: replacing(b"NOTNUMPY" + x1.tobytes()),
        "header-length-past-end": lambda: replacing(b"\x93NUMPY\x01\x00\xff\xff{'descr'"),
        "huge-header": lambda: replacing(b"\x93NUMPY\x02\x00" + struct.pack("<I", 50_000) + b" " * 50_000),
        # shapes
        "negative-shape": lambda: replacing(_raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 1, 8, 8), }", x1.tobytes())),
        "huge-shape": lambda: replacing(_raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 1, 8, 8), }", x1.tobytes())),
        "overflowing-shape": lambda: replacing(_raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }")),
        "shape-disagrees-with-data": lambda: replacing(_raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 8, 8), }", x1.tobytes())),
        "wrong-shape-for-program": lambda: replacing(_npy(np.zeros((1, 1, 9, 9), np.float32))),
        # dtypes
        "object-dtype": lambda: replacing(_raw_npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", b"\x80\x04N.")),
        "unicode-dtype": lambda: replacing(_npy(np.array(["abcde"]))),
        "complex-dtype": lambda: replacing(_npy(np.zeros((1, 1, 8, 8), np.complex64))),
        "structured-dtype": lambda: replacing(_npy(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))),
        "wrong-dtype-for-program": lambda: replacing(_npy(x1.astype(np.float64))),
        # zip structure
        "compressed-member": lambda: _stored_zip([(f"{k}.npy", _npy(v)) for k, v in arrays.items()], zipfile.ZIP_DEFLATED),
        "encrypted-member": lambda: _set_flags(good, 0x1),
        "bad-local-offset": lambda: _patch_central(good, 42, "<I", 0x7FFFFFF0),
        "bad-member-size": lambda: _patch_central(_patch_central(good, 20, "<I", 0x7FFFFFF0), 24, "<I", 0x7FFFFFF0),
        "sizes-disagree": lambda: _patch_central(good, 24, "<I", 12),
        "bad-central-offset": lambda: good[:-6] + struct.pack("<I", 0x7FFFFFF0) + good[-2:],
        "overlapping-members": lambda: _overlapping(good),
        "duplicate-member": lambda: _stored_zip([(f"{k}.npy", _npy(v)) for k, v in arrays.items()]
                                                + [(f"{first}.npy", _npy(x1))]),
        "not-npy-member": lambda: _stored_zip([(f"{k}.npy", _npy(v)) for k, v in arrays.items()] + [("notes.txt", b"hello")]),
        "unexpected-key": lambda: _stored_zip([(f"{k}.npy", _npy(v)) for k, v in arrays.items()] + [("x/input/y.npy", _npy(x1))]),
        "no-outputs": lambda: _stored_zip([(f"{first}.npy", _npy(x1))]),
    }
    return makers[kind]()


def _overlapping(good: bytes) -> bytes:
    """Thousands of central records, each under its own name, all pointing at the first member: a
    zip bomb for a stored archive (every member "expands" to the same bytes)."""
    start = good.index(b"PK\x01\x02")
    fixed = bytearray(good[start:start + 46])
    records = b""
    for i in range(4000):
        name = f"m{i}.npy".encode()
        struct.pack_into("<HHH", fixed, 28, len(name), 0, 0)
        records += bytes(fixed) + name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 4000, 4000, len(records), start, 0)
    return good[:start] + records + end


HOSTILE_NPZ = {  # kind -> exit status (2: a bad input file; 1 only where the runtime itself refuses)
    "empty": 2, "truncated-half": 2, "truncated-end-record": 2, "truncated-member": 2, "not-a-zip": 2,
    "flipped-data-byte": 2, "flipped-central-signature": 2, "garbage-npy-header": 2, "header-not-a-dict": 2,
    "no-npy-magic": 2, "header-length-past-end": 2, "huge-header": 2, "negative-shape": 2, "huge-shape": 2,
    "overflowing-shape": 2, "shape-disagrees-with-data": 2, "wrong-shape-for-program": 2, "object-dtype": 2,
    "unicode-dtype": 2, "complex-dtype": 2, "structured-dtype": 2, "wrong-dtype-for-program": 2,
    "compressed-member": 2, "encrypted-member": 2, "bad-local-offset": 2, "bad-member-size": 2,
    "sizes-disagree": 2, "bad-central-offset": 2, "overlapping-members": 2, "duplicate-member": 2,
    "not-npy-member": 2, "unexpected-key": 2, "no-outputs": 2,
}
NPZ_MESSAGES = {
    "compressed-member": "compressed .npz members are not supported; write it with numpy.savez",
    "encrypted-member": "encrypted",
    "object-dtype": "holds Python objects",
    "wrong-dtype-for-program": "is float64; the program takes float32",
    "wrong-shape-for-program": "does not fit the program",
    "duplicate-member": "appears twice",
    "negative-shape": "negative",
    "flipped-data-byte": "CRC",
    "overlapping-members": "overlapping",
}
# The commands that read an .npz: check's reference, probe's reference, bench's --input.
NPZ_COMMANDS = ("check", "probe", "bench")


@pytest.fixture(scope="module")
def hostile_dir(int8_pte, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hostile") / "files"
    shutil.copytree(int8_pte, folder)
    return folder


def _npz_outcome(kind: str, command: str) -> int | None:
    """The exit status a damaged archive must end in; None where it is still a valid input."""
    if command == "probe" and kind == "no-outputs":
        return None  # probe needs only the inputs
    if command == "bench" and kind in ("no-outputs", "wrong-dtype-for-program"):
        return None  # an input file of arrays by input name; bench casts it to the program's dtype
    return HOSTILE_NPZ[kind]


@pytest.mark.parametrize("command", NPZ_COMMANDS)
@pytest.mark.parametrize("kind", sorted(HOSTILE_NPZ))
def test_hostile_npz(runner, hostile_dir, tmp_path, kind, command):
    if command == "bench":  # bench --input: an archive of arrays by input name
        with np.load(hostile_dir / "reference.npz") as data:
            arrays = {"input": data["b1/input/input"]}
        good, first = _stored_zip([("input.npy", _npy(arrays["input"]))]), "input"
    else:  # the reference.npz numpy wrote
        good = (hostile_dir / "reference.npz").read_bytes()
        with np.load(hostile_dir / "reference.npz") as data:
            arrays = {k: data[k] for k in data.files}
        first = "b1/input/input"
    path = tmp_path / "bad.npz"
    path.write_bytes(_hostile_npz(kind, good, arrays, first))
    before = snapshot(tmp_path), snapshot(hostile_dir)
    model = hostile_dir / "model.pte"
    if command == "check":
        done = run(runner, "check", "--model", model, "--reference", path)
    elif command == "probe":
        done = run(runner, "probe", model, path, tmp_path / "out.npz")
    else:
        done = run(runner, "bench", model, "--input", path, "--min-runs", "1", "--min-time", "0", "--warmup", "0")
    expected = _npz_outcome(kind, command)
    if expected is None:
        assert done.returncode == 0 and done.stderr == "", done.stderr
        if command == "bench" and kind == "wrong-dtype-for-program":
            assert "input 'input' cast from float64 to float32" in json.loads(done.stdout)["results"][0]["notes"]
        return
    assert_error(done, expected, NPZ_MESSAGES.get(kind))
    assert (snapshot(tmp_path), snapshot(hostile_dir)) == before  # nothing written, nothing left behind


def _pte_variants(good: bytes) -> dict[str, bytes]:
    root = struct.unpack_from("<I", good, 0)[0]
    return {
        "empty": b"",
        "truncated-8": good[:8],
        "truncated-half": good[: len(good) // 2],
        "truncated-last-byte": good[:-1],
        "wrong-identifier": good[:4] + b"XX12" + good[8:],
        "root-offset-past-end": struct.pack("<I", len(good) + 1000) + good[4:],
        "root-offset-misaligned": struct.pack("<I", root + 1) + good[4:],
        "vtable-garbage": good[:root] + b"\xff\xff\xff\x7f" + good[root + 4:],
        "zeroed-middle": good[: len(good) // 3] + bytes(len(good) // 3) + good[2 * len(good) // 3:],
        "an-npz": _stored_zip([("a.npy", _npy(np.zeros(3)))]),
    }


@pytest.mark.parametrize("command", ("check", "probe", "bench", "info"))
@pytest.mark.parametrize("kind", ["empty", "truncated-8", "truncated-half", "truncated-last-byte", "wrong-identifier",
                                  "root-offset-past-end", "root-offset-misaligned", "vtable-garbage", "zeroed-middle",
                                  "an-npz"])
def test_hostile_pte(runner, hostile_dir, tmp_path, kind, command):
    model = tmp_path / "model.pte"
    model.write_bytes(_pte_variants((hostile_dir / "model.pte").read_bytes())[kind])
    before = snapshot(tmp_path)
    reference = hostile_dir / "reference.npz"
    argv = {"check": ("check", "--model", model, "--reference", reference),
            "probe": ("probe", model, reference, tmp_path / "out.npz"),
            "bench": ("bench", model, "--min-runs", "1", "--min-time", "0"),
            "info": ("info", model)}[command]
    assert_error(run(runner, *argv), 1, "cannot load model.pte")
    assert snapshot(tmp_path) == before


def test_random_bit_flips_in_a_program_never_crash(runner, hostile_dir, tmp_path):
    """Flip bytes all over the program: it loads and runs, or it is one line and exit 1; never a signal."""
    good = bytearray((hostile_dir / "model.pte").read_bytes())
    rng = np.random.default_rng(20)
    outcomes = set()
    for trial in range(24):
        bad = bytearray(good)
        for at in rng.integers(0, len(bad), size=8):
            bad[at] ^= 1 << int(rng.integers(0, 8))
        (tmp_path / "model.pte").write_bytes(bytes(bad))
        done = run(runner, "probe", tmp_path / "model.pte", hostile_dir / "reference.npz", tmp_path / "out.npz")
        assert done.returncode in (0, 1), (trial, done.returncode, done.stderr[-2000:])
        if done.returncode:
            assert_error(done, 1)
        outcomes.add(done.returncode)
    assert 1 in outcomes


def test_random_damage_to_an_npz_never_crashes(runner, hostile_dir, tmp_path):
    """Truncate, flip and overwrite bytes of a real reference.npz: a valid archive or one line, exit 2."""
    good = (hostile_dir / "reference.npz").read_bytes()
    rng = np.random.default_rng(21)
    for trial in range(40):
        bad = bytearray(good)
        if trial % 3 == 0:
            bad = bad[: int(rng.integers(0, len(bad)))]
        else:
            for at in rng.integers(0, len(bad), size=int(rng.integers(1, 12))):
                bad[at] = int(rng.integers(0, 256))
        (tmp_path / "ref.npz").write_bytes(bytes(bad))
        done = run(runner, "probe", hostile_dir / "model.pte", tmp_path / "ref.npz", tmp_path / "out.npz")
        assert done.returncode in (0, 2), (trial, done.returncode, done.stderr[-2000:])
        if done.returncode:
            assert_error(done, 2)
            assert not (tmp_path / "out.npz").exists()


COMMAND_LINES = {  # name -> (args after the binary, with MODEL/REF/OUT placeholders, exit, message)
    "threads-zero": (["bench", "MODEL", "--threads", "0"], 2, "--threads must be at least 1, got 0"),
    "threads-huge": (["bench", "MODEL", "--threads", "100000"], 2, "--threads must be at most 1024"),
    "threads-not-int": (["bench", "MODEL", "--threads", "two"], 2, "argument --threads: invalid int value: 'two'"),
    "threads-overflow": (["bench", "MODEL", "--threads", "99999999999999999999999"], 2, "invalid int value"),
    "warmup-negative": (["bench", "MODEL", "--warmup", "-1"], 2, "--warmup must be 0 or more, got -1"),
    "min-runs-zero": (["bench", "MODEL", "--min-runs", "0"], 2, "--min-runs must be at least 1, got 0"),
    "min-time-nan": (["bench", "MODEL", "--min-time", "nan"], 2, "--min-time must be 0 or more seconds, got nan"),
    "min-time-hex": (["bench", "MODEL", "--min-time", "0x10"], 2, "invalid float value"),
    "max-runs-below-min": (["bench", "MODEL", "--min-runs", "10", "--max-runs", "5"], 2, "--max-runs (5) must be at least --min-runs (10)"),
    "batch-zero": (["bench", "MODEL", "--batch", "0"], 2, "--batch must be at least 1, got 0"),
    "batch-past-plan": (["bench", "MODEL", "--batch", "1000"], 2, "does not fit the program, planned for at most"),
    "batch-needs-too-much-memory": (["bench", "MODEL", "--shape", "input=2000000000x1x8x8"], 2,
                                    "more than this host can spare"),
    "seed-negative": (["bench", "MODEL", "--seed", "-3"], 2, "--seed must be 0 or more"),
    "shape-malformed": (["bench", "MODEL", "--shape", "input"], 2, "malformed shape 'input'"),
    "shape-not-ints": (["bench", "MODEL", "--shape", "input=1xax8x8"], 2, "dimensions must be integers"),
    "shape-zero": (["bench", "MODEL", "--shape", "input=0x1x8x8"], 2, "every dimension must be positive"),
    "shape-huge-dim": (["bench", "MODEL", "--shape", "input=99999999999x1x8x8"], 2, "larger than 2**31-1"),
    "shape-fixed-axis": (["bench", "MODEL", "--shape", "input=1x1x9x9"], 2, "has fixed axis 2 = 8; --shape gives 9"),
    "shape-rank": (["bench", "MODEL", "--shape", "input=1x64"], 2, "has rank 4; --shape gives 2 dims"),
    "shape-unknown-input": (["bench", "MODEL", "--shape", "pixels=1x1x8x8"], 2, "--shape names input 'pixels'"),
    "shape-twice": (["bench", "MODEL", "--shape", "input=1x1x8x8", "--shape", "input=2x1x8x8"], 2, "twice"),
    "serve-and-json": (["bench", "MODEL", "--serve", "--json", "OUT"], 2, "--serve and --json do not go together"),
    "shape-and-input": (["bench", "MODEL", "--shape", "input=1x1x8x8", "--input", "REF"], 2, "do not go together"),
    "mode-bad": (["bench", "MODEL", "--mode", "cloud"], 2, "argument --mode: invalid choice: 'cloud'"),
    "format-onnx": (["bench", "MODEL", "--format", "onnx"], 2, "argument --format: invalid choice: 'onnx'"),
    "unknown-option": (["bench", "MODEL", "--frobnicate"], 2, "unrecognized arguments: --frobnicate"),
    "ambiguous-option": (["bench", "MODEL", "--m", "3"], 2, "ambiguous option: --m"),
    "missing-value": (["bench", "MODEL", "--threads"], 2, "argument --threads: expected one argument"),
    "missing-model": (["bench"], 2, "the following arguments are required: model"),
    "model-not-found": (["bench", "nothere.pte"], 2, "model file not found: nothere.pte"),
    "input-not-found": (["bench", "MODEL", "--input", "nothere.npz"], 2, "input file not found"),
    "json-over-model": (["bench", "MODEL", "--json", "MODEL"], 2, "is one of the command's inputs"),
    "check-json-over-reference": (["check", "--model", "MODEL", "--json", "REF"], 2, "is one of the command's inputs"),
    "check-threads-zero": (["check", "--model", "MODEL", "--threads", "0"], 2, "--threads must be at least 1, got 0"),
    "check-reference-missing": (["check", "--model", "MODEL", "--reference", "nothere.npz"], 2, "reference data not found"),
    "check-max-abs-not-float": (["check", "--model", "MODEL", "--max-abs", "small"], 2, "invalid float value: 'small'"),
    "check-no-bundle": (["check"], 2, "no bundle.json in"),
    "probe-out-is-reference": (["probe", "MODEL", "REF", "REF"], 2, "is one of the command's inputs"),
    "probe-out-is-model": (["probe", "MODEL", "REF", "MODEL"], 2, "is one of the command's inputs"),
    "probe-out-folder-missing": (["probe", "MODEL", "REF", "no/such/folder/out.npz"], 2, "cannot write"),
    "probe-missing-args": (["probe", "MODEL"], 2, "the following arguments are required: reference, out"),
    "info-two-models": (["info", "MODEL", "MODEL"], 2, "unrecognized arguments"),
    "checkpoint-listed": (["bench", "CKPT"], 2, "is a training checkpoint"),
}


@pytest.mark.parametrize("name", sorted(COMMAND_LINES))
def test_hostile_command_lines(runner, hostile_dir, tmp_path, name):
    args, code, message = COMMAND_LINES[name]
    work = tmp_path / "work"
    shutil.copytree(hostile_dir, work)
    if name == "checkpoint-listed":  # a manifest that lists the file as a checkpoint
        manifest = json.loads((work / "manifest.json").read_text())
        manifest["files"][0]["format"] = "checkpoint"
        (work / "manifest.json").write_text(json.dumps(manifest))
    values = {"MODEL": "model.pte", "REF": "reference.npz", "OUT": "out.json", "CKPT": "model.pte"}
    before = snapshot(work)
    done = run(runner, *[values.get(a, a) for a in args], cwd=work)
    assert_error(done, code, message)
    assert snapshot(work) == before
    assert not child_pids()


# ---------------------------------------------------------------------------------------------
# The board: cross-compiled for aarch64, run under qemu


def test_aarch64_build_under_qemu_is_bit_identical(runner, int8_pte, tmp_path):
    missing = [tool for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64-static") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"no {' or '.join(missing)} here: apt-get install g++-aarch64-linux-gnu qemu-user-static")
    binary = build_runner(tmp_path / "a64", "aarch64")
    board = run(binary, "check", "--model", int8_pte / "model.pte", "--threads", "2", prefix=QEMU)
    host = run(runner, "check", "--model", int8_pte / "model.pte", "--threads", "2")
    assert board.returncode == 0 == host.returncode, board.stderr
    (ours, verdict), (theirs, _) = check_doc(board), check_doc(host)
    assert ours["machine"] == "aarch64" and verdict.startswith("PASS: model.pte on aarch64")
    assert ours["outputs_sha256"] == theirs["outputs_sha256"]
    assert ours["batches"] == theirs["batches"]
    info = json.loads(run(binary, "info", int8_pte / "model.pte", prefix=QEMU).stdout)
    assert info["registered_backends"] == ["XnnpackBackend"] and info["machine"] == "aarch64"
    # as a bundle runs it: the binary beside bundle.json finds its model without --model
    for name in ("model.pte", "manifest.json", "reference.npz"):
        shutil.copyfile(int8_pte / name, binary.parent / name)
    (binary.parent / "bundle.json").write_text(json.dumps({"model": "model.pte", "format": "executorch"}))
    bundled = run(binary, "check", "--threads", "2", prefix=QEMU, cwd=tmp_path)
    assert bundled.returncode == 0 and check_doc(bundled)[0]["outputs_sha256"] == theirs["outputs_sha256"]
    bench = run(binary, "bench", binary.parent / "model.pte", "--emulated", "--min-runs", "5", "--min-time", "0",
                prefix=QEMU)
    assert bench.returncode == 0, bench.stderr
    result = json.loads(bench.stdout)["results"][0]
    assert result["mode"] == "emulated" and result["host"]["machine"] == "aarch64" and result["host"]["cpu_model"] is None
