"""int4 linears that keep a GGUF's Q4_1 blocks exactly (edgekit.llm.grid_int4), against the float
weights they came from and against plain re-quantization (torchao 8da4w from the floats)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")


def _q41_weight(out_f=48, in_f=96, seed=0):
    """Weights exactly on a Q4_1 grid: per block of 32, m + d*q with q in 0..15 (d, m in float16); as
    llama.cpp's quantizer makes them, each block's minimum is q = 0 and its maximum q = 15."""
    g = torch.Generator().manual_seed(seed)
    blocks = in_f // 32
    d = (torch.rand(out_f, blocks, 1, generator=g) * 0.02 + 0.001).half().float()
    m = (-torch.rand(out_f, blocks, 1, generator=g) * 0.1).half().float()
    q = torch.randint(0, 16, (out_f, blocks, 32), generator=g).float()
    q[..., 0], q[..., 1] = 0, 15
    return (m + d * q).reshape(out_f, in_f), d, q


def test_grid_codes_recover_the_blocks_exactly():
    from edgekit.llm.grid_int4 import grid_codes

    w, d, q = _q41_weight()
    scales, codes, offsets = grid_codes(w)
    rebuilt = (scales.repeat_interleave(32, 1) * codes.float() + offsets.repeat_interleave(32, 1))
    assert torch.equal(codes.reshape(q.shape).float() + 8, q)
    assert float((rebuilt - w).abs().max()) <= 1e-6 * float(w.abs().max())


def test_weights_off_the_grid_are_left_alone():
    from edgekit.llm.grid_int4 import grid_codes

    w, _, _ = _q41_weight()
    assert grid_codes(w + torch.randn_like(w) * 1e-3) is None
    assert grid_codes(torch.randn(8, 40)) is None  # not whole blocks of 32


def test_the_grid_linear_is_the_float_linear_up_to_activation_rounding():
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    from edgekit.llm.grid_int4 import grid_codes, grid_linear

    w, _, _ = _q41_weight()
    x = torch.randn(5, 96, generator=torch.Generator().manual_seed(1))
    linear = torch.nn.Linear(96, 48, bias=False)
    linear.weight = torch.nn.Parameter(w.clone(), requires_grad=False)
    want = x @ w.T
    with torch.no_grad():
        grid = grid_linear(linear, grid_codes(w))(x)
        plain = torch.nn.Sequential(torch.nn.Linear(96, 48, bias=False))
        plain[0].weight = torch.nn.Parameter(w.clone(), requires_grad=False)
        quantize_(plain, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
        requantized = plain(x)
    grid_err, plain_err = float((grid - want).abs().mean()), float((requantized - want).abs().mean())
    assert grid_err < 0.25 * plain_err, (grid_err, plain_err)  # only the int8 activations' rounding is left
