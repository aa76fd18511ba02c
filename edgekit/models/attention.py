"""Multi-head self-attention with a pluggable mixing rule, chosen by name from a registry.

Every variant shares the projections (qkv in, one linear out) and differs only in how queries,
keys and values are mixed:

- ``full``   softmax attention over all (earlier, when causal) positions; O(T^2).
- ``local``  softmax attention restricted to a window of ``window`` neighbours (sliding window).
- ``linear`` kernelised attention (elu + 1 feature map, Katharopoulos et al. 2020); O(T) in
             sequence length, computed in float32 for stability under autocast.

All of them trace and export to ONNX with dynamic batch and sequence axes: masks are built from
``arange`` over the traced length, never from Python branches on tensor values.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.core.errors import UsageError, unknown_name

_ATTENTION: dict[str, type["SelfAttention"]] = {}


def register_attention(name: str) -> Callable[[type], type]:
    def decorate(cls: type) -> type:
        _ATTENTION[name] = cls
        cls.kind = name
        return cls

    return decorate


def attention_names() -> list[str]:
    return sorted(_ATTENTION)


def build_attention(name: str, d_model: int, n_heads: int, causal: bool, dropout: float = 0.0, window: int = 32):
    """An attention module by name; an unknown name lists the valid ones."""
    if name not in _ATTENTION:
        raise unknown_name("attention", name, _ATTENTION)
    return _ATTENTION[name](d_model, n_heads, causal=causal, dropout=dropout, window=window)


class SelfAttention(nn.Module):
    """(N, T, d_model) -> (N, T, d_model). Subclasses implement ``mix(q, k, v)`` on (N, H, T, D)."""

    kind = "base"

    def __init__(self, d_model: int, n_heads: int, causal: bool, dropout: float = 0.0, window: int = 32):
        super().__init__()
        if d_model % n_heads:
            raise UsageError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if window < 1:
            raise UsageError(f"attention window must be >= 1, got {window}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.causal = causal
        self.dropout = dropout
        self.window = window
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        mixed = self.mix(q, k, v)  # (N, H, T, D)
        return self.out(mixed.transpose(1, 2).reshape(n, t, d))

    def mix(self, q, k, v):  # pragma: no cover - abstract
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"kind={self.kind}, heads={self.n_heads}, causal={self.causal}"


@register_attention("full")
class FullAttention(SelfAttention):
    def mix(self, q, k, v):
        p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)


@register_attention("local")
class LocalAttention(SelfAttention):
    """Each position attends to the ``window`` positions up to and including itself (causal), or
    within ``window // 2`` on either side (bidirectional)."""

    def mix(self, q, k, v):
        pos = torch.arange(q.size(-2), device=q.device)
        offset = pos[:, None] - pos[None, :]  # query - key
        if self.causal:
            allowed = (offset >= 0) & (offset < self.window)
        else:
            allowed = offset.abs() <= self.window // 2
        p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)


@register_attention("linear")
class LinearAttention(SelfAttention):
    eps = 1e-6

    def mix(self, q, k, v):
        dtype = v.dtype
        q, k, v = (F.elu(t.float()) + 1.0 if i < 2 else t.float() for i, t in enumerate((q, k, v)))
        q = q / math.sqrt(self.head_dim)
        if self.causal:
            # Running sums over time of k v^T and k: position t sees keys 0..t only.
            kv = torch.einsum("nhtd,nhte->nhtde", k, v).cumsum(dim=2)
            num = torch.einsum("nhtd,nhtde->nhte", q, kv)
            den = torch.einsum("nhtd,nhtd->nht", q, k.cumsum(dim=2))
        else:
            kv = torch.einsum("nhtd,nhte->nhde", k, v)
            num = torch.einsum("nhtd,nhde->nhte", q, kv)
            den = torch.einsum("nhtd,nhd->nht", q, k.sum(dim=2))
        return (num / (den.unsqueeze(-1) + self.eps)).to(dtype)
