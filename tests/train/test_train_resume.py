"""Resuming: an interrupted run continues to the very weights an uninterrupted run ends with;
a run killed while saving leaves the previous state loadable."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from edgekit.core.errors import UsageError
from edgekit.sources.checkpoint import load_checkpoint
from edgekit.train.checkpoint import load_train_state
from edgekit.train.config import TrainConfig
from edgekit.train.loop import train

CASES = {
    # BN + dropout (RNG), fp16 GradScaler state, accumulation groups, resume mid-epoch after a boundary
    "digits-fp16-accum": dict(
        model="digits-cnn", model_config={"width": 4}, batch_size=32, grad_accum=2, precision="fp16",
        max_steps=30, save_every=7, log_every=1,
    ),
    # packed variable-length batches, embedding dropout, clipping
    "lstm": dict(
        model="lstm-lm", model_config={"embed_dim": 16, "hidden_size": 32, "n_heads": 2, "max_len": 32},
        batch_size=8, max_steps=20, save_every=5, eval_every=6, log_every=1, clip_grad_norm=1.0,
    ),
}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


class Interrupt(Exception):
    pass


def _stop_at(step):
    def progress(record):
        if record["event"] == "step" and record["step"] == step:
            raise Interrupt

    return progress


def _assert_same_tensors(a: dict, b: dict):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            _assert_same_tensors(a[key], b[key])
        elif isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("case", list(CASES))
def test_interrupted_and_resumed_run_ends_with_the_same_weights(tmp_path, case):
    settings = CASES[case]
    straight, _ = train(TrainConfig(**settings), tmp_path / "straight")

    stop = settings["save_every"] * 3 + 2  # a few steps past the third save
    with pytest.raises(Interrupt):
        train(TrainConfig(**settings), tmp_path / "resumed", progress=_stop_at(stop))
    assert not (tmp_path / "resumed" / "manifest.json").exists()
    assert load_train_state(tmp_path / "resumed" / "last.pt")["meta"]["step"] == settings["save_every"] * 3
    records = []
    resumed, manifest = train(TrainConfig(**settings, resume=True), tmp_path / "resumed", progress=records.append)
    assert records[0]["event"] == "start" and records[0]["step"] == settings["save_every"] * 3

    a, b = load_train_state(straight / "last.pt"), load_train_state(resumed / "last.pt")
    _assert_same_tensors(a["model"], b["model"])
    _assert_same_tensors(a["optimizer"]["state"], b["optimizer"]["state"])
    _assert_same_tensors(a["rng"], b["rng"])
    for key in ("step", "scaler", "best", "schedule"):
        assert a["meta"][key] == b["meta"][key], key
    _assert_same_tensors(load_checkpoint(straight / "checkpoint.pt")[0], load_checkpoint(resumed / "checkpoint.pt")[0])

    # metrics.jsonl holds each step once: the interrupted run's records past the saved step are gone
    steps = [json.loads(line)["step"] for line in (resumed / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "step"]
    assert steps == list(range(1, settings["max_steps"] + 1))


def test_resume_refuses_other_settings_and_missing_state(tmp_path):
    settings = dict(model="digits-cnn", model_config={"width": 4}, batch_size=32, max_steps=2)
    with pytest.raises(UsageError, match="nothing to resume in .*: no last.pt"):
        train(TrainConfig(**settings, resume=True), tmp_path / "run")
    train(TrainConfig(**settings), tmp_path / "run")
    with pytest.raises(UsageError, match=r"cannot resume with different settings \(batch_size: 32 -> 16"):
        train(TrainConfig(**{**settings, "batch_size": 16}, resume=True), tmp_path / "run")


KILL_SCRIPT = textwrap.dedent(
    """
    import io, os, sys
    import torch
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    real_save, saves = torch.save, []

    def dying_save(obj, f, *args, **kwargs):
        if ".last.pt." in str(f):
            saves.append(f)
            if len(saves) == 2:  # the second save of the resumable state: die half-way through it
                buffer = io.BytesIO()
                real_save(obj, buffer)
                with open(f, "wb") as fh:
                    fh.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
                os._exit(17)
        return real_save(obj, f, *args, **kwargs)

    torch.save = dying_save
    train(TrainConfig(model="digits-cnn", model_config={"width": 4}, batch_size=32, max_steps=6, save_every=2),
          sys.argv[1])
    """
)


def test_killed_mid_save_leaves_the_previous_state_loadable(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(run)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 17, proc.stderr
    assert load_train_state(run / "last.pt")["meta"]["step"] == 2  # the first save, intact
    assert any(p.name.startswith(".last.pt.") for p in run.iterdir())  # the half-written temporary
    _, manifest = train(
        TrainConfig(model="digits-cnn", model_config={"width": 4}, batch_size=32, max_steps=6, save_every=2, resume=True),
        run,
    )
    assert manifest.metrics["steps"] == 6
