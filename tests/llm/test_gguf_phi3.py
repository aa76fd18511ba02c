"""GGUF architecture ``phi3`` (issue 34) against transformers' Phi3ForCausalLM.

A tiny random Phi-3 is written as a GGUF the way llama.cpp's converter (``Phi3MiniModel``) lays it
out: the fused ``attn_qkv`` and ``ffn_up`` (gate rows, then up rows) as they are, no q/k
permutation, ``phi3.attention.sliding_window`` always present (0: none), and for the 128k
variants the LongRoPE factor tensors with ``rope.scaling.attn_factor``. ``edgekit import`` reads
it; logits (whole sequence and prefill + cached decode) are compared with transformers' on the
values ``gguf.GGUFReader`` reads (``test_gguf_archs._compare``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_gguf_archs import HIDDEN, VOCAB, WIDTH, _common, _compare, runner, write_gguf

from edgekit.cli.app import app

HEAD_DIM = 64


def _phi3(seed: int, sliding_window=None, rope=None, original_context=128):
    from transformers import Phi3Config, Phi3ForCausalLM

    torch.manual_seed(seed)
    cfg = Phi3Config(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=HIDDEN, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                     original_max_position_embeddings=original_context, rms_norm_eps=1e-5,
                     tie_word_embeddings=False, sliding_window=sliding_window, bos_token_id=298, eos_token_id=299,
                     pad_token_id=None,
                     rope_parameters=rope or {"rope_type": "default", "rope_theta": 10000.0})
    cfg._attn_implementation = "eager"
    model = Phi3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)  # transformers starts norms at one: make them matter
    return model


def _metadata(cfg, window: int, longrope: dict | None = None):
    def write(w):
        _common(w, cfg, cfg.rope_parameters["rope_theta"])
        w.add_rope_dimension_count(HEAD_DIM)
        w.add_rope_scaling_orig_ctx_len(cfg.original_max_position_embeddings)
        w.add_sliding_window(window)  # the converter writes 0 when the config has none
        if longrope:  # what the converter adds for a model with long_factor (its attention factor formula)
            scale = cfg.max_position_embeddings / cfg.original_max_position_embeddings
            w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(
                cfg.original_max_position_embeddings)))
            w.add_tensor("rope_factors_long.weight", np.array(longrope["long_factor"], dtype=np.float32))
            w.add_tensor("rope_factors_short.weight", np.array(longrope["short_factor"], dtype=np.float32))
    return write


def test_phi3_fused_projections_and_sliding_window(tmp_path):
    """Window 6 over 24 tokens: every query past the sixth loses keys, in the whole-sequence and the
    cached path; attn_qkv as Q4_K blocks (the int4 grid), ffn_up as Q5_K."""
    model = _phi3(4, sliding_window=6)
    manifest = _compare(tmp_path, model, "phi3", _metadata(model.config, 6),
                        {"attn_qkv.weight": "Q4_K", "ffn_up.weight": "Q5_K"}, "phi3")
    config = manifest.model["config"]
    assert config["sliding_window"] == 6 and config["tie_embeddings"] is False
    assert manifest.model["source"]["quant_types"] == {"F32": 11, "Q4_K": 2, "Q5_K": 2}
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.grid_int4 import grid_codes
    from edgekit.sources.checkpoint import load_model_from_artifact

    ours = load_model_from_artifact(*load_manifest(tmp_path / "imported"))
    for layer in ours.layers:  # split by whole rows: each part still holds the Q4_K blocks an int4 program keeps
        attention = layer.attention
        assert all(grid_codes(linear.weight) is not None for linear in (attention.wq, attention.wk, attention.wv))
        assert grid_codes(layer.feed_forward.w2.weight) is None  # F32


def test_phi3_without_a_window_is_the_plain_model(tmp_path):
    """Phi-4 writes sliding_window 0; transformers' model then has none."""
    model = _phi3(5)
    manifest = _compare(tmp_path, model, "phi3", _metadata(model.config, 0), {"ffn_down.weight": "Q6_K"}, "phi3",
                        length=40)
    assert manifest.model["config"]["sliding_window"] == 0


