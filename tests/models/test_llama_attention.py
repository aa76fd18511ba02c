"""The Llama module's grouped-query attention against a plain reference: every query head over its
own copy of its key head (``repeat_interleave``), scores masked with ``masked_fill``, in float64.

The module batches each key head's group of query heads as rows of one product over the cache
where it lies (no per-head copies: what made the lowered decode step slow); this holds it to the
textbook definition, uncached and cached, for grouped, multi-head and multi-query layouts."""

from __future__ import annotations

import math

import pytest
import torch

from edgekit.llm.models.llama import Llama, rotary_tables


def textbook_rotate_pairs(x, cos, sin):
    """x (N, T, H, D): each pair (x[2i], x[2i+1]) turned by its (T, D/2) angle."""
    even, odd = x[..., 0::2], x[..., 1::2]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def reference_logits(model: Llama, tokens: torch.Tensor) -> torch.Tensor:
    model = model.double()
    n, t = tokens.shape
    cos, sin = (table.double() for table in rotary_tables(t, model.head_dim, 10000.0))
    x = model.tok_embeddings(tokens)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for layer in model.layers:
        att = layer.attention
        h = layer.attention_norm(x)
        q = textbook_rotate_pairs(att.wq(h).view(n, t, att.n_heads, att.head_dim), cos, sin).transpose(1, 2)
        k = textbook_rotate_pairs(att.wk(h).view(n, t, att.n_kv_heads, att.head_dim), cos, sin).transpose(1, 2)
        v = att.wv(h).view(n, t, att.n_kv_heads, att.head_dim).transpose(1, 2)
        groups = att.n_heads // att.n_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(att.head_dim)
        weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        x = x + att.wo((weights @ v).transpose(1, 2).reshape(n, t, att.n_heads * att.head_dim))
        x = x + layer.feed_forward(layer.ffn_norm(x))
    return model.output(model.norm(x))


@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (6, 6), (6, 1)], ids=["grouped", "multi-head", "multi-query"])
def test_attention_equals_the_reference(heads, kv_heads):
    torch.manual_seed(0)
    model = Llama(vocab_size=97, dim=48, n_layers=2, n_heads=heads, n_kv_heads=kv_heads, hidden_dim=64,
                  max_len=32).eval()
    tokens = torch.randint(0, 97, (3, 13))
    with torch.no_grad():
        got = model(tokens)
        # the cached path: a prompt of 6, one token, then 6 more, into a cache longer than what was fed
        one = tokens[:1]
        cached = torch.cat([model.step(one[:, :6], torch.arange(6)), model.step(one[:, 6:7], torch.arange(6, 7)),
                            model.step(one[:, 7:], torch.arange(7, 13))], dim=1)
        want = reference_logits(model, tokens)
    assert torch.allclose(got.double(), want, atol=1e-4, rtol=1e-4)
    assert torch.allclose(cached.double(), want[:1], atol=1e-4, rtol=1e-4)


def test_cached_step_never_reads_what_an_earlier_longer_conversation_left():
    torch.manual_seed(1)
    model = Llama(vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48, max_len=24).eval()
    long, short = torch.randint(0, 50, (1, 20)), torch.randint(0, 50, (1, 5))
    with torch.no_grad():
        model.step(long, torch.arange(20))
        after_long = model.step(short, torch.arange(5))
        model.reset_cache()
        fresh = model.step(short, torch.arange(5))
    assert torch.equal(after_long, fresh)
