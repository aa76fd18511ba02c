"""What model a GGUF file holds, and whether edgekit can run it.

``blockers`` lists everything that stops an import at once (tensor types, architecture,
tokenizer, mixture of experts, rope scaling, rotary over part of each head), so a refusal is one
line naming all of it.
``model_config`` reads the config of a supported architecture into the decoder config of
``edgekit.llm.models.llama`` (``family`` picks Llama, Qwen2, Qwen3, Gemma 3 or Phi-3); ``expected_tensors``
is every tensor that config needs, with its shape, and nothing else may be in the file.

Keys read, under the architecture's prefix: ``embedding_length``, ``block_count``,
``attention.head_count``, ``.head_count_kv`` (default: head_count), ``feed_forward_length``,
``context_length``, ``rope.freq_base``, ``attention.layer_norm_rms_epsilon``,
``attention.key_length``/``value_length``/``rope.dimension_count`` (default width / heads),
``vocab_size`` (default: the tokenizer's size); Gemma 3 also ``attention.sliding_window``,
``attention.sliding_window_pattern`` (default 6) and ``rope.scaling.type``/``.factor`` (linear);
Llama 3.x's rope scaling is the ``rope_freqs`` tensor; Phi-3's keys and fused tensors are described
in ``edgekit.llm.gguf.phi3_layout``.
"""

from __future__ import annotations

import math

from edgekit.core.errors import InputFileError
from edgekit.core.outputs import safe_text
from edgekit.llm.gguf.phi3_layout import LONG, SHORT, phi3_shapes
from edgekit.core.bounds import model_size_problem

ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma3", "phi3")
TOKENIZERS = ("gpt2", "llama")  # byte-level BPE; SentencePiece
LOCAL_ROPE_THETA = 10000.0  # Gemma 3's local layers (llama.cpp and transformers fix it; GGUFs do not carry it)


def blockers(gguf) -> list[str]:
    """Why ``gguf`` cannot be imported: every reason, or [] when nothing stops it."""
    from edgekit.llm.gguf.quants import BY_NAME

    meta, arch = gguf.metadata, gguf.architecture
    reasons = []
    unknown = {t: n for t, n in gguf.quant_types().items() if t not in BY_NAME}
    if unknown:
        listed = ", ".join(f"{safe_text(t)} x{n}" for t, n in unknown.items())
        reasons.append(f"tensor types {listed} (edgekit dequantizes {', '.join(BY_NAME)})")
    if arch not in ARCHITECTURES:
        reasons.append(f"architecture {safe_text(arch) or '(none)'} (edgekit imports {', '.join(ARCHITECTURES)})")
    kind = meta.get("tokenizer.ggml.model")
    if kind not in TOKENIZERS:
        reasons.append(f"tokenizer {safe_text(str(kind))[:40]} (edgekit builds gpt2 byte-level BPE and llama "
                       "SentencePiece tokenizers)")
    elif kind == "gpt2":
        from edgekit.llm.gguf.tokenizer import PRE_TOKENIZERS

        pre = meta.get("tokenizer.ggml.pre", "default")
        if pre not in PRE_TOKENIZERS:
            reasons.append(f"pre-tokenizer {safe_text(str(pre))[:40]} (edgekit knows {', '.join(PRE_TOKENIZERS)})")
    if meta.get(f"{arch}.expert_count"):
        reasons.append(f"a mixture of {safe_text(str(meta[f'{arch}.expert_count']))[:20]} experts (edgekit runs dense "
                       "models)")
    partial = _partial_rotary(meta, arch)
    if partial:
        reasons.append(partial)
    scaling = meta.get(f"{arch}.rope.scaling.type")
    allowed = ("none",) + (("linear",) if arch == "gemma3" else ())
    if scaling is not None and scaling not in allowed:
        reasons.append(f"rope scaling {safe_text(str(scaling))[:40]} (edgekit applies Llama 3's rope_freqs factors"
                       " and Gemma 3's linear scaling)")
    return reasons


