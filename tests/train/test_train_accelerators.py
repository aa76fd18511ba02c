"""torch.compile and the GPU paths. GPU tests skip cleanly without CUDA (run them with
``benchmarks/gpu_check.py`` or pytest on a GPU machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edgekit.core.errors import EdgekitError
from edgekit.train.checkpoint import load_train_state
from edgekit.train.config import TrainConfig
from edgekit.train.loop import train

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")
TINY_LM = {"model": "transformer-lm", "model_config": {"d_model": 32, "n_heads": 2, "n_layers": 2, "max_len": 32},
           "batch_size": 8, "max_steps": 6, "log_every": 2}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


def test_compile_flag_compiles_the_trained_module(tmp_path, monkeypatch):
    """The wiring, fast: the loop compiles (here with the eager backend), saves plain weights."""
    compiled = []
    real = torch.compile

    def spy(model, **kwargs):
        compiled.append(type(model).__name__)
        return real(model, backend="eager", **kwargs)

    monkeypatch.setattr(torch, "compile", spy)
    folder, manifest = train(TrainConfig(**TINY_LM, compile=True), tmp_path / "run")
    assert compiled == ["TextTransformer"]
    assert not any(k.startswith("_orig_mod") for k in load_train_state(folder / "last.pt")["model"])
    assert manifest.metrics["steps"] == 6


@pytest.mark.slow
def test_compile_with_inductor_on_cpu(tmp_path):
    """The real thing: TorchInductor generating and compiling C++ for this CPU (.ci/setup installs
    g++). The compiled run trains the same model as the eager one: same losses, same weights. In a
    fresh interpreter, as ``edgekit train --compile`` runs (see inductor_run.py for why)."""
    script = Path(__file__).with_name("inductor_run.py")
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(tmp_path / "cache"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind")}
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    assert run["steps"] == {"eager": 3, "inductor": 3}
    assert len(run["losses"]["inductor"]) == 3
    assert run["losses"]["inductor"] == pytest.approx(run["losses"]["eager"], rel=1e-4, abs=1e-5)
    assert run["keys"] == ["fc.bias", "fc.weight"]  # plain names, no _orig_mod prefix
    for key, diff in run["max_diff"].items():
        assert diff <= 1e-5 + 1e-4 * run["scale"][key], key


@cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_cuda_mixed_precision(tmp_path, precision):
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    records = []
    _, manifest = train(TrainConfig(**TINY_LM, device="cuda", precision=precision), tmp_path / "run", records.append)
    steps = [r for r in records if r["event"] == "step"]
    assert records[0]["precision"] == precision and records[0]["device"].startswith("cuda")
    assert ("loss_scale" in steps[0]) == (precision == "fp16")
    assert all(r["loss"] == r["loss"] for r in steps)


@cuda
def test_cuda_auto_precision_and_recurrent_default(tmp_path):
    records = []
    train(TrainConfig(**TINY_LM, device="cuda"), tmp_path / "lm", records.append)
    assert records[0]["precision"] in ("bf16", "fp16")
    records.clear()
    lstm = {"model": "lstm-lm", "model_config": {"hidden_size": 32, "n_heads": 2, "max_len": 32}, "batch_size": 8,
            "max_steps": 2}
    train(TrainConfig(**lstm, device="cuda"), tmp_path / "lstm", records.append)
    assert records[0]["precision"] == "fp32"


@cuda
def test_cuda_grad_checkpoint_lowers_peak_memory(tmp_path):
    big = {**TINY_LM, "model_config": {"d_model": 256, "n_heads": 4, "n_layers": 6, "max_len": 128}, "batch_size": 32,
           "max_steps": 2, "precision": "fp32", "device": "cuda"}
    peaks = []
    for enabled in (False, True):
        torch.cuda.reset_peak_memory_stats()
        train(TrainConfig(**big, grad_checkpoint=enabled), tmp_path / f"run{enabled}")
        peaks.append(torch.cuda.max_memory_allocated())
    assert peaks[1] < peaks[0]


@cuda
def test_cuda_compile(tmp_path):
    _, manifest = train(TrainConfig(**TINY_LM, device="cuda", compile=True), tmp_path / "run")
    assert manifest.metrics["steps"] == 6


@cuda
def test_cuda_workers_and_pinned_memory(tmp_path):
    _, manifest = train(TrainConfig(**TINY_LM, device="cuda", workers=2), tmp_path / "run")
    assert manifest.metrics["steps"] == 6


@cuda
def test_cuda_out_of_memory_reports_peak_memory(tmp_path, monkeypatch):
    from edgekit.train import tasks

    def greedy(self, model, batch):
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")  # a petabyte: always too much

    monkeypatch.setattr(tasks.LanguageModelingTask, "loss", greedy)
    with pytest.raises(EdgekitError, match=r"CUDA out of memory at step 1 \(peak allocated .* GiB of .* GiB\)"):
        train(TrainConfig(**TINY_LM, device="cuda"), tmp_path / "run")


@cuda
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_cuda_torchrun_one_gpu(tmp_path, strategy):
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(tmp_path / "cache")}
    extra = ["--cpu-offload"] if strategy == "fsdp" else []
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m", "edgekit",
           "train", "--model", "transformer-lm", "--set", "d_model=32", "--set", "max_len=32", "--batch-size", "8",
           "--max-steps", "4", "--device", "cuda", "--strategy", strategy, *extra, "--out", str(tmp_path / "run")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Trained transformer-lm" in proc.stdout


def test_cpu_offload_needs_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only error")
    from edgekit.core.errors import UsageError

    with pytest.raises(UsageError, match="--cpu-offload .* needs CUDA"):
        train(TrainConfig(**TINY_LM, strategy="fsdp", cpu_offload=True, device="cpu"), tmp_path / "run")


def test_missing_cuda_is_a_usage_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only error")
    from edgekit.core.errors import UsageError

    with pytest.raises(UsageError, match="CUDA is not available"):
        train(TrainConfig(**TINY_LM, device="cuda"), tmp_path / "run")
