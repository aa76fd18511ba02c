"""GGUF architectures (issue 34): Qwen2, Qwen3, Llama 3.x rope scaling and Gemma 3, each checked
against transformers' own model class.

Each test builds a tiny random model in transformers, writes its weights as a GGUF the way
llama.cpp's converter names and lays them out (Llama's q/k rows permuted to pairs, Gemma's norms
stored as 1 + w), some matrices as K-quant blocks, imports the file with ``edgekit import`` and
compares edgekit's logits (whole sequence, and prefill + cached decode steps) with transformers'
logits of a model that holds the values llama.cpp's Python reader (``gguf.GGUFReader`` and its
reference dequantizers) reads from the same file.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
VOCAB = 300
WIDTH, HIDDEN = 256, 512  # rows of 256: the K-quant blocks fit


def _tokenizer_metadata(writer) -> None:
    """A byte-level BPE vocabulary of 300 (GPT-2's byte map, a few merges, three specials)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    tokens = [chr(b) if b in printable else chr(next(extra)) for b in range(256)]
    merges = []
    for pair in ("Ġ t", "h e", "Ġt he", "i n", "a n", "e r", "o n", "Ġ a", "r e", "a t", "s t", "e n", "o r", "Ġ s",
                 "e s", "Ġ o", "i s", "Ġ c", "a l", "i t", "Ġ w", "e d", "a r", "Ġ p", "l e", "o u", "Ġ f", "i c",
                 "Ġ b", "l l", "Ġ m", "r o", "Ġ in", "a s", "Ġ h", "e l", "Ġ d", "c a", "i on", "Ġ an", "l o"):
        tokens.append(pair.replace(" ", ""))
        merges.append(pair)
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * 297 + [3, 3, 3])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(298)
    writer.add_eos_token_id(299)


def _permute(w, heads):  # what llama.cpp's converter does to a Llama's q/k rows (half-split -> pairs)
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _k_blocks(shape, type_name, rng):
    """Random valid K-quant blocks for a (rows, 256k) matrix, scaled like its weights."""
    from test_gguf_quants import random_blocks

    from edgekit.llm.gguf.quants import BY_NAME

    n = shape[0] * shape[1] // 256
    raw = random_blocks(type_name, n, rng, scale={"Q4_K": 2e-4, "Q5_K": 1e-4, "Q6_K": 3e-5}[type_name])
    return raw.reshape(shape[0], -1), BY_NAME[type_name]


_HF_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "pre_feedforward_layernorm": "ffn_norm",
             "post_feedforward_layernorm": "post_ffw_norm", "self_attn.qkv_proj": "attn_qkv",
             "mlp.gate_up_proj": "ffn_up"}  # the last two: Phi-3's fused projections


def _gguf_name(key: str, arch: str) -> str:
    if key == "model.embed_tokens.weight":
        return "token_embd.weight"
    if key == "model.norm.weight":
        return "output_norm.weight"
    if key == "lm_head.weight":
        return "output.weight"
    _, _, i, rest = key.split(".", 3)
    part, kind = rest.rsplit(".", 1)
    if part == "post_attention_layernorm":
        name = "post_attention_norm" if arch == "gemma3" else "ffn_norm"
    else:
        name = _HF_NAMES[part]
    return f"blk.{i}.{name}.{kind}"


