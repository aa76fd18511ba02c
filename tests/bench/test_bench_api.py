"""edgekit.bench.api.bench: runner subprocesses, interleaving, threads, errors."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from edgekit.board import facts
from edgekit.bench.api import bench, resolve_model, resolve_threads
from edgekit.records.result import from_document, to_document
from edgekit.core.errors import BenchError, InputFileError, UsageError
from edgekit.core.targets import load_target
from edgekit.formats.artifacts import Manifest, describe_file, finalize
from tiny_models import build_models

FAST = {"min_runs": 5, "min_time_s": 0.05, "warmup": 2, "threads": 1}


@pytest.fixture(scope="module")
def art(tmp_path_factory) -> Path:
    return build_models(tmp_path_factory.mktemp("bench-api") / "both", engine=None)


@pytest.fixture(scope="module")
def onnx_only(tmp_path_factory) -> Path:
    return build_models(tmp_path_factory.mktemp("bench-api") / "onnx", formats=("onnx",), engine=None)


def test_single_model_from_an_artifact_folder(onnx_only):
    calls = []
    (res,) = bench(onnx_only, progress=lambda index, runs: calls.append((index, runs)), **FAST)
    assert Path(res.model.path) == onnx_only / "model.onnx"
    assert res.model.accuracy == 0.97 and res.model.variant == "fp32-onnx"
    assert res.timing.runs >= 5 and res.timing.total_s >= 0.05
    assert res.timing.load > 0 and res.timing.first_run > 0
    assert res.memory.peak_rss >= res.memory.rss_before_load
    # this test process has imported torch; the runner that timed the ONNX model did not
    assert res.runtime["torch_imported"] is False
    assert res.runtime["threads"] == 1 and res.settings["serve"] is False
    assert res.notes == () and res.target is None
    assert calls[0] == (0, 0) and calls[-1] == (0, res.timing.runs)
    assert from_document(to_document([res])) == [res]


def test_several_models_interleave_and_keep_input_order(art):
    calls = []
    paths = [art / "model.onnx", art / "model.pt", art / "model.onnx"]
    results = bench(paths, block_size=4, progress=lambda index, runs: calls.append((index, runs)), **FAST)
    assert [r.model.format for r in results] == ["onnx", "torchscript", "onnx"]
    assert [Path(r.model.path) for r in results] == paths
    for index, res in enumerate(results):
        assert res.timing.runs >= 5 and res.timing.total_s >= 0.05
        assert res.settings["serve"] is True
        assert any(n.startswith("interleaved with 2 other models in turns of >= 4 calls") for n in res.notes)
        runs = [n for i, n in calls if i == index]
        assert runs == sorted(runs) and runs[-1] == res.timing.runs
    # each model had its own process: only the TorchScript runner imported torch
    assert [r.runtime["torch_imported"] for r in results] == [False, True, False]
    assert {i for i, _ in calls} == {0, 1, 2}


def test_interleaved_runs_respect_max_runs(art):
    results = bench([art / "model.onnx", art / "model.onnx"], min_runs=3, max_runs=7, min_time_s=100.0,
                    warmup=0, threads=1, block_size=5)
    assert [r.timing.runs for r in results] == [7, 7]
    assert all(any("--max-runs" in note for note in r.notes) for r in results)


def test_target_threads_are_capped_at_host_cores(onnx_only):
    host = facts.usable_cores()
    big = dataclasses.replace(load_target("rpi4"), threads=host + 3)
    (res,) = bench(onnx_only, target=big, min_runs=3, min_time_s=0.0, warmup=0)
    assert res.runtime["threads"] == max(1, host - 1)
    assert res.target == "rpi4"
    assert any("capped" in note for note in res.notes)


def test_resolve_threads():
    host = facts.usable_cores()
    rpi4 = load_target("rpi4")
    assert resolve_threads(1, rpi4) == (1, [])  # explicit wins over the target
    free = max(1, host - 1)  # one core is left for the system unless threads are explicit
    assert resolve_threads(None, None)[0] == free
    small = dataclasses.replace(rpi4, threads=1)
    assert resolve_threads(None, small) == (1, [])
    threads, notes = resolve_threads(None, dataclasses.replace(rpi4, threads=host + 1))
    assert threads == free and "capped" in notes[0]
    threads, notes = resolve_threads(None, dataclasses.replace(rpi4, threads=free))
    assert threads == free and notes == []
    threads, notes = resolve_threads(host + 1, None)  # explicit wins, with a note
    assert threads == host + 1 and notes


def test_resolve_model(art, onnx_only, tmp_path):
    assert resolve_model(onnx_only).format == "onnx"
    assert resolve_model(art / "model.pt").entry.format == "torchscript"
    with pytest.raises(UsageError, match="several models"):
        resolve_model(art)
    with pytest.raises(InputFileError, match="not found"):
        resolve_model(tmp_path / "missing.onnx")
    other = tmp_path / "model.bin"
    other.write_bytes(b"x")
    with pytest.raises(UsageError, match="cannot tell"):
        resolve_model(other)


def test_checkpoints_and_corrupt_artifacts_are_refused(onnx_only, tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model.pt").write_bytes(b"weights")
    finalize(Manifest(kind="checkpoint", model={"name": "tiny"}, inputs=(), outputs=(),
                      files=(describe_file(folder, "model.pt", "checkpoint"),)), folder)
    with pytest.raises(UsageError, match="checkpoint"):
        bench(folder, **FAST)
    changed = tmp_path / "changed"
    shutil.copytree(onnx_only, changed)
    with open(changed / "model.onnx", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(InputFileError, match="checksum"):
        bench(changed / "model.onnx", **FAST)


@pytest.mark.parametrize("options, message", [
    ({"min_runs": 0}, "min-runs"),
    ({"threads": 0}, "threads"),
    ({"warmup": -1}, "warmup"),
    ({"batch": 0}, "batch"),
    ({"block_size": 0}, "block-size"),
    ({"min_time_s": -1.0}, "min-time"),
    ({"min_time_s": float("nan")}, "min-time"),
    ({"timeout_s": 0}, "timeout"),
    ({"min_runs": 10, "max_runs": 5}, "max-runs"),
    ({"threads": True}, "threads"),
    ({"shapes": {"input": [1, 0]}}, "positive"),
    ({"shapes": {"input": [1, 1, 8, 8]}, "input_file": "x.npz"}, "not both"),
    ({"input_file": "missing.npz"}, "not found"),
])
def test_bad_settings_are_usage_errors(onnx_only, options, message):
    with pytest.raises((UsageError, InputFileError), match=message):
        bench(onnx_only, **{**FAST, **options})


def test_no_paths_is_a_usage_error():
    with pytest.raises(UsageError, match="no models"):
        bench([], **FAST)


def test_input_the_model_lacks_is_a_usage_error_naming_the_model(onnx_only):
    with pytest.raises(UsageError, match=r"model\.onnx.*'foo'"):
        bench(onnx_only, shapes={"foo": [1, 2]}, **FAST)


def test_runner_failure_is_a_bench_error_with_its_message(onnx_only, tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(BenchError, match=r"broken\.onnx failed: onnxruntime cannot load"):
        bench(bad, **FAST)
    with pytest.raises(BenchError, match=r"broken\.onnx failed: onnxruntime cannot load"):
        bench([onnx_only, bad], **FAST)


def test_timeouts_stop_the_runners(onnx_only):
    with pytest.raises(BenchError, match="timed out"):
        bench(onnx_only, timeout_s=0.01, **FAST)
    with pytest.raises(BenchError, match="timed out"):
        bench([onnx_only, onnx_only], timeout_s=0.01, **FAST)
