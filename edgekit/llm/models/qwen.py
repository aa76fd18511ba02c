"""Qwen2 and Qwen3 decoders: a Llama with GPT-NeoX's half-split rotary layout (their GGUFs keep
Hugging Face's weights unpermuted); Qwen2 adds biases to the query, key and value projections,
Qwen3 normalizes each head's query and key (RMSNorm over the head) and sets its head size apart
from width / heads."""

from __future__ import annotations

from edgekit.llm.models.llama import HALVES, Llama


class Qwen2(Llama):
    name = "llama"  # the zoo entry every cached decoder family shares
    attention_bias = True
    rotary = HALVES


class Qwen3(Llama):
    name = "llama"
    qk_norm = True
    rotary = HALVES
