"""How a ``phi3`` GGUF's tensors differ from a Llama's (llama.cpp's converter, ``Phi3MiniModel``);
``edgekit.llm.gguf.arch`` reads its config keys.

- ``blk.N.attn_qkv.weight``: the query rows, then the key rows, then the value rows;
- ``blk.N.ffn_up.weight``: the gate rows (the half SiLU is applied to), then the up rows;
- ``phi3.attention.sliding_window``: 0 or absent for none (Phi-4 writes 0);
- the 128k variants: ``rope_factors_long.weight`` and ``rope_factors_short.weight`` (one divisor
  per rotary pair), ``phi3.rope.scaling.attn_factor`` and ``.original_context_length``.

``unfused`` splits the fused tensors into the Llama's (whole rows: a quantized file's blocks run
along a row, so each part keeps its own blocks).
"""

from __future__ import annotations

LONG, SHORT = "rope_factors_long.weight", "rope_factors_short.weight"


def phi3_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """The shapes of a phi3 file's fused and LongRoPE tensors (numpy order), per layer prefix ``blk.N.``."""
    d, f, hd = config["dim"], config["hidden_dim"], config["head_dim"]
    qkv = (config["n_heads"] + 2 * config["n_kv_heads"]) * hd
    shapes = {}
    if config.get("rope_long_factors"):
        shapes.update({LONG: (hd // 2,), SHORT: (hd // 2,)})
    for i in range(config["n_layers"]):
        shapes.update({f"blk.{i}.attn_qkv.weight": (qkv, d), f"blk.{i}.ffn_up.weight": (2 * f, d)})
    return shapes


def unfused(name: str, values, config: dict) -> list[tuple[str, object]]:
    """A GGUF tensor as (name, values) in the Llama's layout: a phi3 file's ``attn_qkv`` as
    ``attn_q``, ``attn_k``, ``attn_v`` and its ``ffn_up`` as ``ffn_gate`` and ``ffn_up`` (copies,
    so the parts do not pin the whole); anything else as it is."""
    if config.get("family") != "phi3" or not name.endswith((".attn_qkv.weight", ".ffn_up.weight")):
        return [(name, values)]
    block = name.rsplit(".", 2)[0]
    if name.endswith(".ffn_up.weight"):
        f = config["hidden_dim"]
        return [(f"{block}.ffn_gate.weight", values[:f].copy()), (f"{block}.ffn_up.weight", values[f:].copy())]
    q = config["n_heads"] * config["head_dim"]
    kv = config["n_kv_heads"] * config["head_dim"]
    return [(f"{block}.attn_q.weight", values[:q].copy()), (f"{block}.attn_k.weight", values[q:q + kv].copy()),
            (f"{block}.attn_v.weight", values[q + kv:].copy())]
