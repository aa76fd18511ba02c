"""What a training run holds, and the two files it is saved in.

``RunState`` is one run's state: the steps of ``loop.py`` fill it in and update it (nanoGPT keeps
these as module globals; here they are one object a reader follows from step to step).
``save_best`` writes ``checkpoint.pt`` (the unwrapped model's weights and the run's config),
``save_last`` writes ``last.pt`` (everything ``resume`` needs to continue exactly) and ``restore``
loads a ``last.pt`` back into the live objects, refusing one from a different run. Every rank
takes part in gathering the state; rank 0 writes. The file formats: ``checkpoint.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.core.errors import UsageError
from edgekit.train import distributed
from edgekit.sources.checkpoint import CHECKPOINT_FILE, save_checkpoint
from edgekit.train.checkpoint import STATE_FILE, save_train_state
from edgekit.train.config import RESUME_LOCKED, TrainConfig
from edgekit.train.reporting import RunLog
from edgekit.train.limits import DEFAULT_EPOCHS


@dataclass
class RunState:
    config: TrainConfig
    rt: Any  # distributed.Runtime: device, rank, world size, collectives
    spec: Any  # the model's registry entry
    task: Any  # loss, metric and units of the model's task
    out: Path  # the folder being written
    log: RunLog
    # data: the splits and the model settings they decide
    data: Any = None
    model_config: dict = field(default_factory=dict)
    base_meta: dict = field(default_factory=dict)  # what every checkpoint says about the run
    # model, precision, optimizer
    device: Any = None
    amp_dtype: str = "fp32"
    raw: Any = None  # the unwrapped model
    model: Any = None  # what runs forward (DDP/FSDP-wrapped, or ``raw``)
    state_model: Any = None  # where state dicts come from
    optimizer: Any = None
    scaler: Any = None
    scale_watch: Any = None
    autocast: Any = None
    # batches and the step schedule
    loader: Any = None
    batches: Any = None
    micro_per_epoch: int = 0
    steps_per_epoch: int = 0
    total_steps: int = 0
    epochs: int = 0  # epochs begun (edgekit.train.limits.plan)
    limits: list = field(default_factory=list)  # settings the run does not reach as written (limits.Limit)
    global_batch: int = 0  # samples per optimizer step
    schedule: Any = None
    eval_every: int = 0
    save_every: int = 0
    val_batches: Any = None
    # progress: saved in last.pt, put back by ``restore``
    step: int = 0
    best: dict = field(default_factory=lambda: {"value": -math.inf, "step": None, "metrics": None})
    nonfinite_streak: int = 0
    # running figures
    meter: Any = None
    started: float = 0.0
    window: list = field(default_factory=lambda: [0.0, 0, 0])  # since the last record: loss sum, steps, samples/tokens
    eval_loss: list = field(default_factory=lambda: [0.0, 0])  # since the last evaluation: loss sum, steps
    grad_norm: Any = None


def save_best(run: RunState, metrics: dict) -> None:
    """``checkpoint.pt``: the unwrapped model's weights and the run's config."""
    state = distributed.model_state(run.state_model, run.rt)
    if run.rt.is_main:
        save_checkpoint(run.out / CHECKPOINT_FILE, state, {**run.base_meta, "step": run.step, "val": metrics})
        run.log.emit("checkpoint", kind="best", step=run.step, path=str(run.out / CHECKPOINT_FILE))


def save_last(run: RunState) -> None:
    """``last.pt``: weights, optimizer, schedule, scaler, progress and every rank's RNG."""
    rt, best = run.rt, run.best
    model_sd = distributed.model_state(run.state_model, rt)
    optim_sd = distributed.optimizer_state(run.state_model, run.optimizer, rt)
    rng = distributed.rng_states(rt)
    if rt.is_main:
        meta = {
            **run.base_meta,
            "step": run.step,
            "world_size": rt.world_size,
            "best": {**best, "value": best["value"] if math.isfinite(best["value"]) else None},
            "nonfinite_streak": run.nonfinite_streak,
            "schedule": run.schedule.state_dict(),
            "scaler": run.scaler.state_dict(),
            "loss_scale_watch": run.scale_watch.state_dict(),
        }
        save_train_state(run.out / STATE_FILE, model_sd, optim_sd, rng, meta)
        run.log.emit("checkpoint", kind="last", step=run.step, path=str(run.out / STATE_FILE))


def _length(train_config: dict) -> tuple:
    """(epochs, max_steps) as the run uses them: no epochs means 20 unless max_steps sets the length."""
    epochs, max_steps = train_config.get("epochs"), train_config.get("max_steps")
    return (epochs if epochs is not None else (None if max_steps is not None else DEFAULT_EPOCHS), max_steps)


def restore(run: RunState, saved: dict) -> None:
    """Load a ``last.pt`` (``load_train_state``) into the live objects; refuse one from a different run.
    The RNG states are the caller's to put back, last."""
    config, rt = run.config, run.rt
    meta = saved["meta"]
    previous = meta.get("train_config", {})
    changed = [k for k in RESUME_LOCKED if k in previous and previous[k] != getattr(config, k)]
    if changed:
        detail = ", ".join(f"{k}: {previous[k]!r} -> {getattr(config, k)!r}" for k in changed)
        raise UsageError(f"cannot resume with different settings ({detail}); use the original ones")
    if meta.get("world_size") != rt.world_size:
        raise UsageError(
            f"the run was saved with {meta.get('world_size')} process(es), this one has {rt.world_size}; "
            "resume with the same number so every rank continues its own data order"
        )
    if _length(previous) != _length(config.to_dict()):
        run.log.warn("epochs/max_steps changed on resume: the learning-rate schedule follows the new length")
    distributed.load_model_state(run.state_model, saved["model"], rt)
    distributed.load_optimizer_state(run.state_model, run.optimizer, saved["optimizer"], rt)
    if meta.get("scaler"):
        run.scaler.load_state_dict(meta["scaler"])
    run.scale_watch.load_state_dict(meta["loss_scale_watch"])
    run.log.truncate_after(meta["step"])
    best = dict(meta["best"])
    if best.get("value") is None:
        best["value"] = -math.inf
    run.step, run.best, run.nonfinite_streak = meta["step"], best, meta["nonfinite_streak"]
