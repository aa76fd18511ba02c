"""The board's bench runner: statistics, host facts, the script's output, errors and serve mode."""

from __future__ import annotations

import hashlib
import json
import mmap
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from board_files import BOARD_DIR, RUNNER
from edgekit.records import result as result_module
from edgekit.records.result import BenchResult, from_document
from edgekit.board import facts as board_facts
from edgekit.board import inputs, runner, stats, timing
from edgekit.core.fileio import sha256_file
from tiny_models import build_models

FAST = ["--min-runs", "5", "--min-time", "0.05", "--warmup", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def art(tmp_path_factory) -> Path:
    return build_models(tmp_path_factory.mktemp("bench-runner") / "art")


def run_script(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUNNER), *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=300)


def one_result(proc: subprocess.CompletedProcess) -> BenchResult:
    assert proc.returncode == 0, proc.stderr
    results = from_document(json.loads(proc.stdout))  # stdout holds only the JSON document
    assert len(results) == 1
    return results[0]


def error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert lines[0].startswith("Error: ")
    return lines[0]


# --- pure functions -------------------------------------------------------------------------


def test_schema_constants_match_the_result_module():
    assert runner.BENCH_SCHEMA == result_module.BENCH_SCHEMA
    assert runner.BENCH_SCHEMA_VERSION == result_module.BENCH_SCHEMA_VERSION


def test_percentile_hand_computed():
    values = [10.0, 20.0, 30.0, 40.0]
    assert stats.percentile(values, 0) == 10.0
    assert stats.percentile(values, 50) == 25.0  # rank 1.5
    assert stats.percentile(values, 90) == pytest.approx(37.0)  # rank 2.7: 30 + 0.7 * 10
    assert stats.percentile(values, 100) == 40.0
    assert stats.percentile([7.0], 99) == 7.0


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=200),
       st.floats(min_value=0, max_value=100))
@settings(max_examples=200, deadline=None)
def test_percentile_equals_numpy(values, q):
    got = stats.percentile(sorted(values), q)
    assert got == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-9)


def test_percentile_rejects_empty_and_out_of_range():
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


def test_summarize_ns_matches_numpy():
    samples = [5_000_000, 1_000_000, 3_000_000, 2_000_000, 9_000_000, 4_000_000]
    ms = np.array(samples) / 1e6
    s = stats.summarize_ns(samples)
    for q in (50, 90, 95, 99):
        assert s[f"p{q}"] == pytest.approx(np.percentile(ms, q))
    assert s["mean"] == pytest.approx(ms.mean())
    assert s["std"] == pytest.approx(ms.std())
    assert (s["min"], s["max"], s["runs"]) == (1.0, 9.0, 6)
    assert s["total_s"] == pytest.approx(0.024)
    with pytest.raises(ValueError):
        stats.summarize_ns([])


@pytest.mark.parametrize("text, expected", [("input=1x1x8x8", ("input", (1, 1, 8, 8))),
                                            (" ids = 2X16 ", ("ids", (2, 16))), ("x=3", ("x", (3,)))])
def test_parse_shape(text, expected):
    assert inputs.parse_shape(text) == expected


@pytest.mark.parametrize("text", ["input", "=1x2", "input=", "input=1xax2", "input=1x0", "input=1x-2", "input=1,2"])
def test_parse_shape_rejects(text):
    with pytest.raises(ValueError, match="malformed shape"):
        inputs.parse_shape(text)


def test_host_facts_are_plain_json_without_hostname():
    facts = board_facts.host_facts()
    json.dumps(facts)
    for key in ("machine", "cpu_model", "logical_cores", "usable_cores", "isa", "os", "python", "runtimes",
                "cpufreq_governor", "soc_temp_c", "throttled", "emulated"):
        assert key in facts
    assert "hostname" not in facts and "node" not in facts
    node = platform.node()
    if len(node) > 3:
        assert node not in json.dumps(facts)
    assert facts["emulated"] is False
    assert facts["machine"] == platform.machine()
    assert set(facts["isa"]) <= set(board_facts.ISA_FLAGS)
    assert board_facts.host_facts(emulated=True)["emulated"] is True


def test_settle_returns_once_no_other_thread_runs():
    import threading
    import time

    waited = timing.settle(max_s=2.0)
    if waited is None:
        pytest.skip("no /proc on this OS")
    assert 0 <= waited < 2.0
    stop = threading.Event()
    data = bytes(8 << 20)

    def spin():  # hashing big buffers keeps the thread running with the GIL released
        while not stop.is_set():
            hashlib.sha256(data).digest()

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        started = time.perf_counter()
        assert timing.settle(max_s=0.2) >= 0.2  # a spinning thread keeps it waiting until max_s
        assert time.perf_counter() - started < 5
    finally:
        stop.set()
        spinner.join()


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(key)


