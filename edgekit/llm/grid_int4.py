"""int4 linears that keep a GGUF's own 4-bit blocks exactly (Q4_0, Q4_1 and Q4_K's sub-blocks: 32
values ``m + d*q``, q in 0..15).

A Q4_1 model dequantized to float is still on its grid, but torchao's int4 (symmetric, or with an
integer zero point) cannot hold ``m``: re-quantizing it from the floats cost SmolLM2-135M 63 % of
perplexity. Rewritten as ``d*(q - 8) + c`` with ``c = m + 8d`` per block, the first term is a
symmetric int4 weight with the file's own codes and scales (torchao's 8da4w, XNNPACK's qb4w kernels;
no error at all), the second a small linear over each block's input sum, ``(out, in/32)``, int8
(8da8w). Measured on SmolLM2-135M (4095 held-out tokens, eager): perplexity +2.6 % over float,
against +63 % for plain 8da4w. Linears whose weights are not on such a grid are left to the caller.
"""

from __future__ import annotations

BLOCK = 32
MARK = "_edgekit_quantized"  # set on the linears inside, so a later quantize_ pass skips them


def grid_codes(weight, block: int = BLOCK):
    """(scales (out, in/block), codes (out, in) int8 in -8..7, offsets (out, in/block)) when every
    block of ``weight`` is exactly ``m + d*q`` with q in 0..15; else None.

    ``d`` is the block's range / 15 when its codes reach 0 and 15 (Q4_0, Q4_1), else the smallest
    gap between its values (Q4_K's sub-blocks, whose fitted scales often leave codes unused)."""
    import torch

    out_f, in_f = weight.shape
    if in_f % block:
        return None
    w = weight.detach().float().reshape(out_f, in_f // block, block)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    ordered = w.sort(-1).values
    gaps = ordered[..., 1:] - ordered[..., :-1]
    gaps = torch.where(gaps > (hi - lo) * 1e-3, gaps, torch.full_like(gaps, float("inf")))
    best = None
    for step in ((hi - lo) / 15, gaps.amin(-1, keepdim=True)):
        step = torch.where((step > 0) & torch.isfinite(step), step, torch.ones_like(step))
        q = torch.round((w - lo) / step)
        # float32 rounding of the dequantized values only: a weight off the grid misses by up to d/2
        fits = (((lo + step * q - w).abs() / step).amax(-1, keepdim=True) <= 1e-3) & (q.amax(-1, keepdim=True) <= 15)
        best = (step, q, fits) if best is None else (torch.where(best[2], best[0], step),
                                                     torch.where(best[2], best[1], q), best[2] | fits)
    step, q, fits = best
    if not bool(fits.all()):
        return None
    return step.reshape(out_f, -1), (q - 8).to(torch.int8).reshape(out_f, in_f), (lo + 8 * step).reshape(out_f, -1)


def grid_linear(linear, codes):
    """The exact replacement of ``linear`` (an ``nn.Linear``; its bias, if any, kept in float) from ``grid_codes``."""
    import torch
    from torch import nn
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import _int8_dynamic_activation_intx_weight_transform

    scales, q, offsets = codes
    out_f, in_f = q.shape

    class GridInt4Linear(nn.Module):
        def __init__(self):
            super().__init__()
            self.groups = in_f // BLOCK
            self.main = nn.Linear(in_f, out_f, bias=False)
            self.main.weight = nn.Parameter(linear.weight.detach().float(), requires_grad=False)
            # torchao's transform with the file's scales and a zero point of 0, then its codes set to q - 8
            _int8_dynamic_activation_intx_weight_transform(
                self.main, Int8DynamicActivationIntxWeightConfig(
                    weight_dtype=torch.int4, weight_granularity=PerGroup(BLOCK), intx_choose_qparams_algorithm=None),
                custom_scale=scales, custom_zero_point=torch.zeros_like(scales, dtype=torch.int8))
            self.main.weight.qdata.copy_(q)
            self.offset = nn.Linear(self.groups, out_f, bias=False)
            self.offset.weight = nn.Parameter(offsets.contiguous(), requires_grad=False)
            quantize_(self.offset, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8,
                                                                         weight_granularity=PerAxis(0)),
                      filter_fn=lambda module, fqn: isinstance(module, nn.Linear))
            setattr(self.main, MARK, True)
            setattr(self.offset, MARK, True)
            self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().float(), requires_grad=False)

        @property
        def weight(self):  # code that asks a linear for its device or dtype
            return self.main.weight

        def forward(self, x):
            out = self.main(x) + self.offset(x.unflatten(-1, (self.groups, BLOCK)).sum(-1))
            return out if self.bias is None else out + self.bias

    return GridInt4Linear()


def replace_grid_linears(model, skip=("output",)) -> int:
    """Replace every ``nn.Linear`` of ``model`` (but ``skip``) whose weights are on a 4-bit grid (a
    bias, as Qwen2's query/key/value projections have, stays float); how many were."""
    from torch import nn

    replaced = 0
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            fqn = f"{parent_name}.{name}" if parent_name else name
            if not isinstance(child, nn.Linear) or fqn in skip:
                continue
            codes = grid_codes(child.weight)
            if codes is not None:
                setattr(parent, name, grid_linear(child, codes))
                replaced += 1
    return replaced
