"""Which torch device a stage runs on (training, generation, import checks)."""

from __future__ import annotations

from edgekit.core.errors import UsageError


def select_device(requested: str = "auto"):
    """``auto``: CUDA, then MPS, then CPU. An explicit device that is missing is an error."""
    import torch

    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"device {requested!r} requested but CUDA is not available")
    if requested.startswith("cuda:") and int(requested.split(":")[1]) >= torch.cuda.device_count():
        raise UsageError(f"device {requested!r} requested but only {torch.cuda.device_count()} GPU(s) are visible")
    if requested == "mps" and not torch.backends.mps.is_available():
        raise UsageError("device 'mps' requested but Apple MPS is not available")
    return torch.device(requested)
