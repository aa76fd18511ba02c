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


def test_linears_sharing_an_input_are_joined_only_where_the_quantizer_treats_them_alike(monkeypatch):
    """Query/key/value and gate/up become one product each (one quantized input, one kernel call)
    when all their parts take the same route; the program's function does not change."""
    import copy

    from edgekit.llm import program
    from edgekit.llm.models.llama import Llama

    program.load_kernels()  # the int8 embedding's operator
    torch.manual_seed(0)
    model = Llama(vocab_size=64, dim=64, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=96).eval()
    attention, feed_forward = model.layers[0].attention, model.layers[0].feed_forward
    with torch.no_grad():
        for seed, linear in enumerate((attention.wq, attention.wk, feed_forward.w1, feed_forward.w3)):
            linear.weight.copy_(_q41_weight(linear.out_features, linear.in_features, seed)[0])
    # wv stays off the grid, as a Q6_K projection beside Q4_K ones in a Q4_K_M file
    separate = copy.deepcopy(model)
    tokens = torch.randint(0, 64, (1, 12))
    with torch.no_grad():
        want = model(tokens)
        recipe = program.quantize_module(model, "int4")
        monkeypatch.setattr(program, "_same_route", lambda precision, group_size: lambda parts: False)
        separate_recipe = program.quantize_module(separate, "int4")
        joined_logits, separate_logits = model(tokens), separate(tokens)
    assert hasattr(feed_forward, "w13") and not hasattr(feed_forward, "w1")
    assert not hasattr(attention, "wqkv") and hasattr(attention, "wv")
    assert recipe["joined_linears"].startswith("1 groups") and "joined_linears" not in separate_recipe
    # the codes kept: wq, wk and the joined gate/up; separately wq, wk, w1, w3
    assert (recipe["gguf_4bit_blocks_kept"], separate_recipe["gguf_4bit_blocks_kept"]) == (3, 4)
    # the linears off the grid (wv, wo, w2: the file gave them more bits) are int8, not int4
    assert "the 3 it stores in more bits in int8" in recipe["linears"]
    assert int(attention.wv.weight.qdata.abs().max()) > 8 >= int(feed_forward.w13.linear.main.weight.qdata.abs().max())
    torch.testing.assert_close(joined_logits, separate_logits, rtol=1e-5, atol=1e-5)
    assert float((joined_logits - want).abs().mean()) < 0.05 * float(want.abs().mean())


def test_joined_linears_compute_the_parts_of_every_family():
    from edgekit.llm.models.gemma import Gemma3
    from edgekit.llm.models.llama import Llama, join_shared_inputs
    from edgekit.llm.models.qwen import Qwen2

    torch.manual_seed(0)
    tokens = torch.randint(0, 64, (1, 10))
    for family in (Llama, Qwen2, Gemma3):  # Qwen2: the query/key/value biases join too; Gemma 3: GELU gate
        model = family(vocab_size=64, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96).eval()
        with torch.no_grad():
            want = model(tokens)
            assert join_shared_inputs(model) == 4
            torch.testing.assert_close(model(tokens), want, rtol=1e-5, atol=1e-6)
            model.reset_cache()
            stepped = model.step(tokens, torch.arange(10))
        torch.testing.assert_close(stepped, want, rtol=1e-4, atol=1e-5)


def test_a_grid_linear_keeps_its_bias():
    from edgekit.llm.grid_int4 import replace_grid_linears

    w, _, _ = _q41_weight()
    model = torch.nn.Sequential(torch.nn.Linear(96, 48))  # Qwen2's query/key/value projections have biases
    with torch.no_grad():
        model[0].weight.copy_(w)
        model[0].bias.copy_(torch.linspace(-3, 3, 48))
        x = torch.randn(4, 96, generator=torch.Generator().manual_seed(2))
        want = model(x)
        assert replace_grid_linears(model) == 1
        got = model(x)
    assert float((got - want).abs().max()) < 0.05 * float(want.abs().max())
    assert float((got - want).mean(0).abs().max()) < 0.05  # the bias itself is not lost or doubled


def test_a_model_with_no_4bit_blocks_is_int4_throughout():
    from edgekit.llm import program
    from edgekit.llm.models.llama import Llama

    program.load_kernels()
    torch.manual_seed(0)
    model = Llama(vocab_size=64, dim=64, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=96).eval()  # float weights
    with torch.no_grad():
        recipe = program.quantize_module(model, "int4")
    assert "gguf_4bit_blocks_kept" not in recipe and recipe["linears"].startswith("int4 weights in groups of 32")
    layer = model.layers[0]
    for linear in (layer.attention.wqkv.linear, layer.attention.wo, layer.feed_forward.w13.linear,
                   layer.feed_forward.w2):
        assert int(linear.weight.qdata.abs().max()) <= 8
