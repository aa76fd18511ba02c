"""Training building blocks: config validation, schedule, precision helpers, checkpoint files."""

from __future__ import annotations

import math

import pytest

from edgekit.core.errors import InputFileError, UsageError
from edgekit.train.config import TrainConfig
from edgekit.train.precision import LossScaleWatch
from edgekit.train.schedule import WarmupCosine, default_warmup


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epochs": 0}, "epochs must be a positive integer"),
        ({"grad_accum": 0}, "grad_accum must be a positive integer"),
        ({"max_steps": -1}, "max_steps must be a positive integer"),
        ({"lr": 0}, "lr must be positive"),
        ({"clip_grad_norm": 0.0}, "clip_grad_norm must be positive"),
        ({"precision": "fp8"}, "unknown precision 'fp8'; choose one of: auto, fp32, bf16, fp16"),
        ({"strategy": "zero3"}, "unknown strategy 'zero3'; choose one of: auto, ddp, fsdp"),
        ({"device": "tpu"}, "unknown device 'tpu'"),
        ({"tokenizer": "bpe"}, "unknown tokenizer 'bpe'"),
        ({"cpu_offload": True}, "cpu_offload needs strategy 'fsdp'"),
        ({"min_lr": 1.0}, "min_lr must be between 0 and lr"),
    ],
)
def test_config_rejects_bad_values_naming_them(kwargs, message):
    with pytest.raises(UsageError, match=message):
        TrainConfig(**kwargs)


def test_config_is_json_able():
    import json

    assert json.loads(json.dumps(TrainConfig(model_config={"width": 8}).to_dict()))["model_config"] == {"width": 8}


def test_schedule_warms_up_linearly_then_decays_by_cosine():
    s = WarmupCosine(peak_lr=1.0, total_steps=110, warmup_steps=10, min_lr=0.1)
    assert [round(s.lr(i), 3) for i in range(3)] == [0.1, 0.2, 0.3]
    assert s.lr(9) == pytest.approx(1.0)
    assert s.lr(10) == pytest.approx(1.0)
    assert s.lr(60) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert s.lr(110) == pytest.approx(0.1)
    lrs = [s.lr(i) for i in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    assert default_warmup(400) == 20 and default_warmup(1) == 0


def test_loss_scale_watch_warns_once_per_falling_streak():
    watch = LossScaleWatch(patience=3)
    messages = [watch.update(s) for s in (65536, 32768, 16384, 8192, 4096, 2048)]
    assert [m is not None for m in messages] == [False, False, False, True, False, False]
    assert "loss scale keeps falling" in messages[3]
    assert watch.update(4096) is None  # grew: streak over
    assert [watch.update(s) is not None for s in (2048, 1024, 512)] == [False, False, True]
    assert LossScaleWatch().update(0.5) is not None  # below the floor at once


def test_train_state_round_trips_with_weights_only(tmp_path):
    import torch

    from edgekit.train.checkpoint import load_train_state, save_train_state

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    rng = {"torch.0": torch.get_rng_state()}
    save_train_state(tmp_path / "last.pt", model.state_dict(), opt.state_dict(), rng, {"step": 7})
    raw = torch.load(tmp_path / "last.pt", weights_only=True)  # no pickled objects inside
    assert isinstance(raw["meta"], str)
    state = load_train_state(tmp_path / "last.pt")
    assert state["meta"]["step"] == 7
    assert torch.equal(state["rng"]["torch.0"], rng["torch.0"])
    fresh = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters())
    fresh.load_state_dict(state["optimizer"])
    for key, values in opt.state_dict()["state"].items():
        for name, value in values.items():
            assert torch.equal(fresh.state_dict()["state"][key][name], value)


def test_truncated_state_is_a_clear_error(tmp_path):
    from edgekit.train.checkpoint import load_train_state

    (tmp_path / "last.pt").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(InputFileError, match="corrupt or truncated"):
        load_train_state(tmp_path / "last.pt")
