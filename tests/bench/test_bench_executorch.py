"""ExecuTorch ``.pte`` programs in the board scripts (bench runner, output check, emulation
probe) and in serving: outputs against the torch model, the bench result, and one-line errors
for files that are not programs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("executorch")

from board_files import CHECK, PROBE, RUNNER  # noqa: E402
from edgekit.records.result import from_document  # noqa: E402
from edgekit.board import check as check_outputs  # noqa: E402
from edgekit.board import errors, manifest  # noqa: E402
from edgekit.board import runner  # noqa: E402
from edgekit.board.runtimes.executorch_runtime import ExecuTorchRuntime  # noqa: E402
from edgekit.core.fileio import sha256_file  # noqa: E402
from tiny_models import PTE_MAX_BATCH, build_models, tiny_mlp  # noqa: E402

FAST = ["--min-runs", "5", "--min-time", "0.05", "--warmup", "2", "--threads", "1"]
ENV = {**os.environ, "TORCH_CPP_LOG_LEVEL": "ERROR"}


@pytest.fixture(scope="module")
def art(tmp_path_factory) -> Path:
    """model.onnx and model.pte of one tiny MLP (batch planned up to PTE_MAX_BATCH), with a manifest."""
    return build_models(tmp_path_factory.mktemp("pte") / "art", formats=("onnx", "executorch"), engine=None)


@pytest.fixture(scope="module")
def reference(art, tmp_path_factory) -> Path:
    """reference.npz as bundles hold it: batch 1, 4 and one past the program's planned batch."""
    import torch

    model, rng, arrays = tiny_mlp(), np.random.default_rng(1), {}
    for batch in (1, 4, PTE_MAX_BATCH + 5):
        x = rng.standard_normal((batch, 1, 8, 8)).astype(np.float32)
        with torch.no_grad():
            arrays[f"b{batch}/input/input"], arrays[f"b{batch}/output"] = x, model(torch.from_numpy(x)).numpy()
    path = tmp_path_factory.mktemp("pte-ref") / "reference.npz"
    np.savez(path, **arrays)
    return path


@pytest.fixture
def garbage(tmp_path) -> dict[str, Path]:
    """Files named .pte that are not programs: random bytes, and a real header on a corrupt body."""
    files = {"random": tmp_path / "random.pte", "corrupt": tmp_path / "corrupt.pte"}
    files["random"].write_bytes(b"\x00\x01garbage, not a program" * 20)
    files["corrupt"].write_bytes(b"<\x00\x00\x00ET12" + bytes(4000))
    return files


