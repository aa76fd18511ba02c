"""Mixed precision: which dtype, the autocast context, and the fp16 loss scaler.

fp32: no autocast. bf16: autocast, no scaler (bf16 has fp32's range). fp16: autocast plus
``torch.amp.GradScaler``, whose scale is logged; ``LossScaleWatch`` says when it keeps falling
(gradients overflow step after step: the run is diverging or fp16 is the wrong choice).
"""

from __future__ import annotations

import contextlib

from edgekit.core.errors import UsageError

DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def resolve_precision(requested: str, device, recurrent: bool) -> str:
    """``auto`` -> bf16 on CUDA with bf16 support (else fp16), fp32 on CPU/MPS and for recurrent
    models (LSTM cells gain little and lose accuracy in half precision). Explicit choices stand."""
    import torch

    if requested == "auto":
        if device.type == "cuda" and not recurrent:
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "fp32"
    if requested == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UsageError("this GPU does not support bf16; use --precision fp16 or fp32")
    return requested


def autocast(device, precision: str):
    """The forward-pass context for ``precision`` (a no-op context for fp32)."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, DTYPES[precision]))


def make_scaler(device, precision: str):
    """A GradScaler that is active only for fp16 (disabled scalers pass everything through)."""
    import torch

    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


class LossScaleWatch:
    """Warn once per streak when the loss scale has fallen ``patience`` times without growing,
    or has dropped below ``floor``."""

    def __init__(self, patience: int = 5, floor: float = 1.0):
        self.patience = patience
        self.floor = floor
        self.previous: float | None = None
        self.falls = 0
        self.warned = False

    def update(self, scale: float) -> str | None:
        message = None
        if self.previous is not None:
            if scale < self.previous:
                self.falls += 1
            elif scale > self.previous:
                self.falls, self.warned = 0, False
        self.previous = scale
        if not self.warned and (self.falls >= self.patience or scale < self.floor):
            self.warned = True
            message = (
                f"fp16 loss scale keeps falling (now {scale:g}, {self.falls} falls in a row): gradients "
                "overflow step after step; lower --lr, set --clip-grad-norm, or use --precision bf16/fp32"
            )
        return message

    def state_dict(self) -> dict:
        return {"previous": self.previous, "falls": self.falls, "warned": self.warned}

    def load_state_dict(self, state: dict) -> None:
        self.previous, self.falls, self.warned = state["previous"], state["falls"], state["warned"]