def _longrope(seed: int, original_context: int):
    rng = np.random.default_rng(seed)
    pairs = HEAD_DIM // 2
    return {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": original_context,
            "short_factor": (1 + rng.random(pairs)).round(3).tolist(),
            "long_factor": (1 + 40 * rng.random(pairs)).round(3).tolist()}


def test_phi3_longrope_short_factors_within_the_original_context(tmp_path):
    """Context 64 (the import's --context) within the original 64: the short factors, as
    transformers uses for a sequence that short; the attention factor on both."""
    rope = _longrope(0, 64)
    model = _phi3(6, rope=rope, original_context=64)
    manifest = _compare(tmp_path, model, "phi3", _metadata(model.config, 0, rope), {}, "phi3")
    config = manifest.model["config"]
    assert config["rope_original_context"] == 64
    assert config["rope_attn_factor"] == pytest.approx(math.sqrt(1 + math.log(128 / 64) / math.log(64)), rel=1e-6)
    np.testing.assert_allclose(config["rope_short_factors"], rope["short_factor"], rtol=1e-6)


def test_phi3_longrope_long_factors_past_the_original_context(tmp_path):
    """Context 64 past the original 16: the long factors (llama.cpp's rule, chosen once for the
    cache); transformers uses them for a 40-token sequence (longer than 16)."""
    rope = _longrope(1, 16)
    model = _phi3(7, rope=rope, original_context=16)
    _compare(tmp_path, model, "phi3", _metadata(model.config, 0, rope), {}, "phi3", length=40)


def test_a_window_longer_than_the_context_keeps_the_fused_kernels():
    """A window that hides no key (Phi-3 mini's 2047 in a 1,024 cache) masks nothing: same logits as
    no window, and the .pte export may use the fused attention kernels; a shorter one may not."""
    from edgekit.models import build_model

    tokens = torch.randint(0, 97, (1, 20), generator=torch.Generator().manual_seed(0))
    base = {"family": "phi3", "vocab_size": 97, "max_len": 32, "tie_embeddings": False}
    torch.manual_seed(0)
    plain = build_model("llama", {**base, "sliding_window": 0}).eval()
    wide = build_model("llama", {**base, "sliding_window": 32}).eval()
    narrow = build_model("llama", {**base, "sliding_window": 8}).eval()
    wide.load_state_dict(plain.state_dict())
    narrow.load_state_dict(plain.state_dict())
    with torch.inference_mode():
        torch.testing.assert_close(wide(tokens), plain(tokens), rtol=0, atol=0)
        assert not torch.allclose(narrow(tokens)[:, 8:], plain(tokens)[:, 8:])
        torch.testing.assert_close(narrow(tokens)[:, :8], plain(tokens)[:, :8], rtol=0, atol=0)
    wide.use_fused_kernels(True)
    narrow.use_fused_kernels(True)
    assert wide.fused_kernels and not narrow.fused_kernels


def test_partial_rotary_phi3_is_refused_in_one_line(tmp_path):
    """Phi-4-mini rotates 3/4 of each head (rope.dimension_count < head size): refused in the one
    line that lists every blocker."""
    model = _phi3(8)
    path = tmp_path / "partial.gguf"
    write_gguf(path, model, "phi3", lambda w: (_common(w, model.config, 10000.0), w.add_rope_dimension_count(48),
                                               w.add_sliding_window(0)), {})
    result = runner.invoke(app, ["import", f"gguf:{path}", "--out", str(tmp_path / "out"), "--context", "64"])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert lines[0].endswith("cannot be imported: rotary positions over 48 of each head's 64 dimensions (edgekit's "
                             "decoders rotate whole heads)"), result.output
    assert not (tmp_path / "out").exists()
