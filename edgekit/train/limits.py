"""How long a run trains, and the limits a user set that it will not reach.

``--max-steps N`` alone is the run's length: the data repeats as many epochs as N steps take
(``max_steps`` in Hugging Face's Trainer and nanoGPT's ``max_iters`` mean the same), so
``edgekit train -m transformer-lm --max-steps 2000`` trains 2000 steps, not the 1240 its default
20 epochs would reach. Given together with ``--epochs``, whichever stops first stops the run,
and when that is the epochs, the run says so. Every setting the run cannot honour as written
(a warm-up longer than the run, evaluation or saving less often than once, a batch larger than
the data, more accumulation micro-steps than an epoch holds) is said the same way: one
``warning:`` line when the run starts and an entry in the manifest's ``metrics.limits``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from edgekit.train.config import TrainConfig

DEFAULT_EPOCHS = 20  # when neither --epochs nor --max-steps is given


@dataclass(frozen=True)
class Limit:
    """One setting the run does not reach as written: what was asked, what the run does instead."""

    setting: str  # the TrainConfig field ("max_steps")
    asked: int
    reached: int
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    total_steps: int
    epochs: int  # epochs begun (the last one may be cut short)
    limits: tuple[Limit, ...] = ()
    global_batch: int = 0  # samples per optimizer step, as the data allows (at most batch x accum x processes)


def plan(config: TrainConfig, steps_per_epoch: int, micro_per_epoch: int, samples_per_rank: int,
         world_size: int = 1) -> Plan:
    """The run's length and the limits it will not reach (see the module doc)."""
    spe = max(1, steps_per_epoch)
    limits: list[Limit] = []
    if config.epochs is None and config.max_steps is not None:
        total = config.max_steps  # honoured: the data repeats
    else:
        epochs = config.epochs or DEFAULT_EPOCHS
        total = epochs * spe
        if config.max_steps is not None and config.max_steps < total:
            total = config.max_steps
        elif config.max_steps is not None and config.max_steps > total:
            need = math.ceil(config.max_steps / spe)
            limits.append(Limit(
                "max_steps", config.max_steps, total,
                f"--max-steps {config.max_steps} is more than --epochs {epochs} reach ({epochs} x {spe} steps = "
                f"{total:,}); training {total:,} steps: drop --epochs to train {config.max_steps:,}, or pass "
                f"--epochs {need}",
            ))
    epochs_run = math.ceil(total / spe)
    batch = config.batch_size
    if batch > samples_per_rank:
        limits.append(Limit(
            "batch_size", batch, samples_per_rank,
            f"--batch-size {batch} is more than the {samples_per_rank:,} training samples"
            f"{' of each process' if world_size > 1 else ''}: each micro-batch holds {samples_per_rank:,}",
        ))
    if config.grad_accum > micro_per_epoch:
        limits.append(Limit(
            "grad_accum", config.grad_accum, micro_per_epoch,
            f"--grad-accum {config.grad_accum} is more than the {micro_per_epoch} micro-batch"
            f"{'es' if micro_per_epoch != 1 else ''} an epoch holds: "
            f"each optimizer step accumulates {micro_per_epoch} (steps do not cross epochs)",
        ))
    if config.warmup_steps is not None and config.warmup_steps > total:
        limits.append(Limit(
            "warmup_steps", config.warmup_steps, total,
            f"--warmup-steps {config.warmup_steps} is longer than the run ({total:,} steps): warm-up shortened to "
            f"{total:,}, so the learning rate peaks at the last step and never decays",
        ))
    for setting, flag, what in (("eval_every", "--eval-every", "validated"), ("save_every", "--save-every", "last.pt saved")):
        value = getattr(config, setting)
        if value is not None and value > total:
            limits.append(Limit(setting, value, total,
                                f"{flag} {value:,} is beyond the run's {total:,} steps: {what} once, at the end"))
    global_batch = min(batch, samples_per_rank) * min(config.grad_accum, micro_per_epoch) * world_size
    return Plan(total, epochs_run, tuple(limits), global_batch)
