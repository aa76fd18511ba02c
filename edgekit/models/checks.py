"""Input checks at a model's ``forward`` that stay out of the way of tracing and export."""

from __future__ import annotations

import torch


def _tracing() -> bool:
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


def expect_shape(model_name: str, x, trailing: tuple[int, ...], layout: str) -> None:
    """Raise a ValueError naming the expected layout when ``x`` is not (N, *trailing).

    Skipped while FX/TorchScript/torch.export trace the model (``x`` is then a proxy or the
    check would be baked into the graph).
    """
    if not isinstance(x, torch.Tensor) or _tracing():
        return
    if x.dim() != len(trailing) + 1 or tuple(x.shape[1:]) != tuple(trailing):
        raise ValueError(f"{model_name} expects input of layout {layout}, got shape {tuple(x.shape)}")


def expect_tokens(model_name: str, tokens, vocab_size: int, max_len: int | None = None) -> None:
    """Raise a ValueError naming the layout unless ``tokens`` is (N, T) int64 ids, T <= max_len.

    Checks shape and dtype only (cheap, no device sync); skipped while tracing like ``expect_shape``.
    """
    if not isinstance(tokens, torch.Tensor) or _tracing():
        return
    layout = f"(N, T) int64 token ids in [0, {vocab_size})" + (f" with T <= {max_len}" if max_len else "")
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"{model_name} expects input of layout {layout}, got {tokens.dtype} of shape {tuple(tokens.shape)}"
        )
    if tokens.shape[1] == 0 or (max_len is not None and tokens.shape[1] > max_len):
        raise ValueError(f"{model_name} expects input of layout {layout}, got shape {tuple(tokens.shape)}")
