"""Training configuration: validated up front, JSON-able so it can live in the manifest."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from edgekit.errors import UsageError

DEVICES = ("auto", "cpu", "cuda", "mps")


@dataclass(frozen=True)
class TrainConfig:
    model: str = "digits-cnn"
    model_config: dict[str, Any] = field(default_factory=dict)
    epochs: int = 20
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-4
    seed: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be a positive integer, got {value!r}")
        if not self.lr > 0:
            raise UsageError(f"lr must be positive, got {self.lr!r}")
        if self.weight_decay < 0:
            raise UsageError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise UsageError(f"unknown device {self.device!r}; choose one of: {', '.join(DEVICES)}, cuda:N")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
