"""A Llama-family decoder (RMSNorm, rotary positions, grouped-query attention, SwiGLU) with a
static KV cache, for pretrained language models imported from GGUF files (``edgekit.sources.gguf``).

Two ways to run it:

- ``model(tokens)``: (N, T) ids -> (N, T, vocab) logits, every position recomputed, no cache;
  what training, evaluation and perplexity use, and what every other zoo language model does.
- ``model.step(tokens, input_pos)``: (1, T) ids at positions ``input_pos`` (T,) -> (1, T, vocab)
  logits, reading and writing the KV cache. Each layer's cache is two buffers of fixed size (1,
  max_len, kv_heads, head_dim) and the position is a tensor, so the same call is a prefill (T =
  the prompt) or a decode step (T = 1) and ``torch.export`` captures it once with a dynamic T and
  the buffers as mutable state (what an ExecuTorch program with a KV cache needs).

Rotary embedding rotates adjacent pairs (x[2i], x[2i+1]), the layout GGUF files store a Llama's
query and key weights in (llama.cpp's converter permutes Hugging Face's half-split layout into it),
so GGUF weights load as they are. Llama 3.x's rope scaling is ``rope_freq_factors`` (the GGUF's
``rope_freqs`` tensor: each pair's frequency divided by its factor).

The other families (``edgekit.llm.models.qwen``, ``edgekit.llm.models.gemma``) are subclasses that change
parts: the class attributes ``attention_bias``, ``qk_norm`` and ``rotary``, the block, the
embedding, and which layers see which positions (``layer_kinds``, ``attention_views``).
``config["family"]`` picks the class (``edgekit.llm.models.families``, where the zoo entry ``llama``
is registered for all of them).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from edgekit.models.checks import expect_tokens


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary_tables(max_len: int, head_dim: int, theta: float, factors=(), scale: float = 1.0):
    """cos and sin of every (position, pair), (max_len, head_dim // 2), in float32; each pair's
    frequency divided by its ``factors`` entry (Llama 3's rope scaling) and positions by ``scale``
    (linear rope scaling)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if len(factors):
        inv_freq = inv_freq / torch.tensor(factors, dtype=torch.float64)
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64) / scale, inv_freq)
    return angles.cos().float(), angles.sin().float()


class RotaryLayout:
    """Which two features of a head turn together as a rotary pair: ``PAIRS``, (x[2i], x[2i+1]), or
    ``HALVES``, (x[i], x[i + D/2]) (GPT-NeoX's layout, which Qwen, Gemma and Phi-3 GGUFs keep).

    A head is rotated as ``x * cos + swapped(x) * sin`` (``rotate``), with the tables widened to
    the head (each pair's angle at both its features) and ``swapped`` a fixed (D, D) linear that
    puts each feature in its partner's place, one of the two negated: exact (one nonzero per row),
    and, in a lowered program, products XNNPACK runs where taking the pairs apart was ExecuTorch's
    portable copies, one call per 4-byte feature (on the Pi 5's core, 4 % of a prompt token's
    instructions and 1 % of a decoded token's)."""

    def __init__(self, widen, partners):
        self._widen, self._partners = widen, partners

    def widen(self, table):
        """(positions, D/2) -> (positions, D): each pair's value at both its features."""
        return self._widen(table).contiguous()

    def swap(self, head_dim: int):
        """(D, D): ``F.linear(x, swap)`` is x with each pair's features exchanged, the first negated."""
        first, second = self._partners(head_dim)
        matrix = torch.zeros(head_dim, head_dim)
        matrix[first, second] = -1.0
        matrix[second, first] = 1.0
        return matrix


PAIRS = RotaryLayout(lambda table: table.repeat_interleave(2, dim=-1),
                     lambda d: (torch.arange(0, d, 2), torch.arange(1, d, 2)))
