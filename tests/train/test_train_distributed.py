"""Distributed training on CPU: torchrun with 2 gloo processes vs 1 process, same global batch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from edgekit.formats.artifacts import load_manifest
from edgekit.train.checkpoint import load_train_state

# No dropout, no batch norm, fixed-size samples: 2 x 8 per step is the same step as 1 x 16.
ARGS = [
    "--model", "transformer-classifier",
    "--set", "d_model=32", "--set", "n_heads=2", "--set", "n_layers=1", "--set", "dropout=0.0",
    "--max-steps", "6", "--log-every", "2", "--device", "cpu", "--precision", "fp32", "--lr", "3e-3",
]


def _env(tmp_path):
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(tmp_path / "cache"), "EDGEKIT_NO_PROGRESS": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


def _single(tmp_path, batch: int, *extra):
    out = tmp_path / "single"
    cmd = [sys.executable, "-m", "edgekit", "train", *ARGS, "--batch-size", str(batch), "--out", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def _torchrun(tmp_path, name: str, batch: int, *extra):
    out = tmp_path / name
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "edgekit", "train", *ARGS, "--batch-size", str(batch), "--out", str(out), *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_gloo_processes_match_one_process_with_the_same_global_batch(tmp_path, strategy):
    single = _single(tmp_path, 16)
    multi, proc = _torchrun(tmp_path, strategy, 8, "--strategy", strategy)

    _, one = load_manifest(single)
    _, two = load_manifest(multi)
    assert two.metrics["loss"] == pytest.approx(one.metrics["loss"], rel=1e-4)
    assert two.metrics["accuracy"] == pytest.approx(one.metrics["accuracy"], abs=0.01)
    a, b = load_train_state(single / "last.pt"), load_train_state(multi / "last.pt")
    assert b["meta"]["world_size"] == 2 and {"torch.0", "torch.1"} <= set(b["rng"])  # per-rank RNG saved
    for key in a["model"]:
        if not key.endswith("qkv.bias"):  # zero-gradient key bias: Adam amplifies rounding noise there
            assert torch.allclose(a["model"][key], b["model"][key], atol=1e-4), key

    # only rank 0 reports and writes
    assert proc.stdout.count("Trained transformer-classifier") == 1
    steps = [line for line in (multi / "metrics.jsonl").read_text().splitlines() if '"event": "step"' in line]
    assert len(steps) == 3
    start = (multi / "metrics.jsonl").read_text().splitlines()[0]
    assert '"world_size": 2' in start and f'"strategy": "{strategy}"' in start

    if strategy == "ddp":  # every rank picks up its own RNG state and data order again
        _torchrun(tmp_path, strategy, 8, "--strategy", strategy, "--resume", "--max-steps", "8")
        _, longer = load_manifest(multi)
        assert longer.metrics["steps"] == 8
        assert load_train_state(multi / "last.pt")["meta"]["step"] == 8