def run(script: Path, *args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A standalone script the way a board runs it: ``import edgekit`` made impossible."""
    code = ("import runpy, sys; sys.modules['edgekit'] = None; "
            f"sys.argv = [{str(script)!r}, *sys.argv[1:]]; runpy.run_path({str(script)!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-P", "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=ENV, cwd=cwd)


def error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), text
    return lines[0]


def torch_outputs(x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return tiny_mlp()(torch.from_numpy(x)).numpy()


# --- the bench runner -----------------------------------------------------------------------


def test_format_is_told_by_suffix_and_by_content(art, tmp_path):
    assert manifest.detect_format(art / "model.pte", None, None) == "executorch"
    renamed = tmp_path / "program.bin"
    renamed.write_bytes((art / "model.pte").read_bytes())
    assert manifest.detect_format(renamed, None, None) == "executorch"  # the flatbuffer identifier
    assert manifest.is_executorch_program(art / "model.pte") and not manifest.is_executorch_program(art / "model.onnx")


@pytest.mark.parametrize("batch", [1, 4])
def test_runtime_outputs_equal_the_torch_model(art, batch):
    model = ExecuTorchRuntime(art / "model.pte", 1, None)
    specs = model.input_specs()
    assert [(s["name"], s["shape"], s["dtype"]) for s in specs] == [("input0", [None, 1, 8, 8], "float32")]
    x = np.random.default_rng(batch).standard_normal((batch, 1, 8, 8)).astype(np.float32)
    fn, args = model.bind({"input": x})
    with model.context():
        out = fn(*args)[0].numpy()
    np.testing.assert_allclose(out, torch_outputs(x), atol=1e-5, rtol=0)
    assert model.info["name"] == "executorch" and model.info["version"]


def test_bench_json_of_a_pte(art):
    proc = subprocess.run([sys.executable, "-P", str(RUNNER), art / "model.pte", *FAST, "--batch", "4"],
                          capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == ""  # the runtime's CPU-probing log stays out of the user's terminal
    (res,) = from_document(json.loads(proc.stdout))
    t = res.timing
    assert res.model.format == "executorch" and res.model.variant == "fp32-executorch"
    assert res.model.sha256 == sha256_file(art / "model.pte") and res.model.bytes == (art / "model.pte").stat().st_size
    assert res.runtime["name"] == "executorch" and res.runtime["threads"] == 1 and res.runtime["import_ms"] > 0
    assert res.host["runtimes"]["executorch"] == res.runtime["version"]
    assert t.runs >= 5 and t.total_s >= 0.05 and t.load > 0 and t.first_run > 0
    assert 0 < t.min <= t.p50 <= t.p90 <= t.p95 <= t.p99 <= t.max
    assert t.mean == pytest.approx(t.total_s * 1e3 / t.runs)
    assert res.throughput_per_s == pytest.approx(4 * t.runs / t.total_s)
    assert res.input_shapes == {"input": [4, 1, 8, 8]} and res.settings["inputs"] == "manifest"
    assert res.memory.peak_rss >= res.memory.rss_before_load > 0


def test_threads_size_the_xnnpack_threadpool(art):
    proc = subprocess.run([sys.executable, "-P", str(RUNNER), art / "model.pte", *FAST[:-2], "--threads", "2"],
                          capture_output=True, text=True, timeout=300, env=ENV)
    (res,) = from_document(json.loads(proc.stdout))
    assert res.runtime["threads"] == 2 and "threads_note" not in res.runtime


def test_lone_program_takes_axis_0_as_batch(art, tmp_path):
    lone = tmp_path / "lone.pte"
    lone.write_bytes((art / "model.pte").read_bytes())
    proc = subprocess.run([sys.executable, "-P", str(RUNNER), lone, *FAST, "--batch", "3"],
                          capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr
    (res,) = from_document(json.loads(proc.stdout))
    assert res.input_shapes == {"input0": [3, 1, 8, 8]} and res.settings["inputs"] == "model"
    assert any("axis 0 of each input is taken as its batch axis" in note for note in res.notes)


@pytest.mark.parametrize("args, message", [
    (["--batch", str(PTE_MAX_BATCH + 1)], f"planned for at most {PTE_MAX_BATCH}x1x8x8"),
    (["--shape", "input=2x1x9x8"], "fixed axis 2"),
])
def test_inputs_past_the_plan_are_usage_errors(art, capsys, args, message):
    assert runner.main([str(art / "model.pte"), *FAST, *args]) == errors.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and message in error_line(captured.err)


@pytest.mark.parametrize("kind, message", [("random", "no ExecuTorch file identifier"),
                                           ("corrupt", "Failed to load program, error: 0x:23 (")])  # + the logged cause
def test_a_file_that_is_not_a_program_fails_in_one_line(garbage, capsys, kind, message):
    assert runner.main([str(garbage[kind]), *FAST]) == errors.EXIT_FAILED  # as a broken .onnx: the model failed
    captured = capsys.readouterr()
    assert captured.out == ""
    line = error_line(captured.err)  # the runtime's own log lines are folded into it
    assert f"cannot load {kind}.pte as an ExecuTorch program" in line and message in line


def test_bench_api_times_a_pte_beside_its_onnx_twin(art):
    from edgekit.bench.api import bench

    results = bench([art / "model.onnx", art / "model.pte"], threads=1, warmup=2, min_runs=5, min_time_s=0.05)
    assert [r.model.format for r in results] == ["onnx", "executorch"]
    assert results[1].runtime["name"] == "executorch" and results[1].timing.runs >= 5


# --- the output check and the emulation probe -----------------------------------------------


def test_check_outputs_runs_a_pte_past_its_planned_batch(art, reference, tmp_path):
    proc = run(CHECK, "--model", art / "model.pte", "--reference", reference, "--max-abs", "1e-5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc, verdict = check_outputs.read_output(proc.stdout)
    assert verdict.startswith("PASS: model.pte")
    assert doc["model"]["format"] == "executorch" and doc["runtime"]["name"] == "executorch"
    assert doc["runtime"]["threads"] == 1
    assert set(doc["batches"]) == {"1", "4", str(PTE_MAX_BATCH + 5)}  # the last one ran in two chunks
    assert doc["batches"][str(PTE_MAX_BATCH + 5)]["shape"] == [PTE_MAX_BATCH + 5, 10]
    assert doc["max_abs"] <= 1e-5 and doc["top1_agreement"] == 1.0


def test_check_outputs_fails_in_one_line_on_a_broken_program(garbage, reference, tmp_path):
    for kind in garbage:
        proc = run(CHECK, "--model", garbage[kind], "--reference", reference, cwd=tmp_path)
        assert proc.returncode == 1 and proc.stdout == ""
        assert f"{kind}.pte" in error_line(proc.stderr)


def test_probe_runs_a_pte(art, reference, tmp_path):
    out = tmp_path / "out.npz"
    proc = subprocess.run([sys.executable, "-I", str(PROBE), str(art / "model.pte"), str(reference), str(out),
                           "--inputs", "input", "--threads", "2"], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["format"] == "executorch" and info["runtime"]["name"] == "executorch" and info["runtime"]["threads"] == 2
    want, got = np.load(reference), np.load(out)
    for batch in (1, 4, PTE_MAX_BATCH + 5):
        np.testing.assert_allclose(got[f"b{batch}/output"], want[f"b{batch}/output"], atol=1e-5, rtol=0)


def test_probe_fails_in_one_line_on_a_broken_program(garbage, reference, tmp_path):
    proc = subprocess.run([sys.executable, "-I", str(PROBE), str(garbage["corrupt"]), str(reference),
                           str(tmp_path / "o.npz")], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 1 and proc.stdout == ""
    assert error_line(proc.stderr).startswith("Error: cannot load")
    assert not (tmp_path / "o.npz").exists()


# --- serving --------------------------------------------------------------------------------


def test_serve_loads_the_pte_of_an_artifact(art):
    from edgekit.serve.loader import load_served_model

    model = load_served_model(art, fmt="executorch", threads=1)
    assert model.summary["format"] == "executorch" and model.summary["runtime"].startswith("executorch ")
    x = np.random.default_rng(5).standard_normal((PTE_MAX_BATCH * 2 + 3, 1, 8, 8)).astype(np.float32)
    (out,) = model.run({"input": x})  # past the planned batch (a stacked micro-batch): run in chunks
    np.testing.assert_allclose(out, torch_outputs(x), atol=1e-5, rtol=0)
    assert [a.shape for a in model.example_feed().values()] == [(1, 1, 8, 8)]
    with pytest.raises(ValueError, match="does not fit the program"):
        model.run({"input": np.zeros((1, 1, 9, 8), dtype=np.float32)})


def test_serve_refuses_a_broken_program_in_one_line(tmp_path):
    from edgekit.formats.artifacts import InputSpec, Manifest, describe_file, finalize
    from edgekit.core.errors import InputFileError
    from edgekit.serve.loader import load_served_model

    (tmp_path / "model.pte").write_bytes(b"\x00" * 64)  # listed with its checksum: only the program check can refuse it
    finalize(Manifest(kind="export", model={"name": "tiny", "config": {}},
                      inputs=(InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"}),), outputs=("logits",),
                      files=(describe_file(tmp_path, "model.pte", "executorch"),)), tmp_path)
    with pytest.raises(InputFileError, match="cannot load model.pte as an ExecuTorch program: no ExecuTorch file identifier") as err:
        load_served_model(tmp_path)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.slow  # a server process, end to end
def test_edgekit_serve_answers_from_the_pte_over_http(art):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    import concurrent.futures

    from edgekit.core import process

    with process.local_server(art, ["--format", "executorch", "--threads", "1"]) as url:
        x = np.random.default_rng(2).standard_normal((3, 1, 8, 8)).astype(np.float32)
        with concurrent.futures.ThreadPoolExecutor(6) as pool:  # concurrent requests: stacked micro-batches
            answers = list(pool.map(lambda _: httpx.post(f"{url}/v1/predict", json={"inputs": {"input": x.tolist()}}),
                                    range(12)))
        assert {a.status_code for a in answers} == {200}
        for a in answers:
            np.testing.assert_allclose(np.array(a.json()["outputs"]["logits"], dtype=np.float32), torch_outputs(x),
                                       atol=1e-5, rtol=0)
        assert httpx.get(f"{url}/v1/model").json()["format"] == "executorch"


def test_running_a_program_does_not_import_the_export_toolchain(art):
    """ExecuTorch's public runtime wrappers import ``executorch.exir`` (about 3 s and 140 MB here);
    edgekit's host predictor and the board runtime every board script uses load the native module instead."""
    code = f"""
import sys, numpy as np
from pathlib import Path
x = np.zeros((2, 1, 8, 8), np.float32)
model = Path({str(art / "model.pte")!r})
from edgekit.formats import executorch
assert executorch.predictor(model, {{"max_shapes": {{"batch": 2}}}}, 1)(x).shape == (2, 10)
from edgekit.board.runtimes import open_model
runtime = open_model("executorch", model, 1)
assert runtime.predict({{"input": x}}, ["input"]).shape == (2, 10)
fn, args = runtime.bind({{"input": x}})
assert fn(*args)[0].shape == (2, 10)
print(sorted(m for m in sys.modules if m.startswith(("executorch.exir", "executorch.runtime", "torchao"))))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
