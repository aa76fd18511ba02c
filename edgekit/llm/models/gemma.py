"""Gemma 3's decoder, built from the Llama's parts (``edgekit.llm.models.llama``).

What differs: the embedding is scaled by sqrt(width); each block normalizes the attention's and
the feed-forward's outputs too (four RMSNorms); the feed-forward gates with GELU (tanh
approximation); query and key are normalized per head; rotary positions use the half-split
layout. Layers alternate: ``sliding_pattern - 1`` local layers, which see only the last
``sliding_window`` positions and rotate with ``rope_local_theta``, then one global layer, which
sees everything and rotates with ``rope_theta`` (positions divided by ``rope_linear_factor`` in the
larger models). Embeddings are tied. Gemma's norms multiply by ``1 + w``; GGUF files store ``1 + w``
already (llama.cpp's converter adds the one), so the plain RMSNorm applies.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from edgekit.llm.models.llama import HALVES, FeedForward, Llama, RMSNorm, hidden_scores, rotary_tables


class GeluFeedForward(FeedForward):
    def activate(self, gate):
        return F.gelu(gate, approximate="tanh")


class GemmaBlock(nn.Module):
    def __init__(self, dim, hidden_dim, norm_eps, attention):
        super().__init__()
        self.attention_norm = RMSNorm(dim, norm_eps)
        self.attention = attention
        self.post_attention_norm = RMSNorm(dim, norm_eps)
        self.ffn_norm = RMSNorm(dim, norm_eps)
        self.feed_forward = GeluFeedForward(dim, hidden_dim)
        self.post_ffw_norm = RMSNorm(dim, norm_eps)

    def _feed_forward(self, x):
        return x + self.post_ffw_norm(self.feed_forward(self.ffn_norm(x)))

    def forward(self, x, cos, sin, hidden):
        x = x + self.post_attention_norm(self.attention(self.attention_norm(x), cos, sin, hidden))
        return self._feed_forward(x)

    def cached(self, x, cos, sin, input_pos, hidden, start):
        x = x + self.post_attention_norm(self.attention.cached(self.attention_norm(x), cos, sin, input_pos, hidden,
                                                               start))
        return self._feed_forward(x)


class Gemma3(Llama):
    name = "llama"  # the zoo entry every cached decoder family shares
    qk_norm = True
    rotary = HALVES

    def __init__(self, vocab_size: int = 256, dim: int = 64, n_layers: int = 2, n_heads: int = 4,
                 n_kv_heads: int = 2, hidden_dim: int = 128, head_dim: int = 0, rope_theta: float = 1e6,
                 norm_eps: float = 1e-6, max_len: int = 256, tie_embeddings: bool = True, sliding_window: int = 512,
                 sliding_pattern: int = 6, rope_local_theta: float = 10000.0, rope_linear_factor: int = 1):
        if not tie_embeddings:
            raise ValueError("Gemma 3 ties its output to its embedding")
        if sliding_window < 1 or sliding_pattern < 1 or rope_linear_factor < 1:
            raise ValueError("sliding_window, sliding_pattern and rope_linear_factor must be >= 1")
        super().__init__(vocab_size, dim, n_layers, n_heads, n_kv_heads, hidden_dim, head_dim, rope_theta, norm_eps,
                         max_len, tie_embeddings)
        self.sliding_window = sliding_window
        # layer i is global when (i + 1) % pattern == 0 (llama.cpp's and transformers' rule)
        self.layer_kinds = ["global" if (i + 1) % sliding_pattern == 0 else "local" for i in range(n_layers)]
        cos, sin = rotary_tables(max_len, self.head_dim, rope_theta, scale=float(rope_linear_factor))
        self.register_buffer("rope_cos", self.rotary.widen(cos), persistent=False)
        self.register_buffer("rope_sin", self.rotary.widen(sin), persistent=False)
        cos, sin = rotary_tables(max_len, self.head_dim, rope_local_theta)
        self.register_buffer("local_cos", self.rotary.widen(cos), persistent=False)
        self.register_buffer("local_sin", self.rotary.widen(sin), persistent=False)
        self.embed_scale = math.sqrt(dim)

    def make_block(self, dim, hidden_dim, norm_eps, attention) -> nn.Module:
        return GemmaBlock(dim, hidden_dim, norm_eps, attention)

    def embed(self, tokens):
        x = self.tok_embeddings(tokens)
        return x * torch.tensor(self.embed_scale, dtype=x.dtype)

    def attention_views(self, query_pos, key_pos, dtype) -> dict:
        if key_pos is None:
            raise NotImplementedError("Gemma 3's sliding-window layers need a mask: the fused kernels have none")
        seen = key_pos.unsqueeze(0) <= query_pos.unsqueeze(1)
        recent = query_pos.unsqueeze(1) - key_pos.unsqueeze(0) < self.sliding_window
        return {"global": (self.rope_cos[query_pos], self.rope_sin[query_pos],
                           hidden_scores(seen, dtype, self.query_groups)),
                "local": (self.local_cos[query_pos], self.local_sin[query_pos],
                          hidden_scores(seen & recent, dtype, self.query_groups))}

    def use_fused_kernels(self, fused: bool) -> None:
        super().use_fused_kernels(False)  # the sliding-window layers need the explicit mask
