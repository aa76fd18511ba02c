"""Learning-rate schedule: linear warm-up, then cosine decay to ``min_lr``.

A pure function of the step, so its whole state is the step (and the settings): resuming a run
at step ``s`` gives exactly the learning rate the uninterrupted run had at ``s``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

DEFAULT_WARMUP_FRACTION = 0.05


def default_warmup(total_steps: int) -> int:
    return max(1, round(total_steps * DEFAULT_WARMUP_FRACTION)) if total_steps > 1 else 0


@dataclass(frozen=True)
class WarmupCosine:
    peak_lr: float
    total_steps: int
    warmup_steps: int
    min_lr: float = 0.0

    def lr(self, step: int) -> float:
        """Learning rate for optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return self.peak_lr * (step + 1) / self.warmup_steps
        decay_steps = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / decay_steps)
        return self.min_lr + 0.5 * (self.peak_lr - self.min_lr) * (1.0 + math.cos(math.pi * progress))

    def apply(self, optimizer, step: int) -> float:
        lr = self.lr(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    def state_dict(self) -> dict:
        return asdict(self)