HALVES = RotaryLayout(lambda table: torch.cat((table, table), dim=-1),
                      lambda d: (torch.arange(d // 2), torch.arange(d // 2, d)))


def rotate(x, cos, sin, swap):
    """x (N, T, H, D) rotated by the (T, D) widened angles (``RotaryLayout``)."""
    x32 = x.float()
    return (x32 * cos.unsqueeze(1) + F.linear(x32, swap.to(x32.dtype)) * sin.unsqueeze(1)).to(x.dtype)


def hidden_scores(seen, dtype, groups: int):
    """A (T, S) boolean mask of the keys each query sees as what to add to the scores of
    ``Attention._attend``'s (T * groups, S) rows: 0 or -inf (made once per call, for every layer)."""
    t, s = seen.shape
    hidden = torch.zeros(seen.shape, dtype=dtype, device=seen.device).masked_fill(~seen, float("-inf"))
    return hidden.unsqueeze(1).expand(t, groups, s).reshape(t * groups, s)


class JoinedLinear(nn.Module):
    """Linears that read one input, as one product whose output is split back into theirs
    (``join_shared_inputs``): a lowered program then quantizes and packs that input once, in one
    kernel call, where it did so per linear. Each output row keeps its own weights (and, quantized,
    its own scales), so the result is the parts' exactly."""

    def __init__(self, parts):
        super().__init__()
        self.sizes = [part.out_features for part in parts]
        self.linear = nn.Linear(parts[0].in_features, sum(self.sizes), bias=parts[0].bias is not None,
                                device=parts[0].weight.device, dtype=parts[0].weight.dtype)
        with torch.no_grad():
            self.linear.weight.copy_(torch.cat([part.weight for part in parts]))
            if self.linear.bias is not None:
                self.linear.bias.copy_(torch.cat([part.bias for part in parts]))

    def forward(self, x):
        return self.linear(x).split(self.sizes, dim=-1)


def join_shared_inputs(model, joinable=lambda parts: True) -> int:
    """Replace each layer's query, key and value projections, and its gate and up projections, by
    one ``JoinedLinear`` each, where ``joinable(parts)``; how many were joined."""
    joined = 0
    for layer in model.layers:
        for owner, names, name in ((layer.attention, ("wq", "wk", "wv"), "wqkv"),
                                   (layer.feed_forward, ("w1", "w3"), "w13")):
            parts = [getattr(owner, part, None) for part in names]
            if not all(isinstance(part, nn.Linear) for part in parts) or \
                    len({(part.in_features, part.bias is None) for part in parts}) != 1 or not joinable(parts):
                continue
            for part in names:
                delattr(owner, part)
            setattr(owner, name, JoinedLinear(parts))
            joined += 1
    return joined


class Attention(nn.Module):
    """Grouped-query attention; ``cached`` keeps this layer's keys and values in its own cache
    buffers: (kv_heads, max_len, head_dim), where a head's keys so far are one contiguous block
    (plain torch ops: the batched matrix products read it where it lies), or with ``fused``
    (1, max_len, kv_heads, head_dim), the layout ExecuTorch's LLM kernels take."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, head_dim: int, max_len: int, bias: bool = False,
                 qk_norm_eps: float | None = None, rotary: RotaryLayout = PAIRS):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim, self.max_len = n_heads, n_kv_heads, head_dim, max_len
        self.wq = nn.Linear(dim, n_heads * head_dim, bias=bias)
        self.wk = nn.Linear(dim, n_kv_heads * head_dim, bias=bias)
        self.wv = nn.Linear(dim, n_kv_heads * head_dim, bias=bias)
        self.wo = nn.Linear(n_heads * head_dim, dim, bias=False)
        # Qwen3 and Gemma 3 normalize each head's query and key before rotating them
        self.q_norm = RMSNorm(head_dim, qk_norm_eps) if qk_norm_eps else None
        self.k_norm = RMSNorm(head_dim, qk_norm_eps) if qk_norm_eps else None
        self.register_buffer("rotary_swap", rotary.swap(head_dim), persistent=False)
        self.make_cache(fused=False)

    def make_cache(self, fused: bool) -> None:
        """Fresh (zero) cache buffers in the layout of the fused kernels or of plain torch ops."""
        # one spare cell on the plain path: the positions attended to (a prefix of the cache whose
        # length is an input's size under export) are then never the whole cache, a case torch.export
        # would otherwise have to tell apart (narrow returns the cache itself)
        shape = (1, self.max_len, self.n_kv_heads, self.head_dim) if fused else \
            (self.n_kv_heads, self.max_len + 1, self.head_dim)
        device = self.wo.weight.device
        self.register_buffer("k_cache", torch.zeros(shape, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, device=device), persistent=False)

    def _project(self, x, cos, sin):
        """q, k, v as (N, T, heads, head_dim), q and k rotated."""
        n, t, _ = x.shape
        joined = getattr(self, "wqkv", None)
        q, k, v = joined(x) if joined is not None else (self.wq(x), self.wk(x), self.wv(x))
        q = q.view(n, t, self.n_heads, self.head_dim)
        k = k.view(n, t, self.n_kv_heads, self.head_dim)
        v = v.view(n, t, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return rotate(q, cos, sin, self.rotary_swap), rotate(k, cos, sin, self.rotary_swap), v

    def _attend(self, q, k, v, hidden):
        """(N, T, H, D) queries over (N * KV, S, D) keys and values; ``hidden`` (T * groups, S,
        from ``hidden_scores``) is added to the scores (0 where seen, -inf where not)."""
        # Each key head's group of query heads goes in one batched product as rows (T * groups) of
        # its batch: neither the keys nor the values (the cache, on the cached path) are copied,
        # expanded per head or transposed; a lowered program's decode step spent most of its time
        # doing that (SmolLM2: 30 % in expand_copy alone). Keys times queries, not queries times
        # keys, so the only transpose is of the small (T * groups, S) scores.
        groups = self.n_heads // self.n_kv_heads
        n, t = q.shape[:2]
        kv, d = self.n_kv_heads, self.head_dim
        rows = q.view(n, t, kv, groups, d).permute(0, 2, 1, 3, 4).reshape(n * kv, t * groups, d)
        scores = torch.bmm(k, rows.transpose(1, 2)).transpose(1, 2) * (1.0 / math.sqrt(d))
        out = torch.bmm(torch.softmax(scores + hidden, dim=-1), v)  # (N * KV, T * groups, D)
        return out.view(n, kv, t, groups, d).permute(0, 2, 1, 3, 4).reshape(n, t, self.n_heads * d)

    def forward(self, x, cos, sin, hidden):
        q, k, v = self._project(x, cos, sin)
        n, t = x.shape[:2]
        keys, values = (part.transpose(1, 2).reshape(n * self.n_kv_heads, t, self.head_dim) for part in (k, v))
        return self.wo(self._attend(q, keys, values, hidden))

    def cached(self, x, cos, sin, input_pos, hidden, start):
        """Write this call's keys and values at ``input_pos`` of the cache and attend to it.

        ``start`` (an int, or a SymInt under export) selects ExecuTorch's fused cache update and
        causal attention kernels (``llama::update_cache``, ``llama::custom_sdpa``); None, plain
        torch ops with ``hidden`` (``hidden_scores`` of the cache's first cells, those attended to)."""
        q, k, v = self._project(x, cos, sin)
        n, t = x.shape[:2]
        if start is None:
            self.k_cache.index_copy_(1, input_pos, k[0].transpose(0, 1).to(self.k_cache.dtype))
            self.v_cache.index_copy_(1, input_pos, v[0].transpose(0, 1).to(self.v_cache.dtype))
            seen = hidden.shape[-1]  # the cells attended to, a prefix of the cache (all of it without key_pos)
            out = self._attend(q, self.k_cache.narrow(1, 0, seen), self.v_cache.narrow(1, 0, seen), hidden)
        else:
            torch.ops.llama.update_cache(k, self.k_cache, start)
            torch.ops.llama.update_cache(v, self.v_cache, start)
            out = torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, start, None, 0, True)
            out = out.reshape(n, t, self.n_heads * self.head_dim)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)  # gate
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)  # up
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)  # down

    def forward(self, x):
        joined = getattr(self, "w13", None)
        gate, up = joined(x) if joined is not None else (self.w1(x), self.w3(x))
        return self.w2(self.activate(gate) * up)

    def activate(self, gate):
        return F.silu(gate)


