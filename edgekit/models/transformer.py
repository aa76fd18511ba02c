"""A small pre-norm Transformer over token ids, for next-token LM or sequence classification.

Built from ``TransformerBlock``s whose attention module is chosen by name (``full``, ``local``,
``linear``; see ``edgekit.models.attention``). The forward pass has no data-dependent Python
control flow, so it traces and exports with dynamic batch and sequence axes. Gradient
checkpointing of the blocks is a training-time switch (``set_grad_checkpointing``), not config.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from edgekit.core.input_spec import InputSpec
from edgekit.models.attention import build_attention
from edgekit.models.checks import expect_tokens
from edgekit.models.registry import ModelSpec, register_model


class TransformerBlock(nn.Module):
    """x + attn(ln(x)), then x + mlp(ln(x)). ``attention`` is any (N, T, D) -> (N, T, D) module."""

    def __init__(self, d_model: int, attention: nn.Module, mlp_ratio: int = 4, dropout: float = 0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = attention
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model),
            nn.GELU(),
            nn.Linear(mlp_ratio * d_model, d_model),
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class TextTransformer(nn.Module):
    """(N, T) int64 token ids -> (N, T, vocab) next-token logits, or (N, classes) when
    ``num_classes`` > 0 (bidirectional attention, mean-pooled)."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 128,
        n_heads: int = 4,
        n_layers: int = 2,
        max_len: int = 128,
        attention: str = "full",
        window: int = 32,
        dropout: float = 0.1,
        num_classes: int = 0,
        attn_dropout: float = 0.0,
    ):
        super().__init__()
        self.name = "transformer-classifier" if num_classes else "transformer-lm"
        self.vocab_size = vocab_size
        self.max_len = max_len
        causal = num_classes == 0
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.zeros(max_len, d_model))
        nn.init.normal_(self.pos, std=0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                d_model, build_attention(attention, d_model, n_heads, causal, attn_dropout, window), dropout=dropout
            )
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes or vocab_size)
        self.classify = bool(num_classes)
        self.grad_checkpointing = False

    def set_grad_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each block's activations in backward instead of storing them."""
        self.grad_checkpointing = enabled

    def fsdp_units(self) -> list[nn.Module]:
        """Submodules to shard one by one under FSDP (then the whole model)."""
        return list(self.blocks)

    def forward(self, tokens):
        expect_tokens(self.name, tokens, self.vocab_size, self.max_len)
        x = self.embed(tokens) + self.pos[: tokens.size(1)]
        x = self.drop(x)
        for block in self.blocks:
            if self.grad_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        x = self.norm(x)
        if self.classify:
            x = x.mean(dim=1)
        return self.head(x)


def _token_input(cfg) -> tuple[InputSpec, ...]:
    return (InputSpec("tokens", (None, None), "int64", {0: "batch", 1: "sequence"}),)


_COMMON = {
    "d_model": 128,
    "n_heads": 4,
    "n_layers": 2,
    "max_len": 128,
    "attention": "full",  # full | local | linear (edgekit.models.attention)
    "window": 32,  # local attention: how many positions each token sees
    "dropout": 0.1,
    "attn_dropout": 0.0,
}

register_model(
    ModelSpec(
        name="transformer-lm",
        factory=TextTransformer,
        default_config={"vocab_size": 128, **_COMMON},
        input_spec=_token_input,
        outputs=("logits",),
        task={"type": "language-modeling", "dataset": "pydoc-text", "metric": "next_token_accuracy"},
        description="causal Transformer LM over characters; attention full | local | linear",
        onnx_exporter_why="torch.export's graph ran 1.09-1.10x slower in fp32 and 1.04-1.05x in int8 (batch 1, one thread)",
    )
)

register_model(
    ModelSpec(
        name="transformer-classifier",
        factory=TextTransformer,
        default_config={"vocab_size": 128, "num_classes": 6, **_COMMON, "max_len": 64},
        input_spec=_token_input,
        outputs=("logits",),
        task={"type": "classification", "dataset": "pydoc-topics", "metric": "accuracy"},
        description="bidirectional Transformer text classifier (which doc topic a snippet is from)",
        onnx_exporter_why="torch.export's graph ran 1.12x slower in fp32 and 1.07-1.10x in int8 (batch 1, one thread)",
    )
)