def test_memory_readings_follow_the_kernel():
    """Against /proc/self/status read here, and against memory this test allocates and touches."""
    now = board_facts.rss_mb()  # first: its first call imports psutil
    assert abs(now - _status_kb("VmRSS") / 1024) < 8  # the same reading, a few pages apart
    before = board_facts.peak_rss_mb()
    assert before == pytest.approx(_status_kb("VmHWM") / 1024, abs=1)
    # A fresh anonymous mapping, not numpy: malloc may hand back pages that are already
    # resident (freed by earlier tests in this worker), and those would not grow the RSS.
    block = mmap.mmap(-1, 64 * 2**20)
    try:
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1  # every page written
        grown = board_facts.rss_mb()
        assert grown - now > 56, (now, grown)
        assert board_facts.peak_rss_mb() >= before + 56 - max(0.0, before - now)
    finally:
        block.close()


# --- the script -----------------------------------------------------------------------------


def test_onnx_run_reports_a_full_result(art):
    res = one_result(run_script(art / "model.onnx", *FAST))
    t = res.timing
    assert t.runs >= 5 and t.total_s >= 0.05
    assert t.load > 0 and t.first_run > 0
    assert t.min <= t.p50 <= t.p90 <= t.p95 <= t.p99 <= t.max
    assert res.throughput_per_s == pytest.approx(t.runs / t.total_s)
    assert res.memory.peak_rss >= res.memory.rss_before_load > 0
    assert res.runtime["name"] == "onnxruntime" and res.runtime["threads"] == 1
    assert res.runtime["torch_imported"] is False  # an ONNX model is timed without torch
    assert res.model.format == "onnx" and res.model.precision == "fp32" and res.model.variant == "fp32-onnx"
    assert (res.model.accuracy, res.model.float_accuracy) == (0.97, 0.975)
    assert res.model.sha256 == sha256_file(art / "model.onnx")
    assert res.model.bytes == (art / "model.onnx").stat().st_size
    assert res.input_shapes == {"input": [1, 1, 8, 8]}
    assert res.settings["inputs"] == "manifest" and res.settings["warmup"] == 2
    assert res.mode == "local" and res.host["emulated"] is False
    assert BenchResult.from_dict(json.loads(json.dumps(res.to_dict()))) == res


def test_batch_fills_the_dynamic_axis(art):
    res = one_result(run_script(art / "model.onnx", *FAST, "--batch", "3"))
    assert res.input_shapes == {"input": [3, 1, 8, 8]}
    assert res.settings["batch"] == 3
    assert res.throughput_per_s == pytest.approx(3 * res.timing.runs / res.timing.total_s)


def test_torchscript_run_takes_the_engine_from_the_manifest(art):
    res = one_result(run_script(art / "model.pt", *FAST, "--emulated", "--target", "rpi4"))
    assert res.runtime["name"] == "torch" and res.runtime["engine"] == "qnnpack"
    assert res.model.format == "torchscript" and res.model.variant == "fp32-torchscript"
    assert res.model.accuracy is None
    assert res.mode == "emulated" and res.host["emulated"] is True and res.target == "rpi4"