class Block(nn.Module):
    def __init__(self, dim, hidden_dim, norm_eps, attention: Attention):
        super().__init__()
        self.attention_norm = RMSNorm(dim, norm_eps)
        self.attention = attention
        self.ffn_norm = RMSNorm(dim, norm_eps)
        self.feed_forward = FeedForward(dim, hidden_dim)

    def forward(self, x, cos, sin, hidden):
        x = x + self.attention(self.attention_norm(x), cos, sin, hidden)
        return x + self.feed_forward(self.ffn_norm(x))

    def cached(self, x, cos, sin, input_pos, hidden, start):
        x = x + self.attention.cached(self.attention_norm(x), cos, sin, input_pos, hidden, start)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """(N, T) int64 token ids -> (N, T, vocab) next-token logits; ``step`` for the cached path."""

    name = "llama"
    attention_bias = False  # biases on the query, key and value projections (Qwen2)
    qk_norm = False  # an RMSNorm over each head's query and key (Qwen3, Gemma 3)
    rotary = PAIRS

    def __init__(self, vocab_size: int = 256, dim: int = 64, n_layers: int = 2, n_heads: int = 4,
                 n_kv_heads: int = 2, hidden_dim: int = 128, head_dim: int = 0, rope_theta: float = 10000.0,
                 norm_eps: float = 1e-5, max_len: int = 256, tie_embeddings: bool = True, rope_freq_factors=()):
        super().__init__()
        if n_heads % max(n_kv_heads, 1) or n_kv_heads < 1:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        head_dim = head_dim or dim // n_heads
        if head_dim % 2:
            raise ValueError(f"head_dim ({head_dim}) must be even for rotary positions")
        if len(rope_freq_factors) not in (0, head_dim // 2) or not all(
                isinstance(f, (int, float)) and math.isfinite(f) and f > 0 for f in rope_freq_factors):
            raise ValueError(f"rope_freq_factors must be {head_dim // 2} positive numbers (one per rotary pair)")
        self.vocab_size, self.max_len, self.n_layers = vocab_size, max_len, n_layers
        self.dim, self.head_dim, self.norm_eps = dim, head_dim, norm_eps
        self.query_groups = n_heads // n_kv_heads  # query heads per key head
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(
            self.make_block(dim, hidden_dim, norm_eps, Attention(
                dim, n_heads, n_kv_heads, head_dim, max_len, bias=self.attention_bias,
                qk_norm_eps=norm_eps if self.qk_norm else None, rotary=self.rotary))
            for _ in range(n_layers))
        self.layer_kinds = ["global"] * n_layers  # which positions and rotary table each layer uses
        self.norm = RMSNorm(dim, norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        if tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rotary_tables(max_len, head_dim, rope_theta, rope_freq_factors)
        self.register_buffer("rope_cos", self.rotary.widen(cos), persistent=False)
        self.register_buffer("rope_sin", self.rotary.widen(sin), persistent=False)
        self.fused_kernels = False  # set by the .pte export (edgekit.llm.program): ExecuTorch's LLM kernels

    def make_block(self, dim, hidden_dim, norm_eps, attention) -> nn.Module:
        return Block(dim, hidden_dim, norm_eps, attention)

    def embed(self, tokens):
        return self.tok_embeddings(tokens)

    def attention_views(self, query_pos, key_pos, dtype) -> dict:
        """Per layer kind: (cos, sin) of the queries' positions and what to add to the scores
        (``hidden_scores``: causal, keys at ``key_pos``); None when the fused kernels mask."""
        cos, sin = self.rope_cos[query_pos], self.rope_sin[query_pos]
        hidden = None
        if key_pos is not None:
            hidden = hidden_scores(key_pos.unsqueeze(0) <= query_pos.unsqueeze(1), dtype, self.query_groups)
        return {"global": (cos, sin, hidden)}

    def forward(self, tokens):
        expect_tokens(self.name, tokens, self.vocab_size, self.max_len)
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens)
        views = self.attention_views(positions, positions, x.dtype)
        for layer, kind in zip(self.layers, self.layer_kinds):
            x = layer(x, *views[kind])
        return self.output(self.norm(x))

    def step(self, tokens, input_pos, last_only: bool = False, key_pos=None):
        """(1, T) ids at the consecutive positions ``input_pos`` (T,) int64 -> (1, T, vocab) logits,
        through the cache; ``last_only``: (1, 1, vocab), the last position's (generation needs no
        other, and a prompt's logits are T x vocab floats: 134 MB for 128 tokens of Gemma 3's 262,144).
        ``key_pos`` (S,): the cache positions attended to, 0 .. S-1 with S at least the last fed
        position + 1 (None: the whole cache); a program's third input, so that its attention reads
        the cells filled so far, not all ``max_len`` of them.

        Keys past the last position are never read, so what a longer earlier conversation left in
        the cache there does not leak into this one.
        """
        start = keys = None
        if self.fused_kernels:
            start = input_pos[0].item()
            torch._check_is_size(start)
            torch._check(start + tokens.shape[1] <= self.max_len)
        else:
            keys = torch.arange(self.max_len, device=tokens.device) if key_pos is None else key_pos
        x = self.embed(tokens)
        views = self.attention_views(input_pos, keys, x.dtype)
        for layer, kind in zip(self.layers, self.layer_kinds):
            x = layer.cached(x, *views[kind][:2], input_pos, views[kind][2], start)
        if last_only:
            x = x[:, -1:]
        return self.output(self.norm(x))

    def reset_cache(self) -> None:
        for layer in self.layers:
            layer.attention.k_cache.zero_()
            layer.attention.v_cache.zero_()

    def use_fused_kernels(self, fused: bool) -> None:
        """Switch between ExecuTorch's fused LLM kernels (for export) and plain torch ops; the
        caches start empty in the layout the choice needs."""
        self.fused_kernels = fused
        for layer in self.layers:
            layer.attention.make_cache(fused)


class CachedStep(nn.Module):
    """``forward(tokens, input_pos, key_pos)`` = ``model.step(..., last_only=True)``: the module
    ``torch.export`` captures for a program that keeps its KV cache between calls. It returns the
    last position's logits (1, 1, vocab): a prompt's other rows are read by no one, and the LM head
    over them was a fifth of a 128-token prefill's multiply-adds and a 25 MB output for SmolLM2.
    ``key_pos`` sizes the attention by the positions filled (a dimension of an input, which the
    XNNPACK delegate takes, where one computed from ``input_pos``'s values it would not); with
    ExecuTorch's fused kernels (``model.fused_kernels``) there is none: they read ``input_pos``."""

    def __init__(self, model: Llama):
        super().__init__()
        self.model = model

    def forward(self, tokens, input_pos, key_pos=None):
        return self.model.step(tokens, input_pos, last_only=True, key_pos=key_pos)
