"""Phi-3's decoder: a Llama (``edgekit.llm.models.llama``) with GPT-NeoX's half-split rotary layout
(Phi-3 GGUFs keep Hugging Face's weights unpermuted) and an optional sliding window.

What the GGUF fuses, the model keeps apart: ``attn_qkv`` holds the query, key and value rows one
after the other and ``ffn_up`` the gate rows then the up rows; ``edgekit.llm.gguf.arch`` splits
them at import (whole rows, so a quantized file's blocks stay intact), so the Llama's blocks, its
int4/int8 programs and its fused kernels apply unchanged.

``sliding_window``: each query sees only the keys less than that many positions back, on every
layer (transformers' Phi3; llama.cpp ignores the window, see its PR 13676). A window at least as
long as the context never hides a key, so the model then runs as a plain Llama (fused kernels
included); a shorter one needs the explicit mask, as Gemma 3's local layers do.

LongRoPE (the 128k variants): each pair's frequency is divided by its factor, from
``rope_short_factors``, or ``rope_long_factors`` when the context (``max_len``) is longer than
``rope_original_context``; ``rope_attn_factor`` multiplies the rotary tables (query and key both).
"""

from __future__ import annotations

import math

from edgekit.llm.models.llama import HALVES, Llama, hidden_scores


class Phi3(Llama):
    name = "llama"  # the zoo entry every cached decoder family shares
    rotary = HALVES

    def __init__(self, vocab_size: int = 256, dim: int = 64, n_layers: int = 2, n_heads: int = 4,
                 n_kv_heads: int = 2, hidden_dim: int = 128, head_dim: int = 0, rope_theta: float = 10000.0,
                 norm_eps: float = 1e-5, max_len: int = 256, tie_embeddings: bool = False, sliding_window: int = 0,
                 rope_short_factors=(), rope_long_factors=(), rope_original_context: int = 0,
                 rope_attn_factor: float = 1.0):
        if sliding_window < 0:
            raise ValueError("sliding_window must be >= 0 (0: none)")
        if len(rope_short_factors) != len(rope_long_factors) or (rope_long_factors and rope_original_context < 1):
            raise ValueError("LongRoPE needs short and long factors of one length and the original context (>= 1)")
        if not (math.isfinite(rope_attn_factor) and rope_attn_factor > 0):
            raise ValueError("rope_attn_factor must be a positive number")
        # one set for the whole cache: llama.cpp's rule (transformers switches sets as a sequence grows
        # past the original context, which would change the keys already cached)
        factors = rope_long_factors if max_len > rope_original_context else rope_short_factors
        super().__init__(vocab_size, dim, n_layers, n_heads, n_kv_heads, hidden_dim, head_dim, rope_theta, norm_eps,
                         max_len, tie_embeddings, factors)
        self.sliding_window = sliding_window
        self.rope_cos.mul_(rope_attn_factor)
        self.rope_sin.mul_(rope_attn_factor)

    @property
    def window_hides_keys(self) -> bool:
        return 0 < self.sliding_window < self.max_len

    def attention_views(self, query_pos, key_pos, dtype) -> dict:
        if not self.window_hides_keys:
            return super().attention_views(query_pos, key_pos, dtype)
        if key_pos is None:
            raise NotImplementedError("Phi-3's sliding window needs a mask: the fused kernels have none")
        seen = key_pos.unsqueeze(0) <= query_pos.unsqueeze(1)
        recent = query_pos.unsqueeze(1) - key_pos.unsqueeze(0) < self.sliding_window
        return {"global": (self.rope_cos[query_pos], self.rope_sin[query_pos],
                           hidden_scores(seen & recent, dtype, self.query_groups))}

    def use_fused_kernels(self, fused: bool) -> None:
        super().use_fused_kernels(fused and not self.window_hides_keys)