def write_gguf(path, model, arch: str, metadata, quantized: dict, seed: int = 0, tokenizer=_tokenizer_metadata):
    """``model``'s weights as a GGUF of ``arch``; ``quantized`` maps a GGUF tensor suffix (e.g.
    ``ffn_down.weight``) to the K-quant type its matrices get (random blocks); the rest F32."""
    import gguf
    from gguf.constants import GGMLQuantizationType

    rng = np.random.default_rng(seed)
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), arch)
    metadata(writer)
    tokenizer(writer)
    tied = getattr(cfg, "tie_word_embeddings", False)
    for key, value in model.state_dict().items():
        if key == "lm_head.weight" and tied:
            continue
        name = _gguf_name(key, arch)
        w = value.detach().float().numpy().copy()
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            w = _permute(w, cfg.num_attention_heads if "attn_q" in name else cfg.num_key_value_heads)
        if arch == "gemma3" and name.endswith("norm.weight"):
            w = w + 1  # llama.cpp stores Gemma's (1 + w)
        qtype = next((t for suffix, t in quantized.items() if name.endswith(suffix)), None)
        if qtype and w.ndim == 2 and w.shape[1] % 256 == 0:
            raw, _ = _k_blocks(w.shape, qtype, rng)
            writer.add_tensor(name, raw, raw_dtype=GGMLQuantizationType[qtype])
        else:
            writer.add_tensor(name, w)
    if arch == "llama" and getattr(cfg, "rope_parameters", {}).get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", _llama3_factors(cfg))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _llama3_factors(cfg) -> np.ndarray:
    """Llama 3's rope scaling as one divisor per rotary pair (what llama.cpp's converter writes)."""
    rope = cfg.rope_parameters
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    inv_freq = 1.0 / rope["rope_theta"] ** (np.arange(0, head_dim, 2) / head_dim)
    low = rope["original_max_position_embeddings"] / rope["low_freq_factor"]
    high = rope["original_max_position_embeddings"] / rope["high_freq_factor"]
    factors = []
    for freq in inv_freq:
        wavelength = 2 * np.pi / freq
        if wavelength < high:
            factors.append(1.0)
        elif wavelength > low:
            factors.append(rope["factor"])
        else:
            smooth = (rope["original_max_position_embeddings"] / wavelength - rope["low_freq_factor"]) / (
                rope["high_freq_factor"] - rope["low_freq_factor"])
            factors.append(1 / ((1 - smooth) / rope["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def reference_from_gguf(path, model, arch: str):
    """``model`` with the values ``gguf.GGUFReader`` reads from ``path`` (llama.cpp's layout undone)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    cfg = model.config
    names = {_gguf_name(k, arch): k for k in model.state_dict()}
    state = dict(model.state_dict())
    for tensor in GGUFReader(str(path)).tensors:
        if tensor.name in ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"):
            continue
        values = dequantize(tensor.data, tensor.tensor_type).reshape([int(d) for d in reversed(tensor.shape)])
        values = values.astype(np.float32)
        if arch == "llama" and tensor.name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = cfg.num_attention_heads if "attn_q" in tensor.name else cfg.num_key_value_heads
            values = values.reshape(heads, values.shape[0] // heads // 2, 2, -1).swapaxes(1, 2).reshape(values.shape)
        if arch == "gemma3" and tensor.name.endswith("norm.weight"):
            values = values - 1
        state[names[tensor.name]] = torch.from_numpy(values.copy())
    if getattr(cfg, "tie_word_embeddings", False):
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    return model.eval()


def _compare(tmp_path, model, arch, metadata, quantized, expect_family, length=24):
    path = write_gguf(tmp_path / f"{arch}.gguf", model, arch, metadata, quantized)
    out = tmp_path / "imported"
    result = runner.invoke(app, ["import", f"gguf:{path}", "--out", str(out), "--context", "64"])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}: {expect_family}," in " ".join(result.stdout.split())
    reference = reference_from_gguf(path, model, arch)
    from edgekit.formats.artifacts import load_manifest
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(out)
    assert manifest.model["config"]["family"] == expect_family
    ours = load_model_from_artifact(folder, manifest)
    tokens = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = reference(tokens).logits
        whole = ours(tokens)
        ours.reset_cache()
        cached = torch.cat([ours.step(tokens[:, :length - 4], torch.arange(length - 4))] +
                           [ours.step(tokens[:, i:i + 1], torch.tensor([i])) for i in range(length - 4, length)], 1)
    scale = float(expected.abs().max())
    assert float((whole - expected).abs().max()) < 1e-4 * scale
    assert float((cached - expected).abs().max()) < 1e-4 * scale
    assert torch.equal(whole.argmax(-1), expected.argmax(-1))
    return manifest


def _common(writer, cfg, theta: float, head_dim=None):
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(theta)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(VOCAB)
    if head_dim:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)


def test_qwen2_with_biases(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=HIDDEN, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rope_theta=1e6,
                      rms_norm_eps=1e-6, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # transformers starts biases at zero: make them matter
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    manifest = _compare(tmp_path, model, "qwen2", lambda w: _common(w, cfg, 1e6), {"ffn_gate.weight": "Q4_K",
                                                                            "ffn_up.weight": "Q5_K"}, "qwen2")
    source = manifest.model["source"]
    assert source["quant_types"] == {"F32": 22, "Q4_K": 2, "Q5_K": 2}
    assert source["int4_codes"] == "Q4_K codes kept exactly (each 32 values m + d*q, q in 0..15); Q5_K in int8 per " \
                                   "output channel (the file gives them more than 4 bits)"


def test_qwen3_with_query_key_norms_and_its_own_head_size(tmp_path):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=HIDDEN, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=128, max_position_embeddings=128,
                      rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    _compare(tmp_path, model, "qwen3", lambda w: _common(w, cfg, 1e6, head_dim=128),
             {"attn_q.weight": "Q4_K", "ffn_down.weight": "Q6_K", "output.weight": "Q6_K"}, "qwen3")


def test_llama3_rope_scaling(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(2)
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=HIDDEN, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, rope_parameters=rope)
    model = LlamaForCausalLM(cfg)
    factors = _llama3_factors(cfg)
    assert 1.0 in factors and 32.0 in factors and len(set(factors.tolist())) > 2  # all three regimes
    _compare(tmp_path, model, "llama", lambda w: (_common(w, cfg, 500000.0), w.add_rope_dimension_count(64)),
             {"ffn_up.weight": "Q4_K"}, "llama", length=40)


def test_gemma3_sliding_window_and_global_layers(tmp_path):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(3)
    cfg = Gemma3TextConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=HIDDEN, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=1, head_dim=64, max_position_embeddings=128,
                           sliding_window=6, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                           query_pre_attn_scalar=64, rms_norm_eps=1e-6,
                           rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "default", "rope_theta": 1e6}})
    model = Gemma3ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(-0.5, 0.5)  # Gemma's norms scale by 1 + w

    def metadata(w):
        _common(w, cfg, 1e6, head_dim=64)
        w.add_sliding_window(6)
        w.add_sliding_window_pattern([True, False, True])

    _compare(tmp_path, model, "gemma3", metadata, {"ffn_down.weight": "Q4_K", "attn_v.weight": "Q6_K"}, "gemma3",
             length=20)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "gemma3"])
def test_generation_computes_only_the_last_positions_logits(family):
    """``step(..., last_only=True)`` is the last row of the full step, for a prefill and a decode
    step, and the cached model's ``feed`` (what generation calls) returns it."""
    from pathlib import Path

    from edgekit.llm.cached import torch_cached
    from edgekit.models import build_model

    extra = {"sliding_window": 3, "sliding_pattern": 2} if family == "gemma3" else {}
    model = build_model("llama", {"family": family, "vocab_size": 97, "max_len": 32, **extra}).eval()
    tokens = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        full = model.step(tokens[:, :8], torch.arange(8))
        full_next = model.step(tokens[:, 8:], torch.tensor([8]))
        model.reset_cache()
        last = model.step(tokens[:, :8], torch.arange(8), last_only=True)
        last_next = model.step(tokens[:, 8:], torch.tensor([8]), last_only=True)
    assert last.shape == (1, 1, 97)
    torch.testing.assert_close(last, full[:, -1:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last_next, full_next, rtol=1e-5, atol=1e-5)
    cached = torch_cached(model, Path("model"))
    cached.reset()
    every = cached.feed_all(tokens[0, :8].tolist(), 0)
    cached.reset()
    torch.testing.assert_close(cached.feed(tokens[0, :8].tolist(), 0), every[-1], rtol=1e-5, atol=1e-5)