def test_json_file_is_written_atomically(art, tmp_path):
    out = tmp_path / "sub" / "result.json"
    proc = run_script(art / "model.onnx", *FAST, "--json", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert len(from_document(json.loads(out.read_text()))) == 1
    assert [p.name for p in out.parent.iterdir()] == ["result.json"]  # no temp file left behind


def test_npz_input_feeds_arrays_by_name(art, tmp_path):
    data = tmp_path / "inputs.npz"
    np.savez(data, input=np.zeros((2, 1, 8, 8)))  # float64: cast to the model's float32
    res = one_result(run_script(art / "model.onnx", *FAST, "--input", data))
    assert res.input_shapes == {"input": [2, 1, 8, 8]}
    assert res.settings["inputs"] == "npz" and res.settings["batch"] == 2
    assert any("cast" in note for note in res.notes)


def test_max_runs_caps_and_says_so(art):
    res = one_result(run_script(art / "model.onnx", "--min-runs", "3", "--max-runs", "3", "--min-time", "1000",
                                "--warmup", "0", "--threads", "1"))
    assert res.timing.runs == 3
    assert any("--max-runs" in note for note in res.notes)


def test_unlisted_file_ignores_the_manifest(art, tmp_path):
    shutil.copy(art / "model.onnx", art / "copy.onnx")
    try:
        res = one_result(run_script(art / "copy.onnx", *FAST))
    finally:
        (art / "copy.onnx").unlink()
    assert res.settings["inputs"] == "model" and res.model.accuracy is None
    assert any("does not list copy.onnx" in note for note in res.notes)


def test_torchscript_without_manifest_needs_shapes(art, tmp_path):
    lone = tmp_path / "lone.pt"
    shutil.copy(art / "model.pt", lone)
    proc = run_script(lone, *FAST)
    assert proc.returncode == 2
    assert "--shape input=" in error_line(proc.stderr)
    res = one_result(run_script(lone, *FAST, "--shape", "input=2x1x8x8", "--batch", "2"))
    assert res.input_shapes == {"input": [2, 1, 8, 8]} and res.settings["inputs"] == "shape"


def test_serve_protocol(art):
    proc = subprocess.Popen([sys.executable, str(RUNNER), str(art / "model.onnx"), "--serve", *FAST],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready" and ready["load_ms"] > 0 and ready["first_run_ms"] > 0

        def ask(obj) -> dict:
            proc.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
            proc.stdin.flush()
            return json.loads(proc.stdout.readline())

        assert ask({"cmd": "finish"})["ok"] is False  # nothing timed yet
        block = ask({"cmd": "run", "n": 4, "warm": 2})  # warm-up calls are not timed
        assert block["ok"] is True and len(block["ns"]) == 4 and all(isinstance(n, int) and n > 0 for n in block["ns"])
        assert block["settle_ms"] is None or block["settle_ms"] >= 0
        assert ask({"cmd": "run", "n": 0})["ok"] is False
        assert ask({"cmd": "run", "n": 2, "warm": -1})["ok"] is False
        assert ask("not json")["ok"] is False
        assert len(ask({"cmd": "run", "n": 3})["ns"]) == 3
        done = ask({"cmd": "finish"})
        res = BenchResult.from_dict(done["result"])
        assert res.timing.runs == 7 and res.settings["serve"] is True
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_serve_ends_quietly_at_end_of_input(art):
    proc = run_script(art / "model.onnx", "--serve", *FAST, stdin="")
    assert proc.returncode == 0
    assert [json.loads(line)["event"] for line in proc.stdout.splitlines()] == ["ready"]


def test_script_errors_exit_2_with_one_line(tmp_path):
    proc = run_script(tmp_path / "missing.onnx")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "model file not found" in error_line(proc.stderr)


def test_unreadable_model_exits_1(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    proc = run_script(bad, *FAST)
    assert proc.returncode == 1
    assert "onnxruntime cannot load bad.onnx" in error_line(proc.stderr)


@pytest.mark.parametrize("args, message", [
    (["--shape", "foo=1x2"], "does not have"),
    (["--shape", "input=1xax8"], "malformed shape"),
    (["--shape", "input=1x3x8x8"], "fixed axis 1"),
    (["--shape", "input=1x64"], "rank 4"),
    (["--min-runs", "0"], "--min-runs"),
    (["--threads", "0"], "--threads"),
    (["--warmup", "-1"], "--warmup"),
    (["--batch", "0"], "--batch"),
    (["--min-time", "nan"], "--min-time"),
    (["--min-runs", "10", "--max-runs", "5"], "--max-runs"),
    (["--bogus"], "unrecognized"),
    (["--serve", "--json", "x.json"], "--serve"),
])
def test_usage_errors_exit_2_with_one_line(art, capsys, args, message):
    code = runner.main([str(art / "model.onnx"), "--min-runs", "1", "--min-time", "0", *args])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in error_line(captured.err)


def test_npz_errors(art, tmp_path, capsys):
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, other=np.zeros((1, 1, 8, 8), dtype=np.float32))
    assert runner.main([str(art / "model.onnx"), "--input", str(wrong)]) == 2
    assert "'other'" in error_line(capsys.readouterr().err)
    assert runner.main([str(art / "model.onnx"), "--input", str(tmp_path / "none.npz")]) == 2
    assert "input file not found" in error_line(capsys.readouterr().err)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"nope")
    assert runner.main([str(art / "model.onnx"), "--input", str(garbage)]) == 2
    assert "not a readable .npz" in error_line(capsys.readouterr().err)


def test_the_board_package_imports_nothing_from_edgekit():
    for path in sorted((Path(runner.__file__).parent).rglob("*.py")):
        assert not re.search(r"^\s*(import|from)\s+edgekit\b", path.read_text(), re.MULTILINE), path
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import importlib, pkgutil, edgekit_board; "
            "[importlib.import_module(m.name) for m in pkgutil.walk_packages(edgekit_board.__path__, 'edgekit_board.')]; "
            "print(sorted(m for m in ('edgekit', 'numpy', 'torch', 'onnxruntime', 'executorch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-c", code, str(BOARD_DIR)], capture_output=True, text=True,
                         timeout=60, cwd=BOARD_DIR)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # module level needs only the standard library