def _partial_rotary(meta: dict, arch: str) -> str | None:
    """The reason a file that rotates only part of each head (Phi-4-mini: 3/4) is refused, or None;
    values that are not positive integers are left to ``model_config``'s checks."""
    def number(key):
        value = meta.get(f"{arch}.{key}")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    rope, width, heads = number("rope.dimension_count"), number("embedding_length"), number("attention.head_count")
    head = number("attention.key_length") or (width // heads if width and heads and width % heads == 0 else None)
    if rope and head and rope < head:
        return f"rotary positions over {rope} of each head's {head} dimensions (edgekit's decoders rotate whole heads)"
    return None


def check_supported(gguf) -> None:
    reasons = blockers(gguf)
    if reasons:
        raise InputFileError(f"{safe_text(str(gguf.path))} cannot be imported: {'; '.join(reasons)}")


def _int(meta: dict, key: str, where: str, default=None, low: int = 1) -> int:
    value = meta.get(key, default)
    if value is None:
        raise InputFileError(f"{where}: metadata {key} is missing (needed to build the model)")
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputFileError(f"{where}: metadata {key} is {safe_text(repr(value))[:80]}, not an integer >= {low}")
    return value


def _float(meta: dict, key: str, where: str, default: float) -> float:
    value = meta.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputFileError(f"{where}: metadata {key} is {safe_text(repr(value))[:80]}, not a positive number")
    return float(value)


def model_config(gguf) -> tuple[dict, int]:
    """The decoder config (without ``max_len``) and the GGUF's own context length."""
    check_supported(gguf)
    where, meta, arch = safe_text(str(gguf.path)), gguf.metadata, gguf.architecture
    p = f"{arch}."
    dim = _int(meta, p + "embedding_length", where)
    heads = _int(meta, p + "attention.head_count", where)
    kv_heads = _int(meta, p + "attention.head_count_kv", where, heads)
    head_dim = _int(meta, p + "attention.key_length", where, dim // heads if dim % heads == 0 else None)
    rope_dim = _int(meta, p + "rope.dimension_count", where, head_dim)
    if rope_dim != head_dim or _int(meta, p + "attention.value_length", where, head_dim) != head_dim:
        raise InputFileError(f"{where}: rotary dimension {rope_dim} / value length differ from the head size "
                             f"{head_dim}; edgekit's decoders rotate whole heads")
    if heads % kv_heads:
        raise InputFileError(f"{where}: {heads} attention heads are not a multiple of {kv_heads} key/value heads")
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = _int(meta, p + "vocab_size", where, len(tokens) if isinstance(tokens, list) and tokens else None)
    config = {
        "family": arch, "vocab_size": vocab, "dim": dim, "n_layers": _int(meta, p + "block_count", where),
        "n_heads": heads, "n_kv_heads": kv_heads, "hidden_dim": _int(meta, p + "feed_forward_length", where),
        "head_dim": head_dim, "rope_theta": _float(meta, p + "rope.freq_base", where, 10000.0),
        "norm_eps": _float(meta, p + "attention.layer_norm_rms_epsilon", where, 1e-6 if arch == "gemma3" else 1e-5),
        "tie_embeddings": "output.weight" not in gguf.tensors,
    }
    if head_dim % 2:
        raise InputFileError(f"{where}: head size {head_dim} is odd; rotary positions need an even one")
    if arch == "gemma3":
        config.update(_gemma3(gguf, where, p))
    if arch == "phi3":
        config.update(_phi3(gguf, where, p, head_dim))
    if "rope_freqs.weight" in gguf.tensors:
        config["rope_freq_factors"] = _rope_factors(gguf, where, head_dim)
    context = _int(meta, p + "context_length", where)
    for key, value in (*config.items(), ("max_len", context)):
        problem = model_size_problem(key, value)
        if problem:
            raise InputFileError(f"{where}: {key} {value:,}: {problem}")
    check_tensors(gguf, config)
    return config, context


def _gemma3(gguf, where: str, p: str) -> dict:
    meta = gguf.metadata
    factor = 1
    if meta.get(p + "rope.scaling.type") == "linear":
        value = _float(meta, p + "rope.scaling.factor", where, 1.0)
        if value != int(value) or not 1 <= value <= 1024:
            raise InputFileError(f"{where}: linear rope scaling by {value}; edgekit scales by whole factors")
        factor = int(value)
    return {"sliding_window": _int(meta, p + "attention.sliding_window", where),
            "sliding_pattern": _sliding_pattern(meta, p, where, gguf.metadata.get(p + "block_count")),
            "rope_local_theta": LOCAL_ROPE_THETA, "rope_linear_factor": factor}


def _phi3(gguf, where: str, p: str, head_dim: int) -> dict:
    meta = gguf.metadata
    config = {"sliding_window": _int(meta, p + "attention.sliding_window", where, 0, low=0)}
    present = [name for name in (LONG, SHORT) if name in gguf.tensors]
    if len(present) == 1:
        raise InputFileError(f"{where}: {present[0]} without its pair; Phi-3's LongRoPE needs {LONG} and {SHORT}")
    if present:
        config.update(rope_short_factors=_rope_factors(gguf, where, head_dim, SHORT),
                      rope_long_factors=_rope_factors(gguf, where, head_dim, LONG),
                      rope_original_context=_int(meta, p + "rope.scaling.original_context_length", where),
                      rope_attn_factor=_float(meta, p + "rope.scaling.attn_factor", where, 1.0))
    return config


def _sliding_pattern(meta: dict, p: str, where: str, layers) -> int:
    """Every how many layers one is global: the key as a number, or as one flag per layer (true: a
    sliding-window layer) that follows such a period; llama.cpp's default for Gemma 3 is 6."""
    value = meta.get(p + "attention.sliding_window_pattern", 6)
    if isinstance(value, list) and isinstance(layers, int) and len(value) == layers:
        for period in range(1, layers + 2):
            if value == [(i + 1) % period != 0 for i in range(layers)]:
                return period
        raise InputFileError(f"{where}: the sliding-window layers do not repeat with a period (edgekit's Gemma 3 "
                             "makes every n-th layer global)")
    return _int(meta, p + "attention.sliding_window_pattern", where, 6)


def _rope_factors(gguf, where: str, head_dim: int, name: str = "rope_freqs.weight") -> list[float]:
    import numpy as np

    if name == "rope_freqs.weight" and gguf.architecture != "llama":
        raise InputFileError(f"{where}: a rope_freqs tensor in a {safe_text(gguf.architecture)} file (Llama 3's "
                             "rope scaling); edgekit reads it in llama files only")
    info = gguf.tensors[name]
    if info.shape != (head_dim // 2,):
        raise InputFileError(f"{where}: {name} has shape {list(info.shape)}, not [{head_dim // 2}]")
    values = gguf.array(name)
    if not np.isfinite(values).all() or (values <= 0).any():
        raise InputFileError(f"{where}: {name} holds factors that are not positive numbers")
    return [float(v) for v in values]


def expected_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> its numpy shape, for a decoder of ``config``."""
    family = config.get("family", "llama")
    d, v, f = config["dim"], config["vocab_size"], config["hidden_dim"]
    hd = config["head_dim"]
    q, kv = config["n_heads"] * hd, config["n_kv_heads"] * hd
    shapes = {"token_embd.weight": (v, d), "output_norm.weight": (d,)}
    if not config["tie_embeddings"]:
        shapes["output.weight"] = (v, d)
    if config.get("rope_freq_factors"):
        shapes["rope_freqs.weight"] = (hd // 2,)
    for i in range(config["n_layers"]):
        b = f"blk.{i}."
        shapes.update({b + "attn_norm.weight": (d,), b + "ffn_norm.weight": (d,), b + "attn_q.weight": (q, d),
                       b + "attn_k.weight": (kv, d), b + "attn_v.weight": (kv, d), b + "attn_output.weight": (d, q),
                       b + "ffn_gate.weight": (f, d), b + "ffn_up.weight": (f, d), b + "ffn_down.weight": (d, f)})
        if family == "qwen2":
            shapes.update({b + "attn_q.bias": (q,), b + "attn_k.bias": (kv,), b + "attn_v.bias": (kv,)})
        if family in ("qwen3", "gemma3"):
            shapes.update({b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,)})
        if family == "gemma3":
            shapes.update({b + "post_attention_norm.weight": (d,), b + "post_ffw_norm.weight": (d,)})
        if family == "phi3":  # fused: attn_qkv for attn_q/k/v, ffn_up holds ffn_gate too
            for part in ("attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"):
                del shapes[f"{b}{part}.weight"]
    if family == "phi3":
        shapes.update(phi3_shapes(config))
    return shapes


def check_tensors(gguf, config: dict) -> None:
    where = safe_text(str(gguf.path))
    expected = expected_tensors(config)
    missing = [n for n in expected if n not in gguf.tensors]
    family = config.get("family", "llama")
    if missing:
        raise InputFileError(f"{where} lacks {len(missing)} tensor(s) a {family} model of its config needs "
                             f"({safe_text(', '.join(missing[:3]))}); a partial or foreign file")
    extra = sorted(set(gguf.tensors) - set(expected))
    if extra:
        raise InputFileError(f"{where} has tensor(s) edgekit's {family} decoder does not use "
                             f"({safe_text(', '.join(extra[:3]))}): biases, extra layers or another architecture "
                             f"under the name {family}")
    for name, shape in expected.items():
        got = gguf.tensors[name].shape
        if got != shape:
            raise InputFileError(f"{where}: tensor {safe_text(name)} has shape {list(got)}; its config "
                                 f"implies {list(shape)}")


_PARTS = {"attn_norm": "attention_norm", "ffn_norm": "ffn_norm", "attn_q": "attention.wq", "attn_k": "attention.wk",
          "attn_v": "attention.wv", "attn_output": "attention.wo", "ffn_gate": "feed_forward.w1",
          "ffn_up": "feed_forward.w3", "ffn_down": "feed_forward.w2", "attn_q_norm": "attention.q_norm",
          "attn_k_norm": "attention.k_norm", "post_attention_norm": "post_attention_norm",
          "post_ffw_norm": "post_ffw_norm"}


def state_key(name: str) -> str | None:
    """GGUF tensor name -> the decoder's state-dict key (None: read into the config, not a weight)."""
    fixed = {"token_embd.weight": "tok_embeddings.weight", "output_norm.weight": "norm.weight",
             "output.weight": "output.weight", "rope_freqs.weight": None, LONG: None, SHORT: None}
    if name in fixed:
        return fixed[name]
    _, i, rest = name.split(".", 2)
    part, kind = rest.rsplit(".", 1)
    return f"layers.{i}.{_PARTS[part]}.{kind}"
