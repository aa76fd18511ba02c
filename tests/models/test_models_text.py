"""Text model families: pluggable attention, Transformer, attention-LSTM; trace and ONNX export."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch

from edgekit.core.errors import UsageError
from edgekit.models import build_model, get_spec, model_names
from edgekit.models.attention import attention_names, build_attention

TINY = {
    "transformer-lm": {"vocab_size": 50, "d_model": 32, "n_heads": 2, "n_layers": 2, "max_len": 24, "dropout": 0.0},
    "transformer-classifier": {"vocab_size": 50, "d_model": 32, "n_heads": 2, "n_layers": 1, "max_len": 24, "dropout": 0.0},
    "lstm-lm": {"vocab_size": 50, "embed_dim": 16, "hidden_size": 32, "n_heads": 2, "dropout": 0.0},
}
CASES = [(name, attn) for name in TINY for attn in ("full", "local", "linear")]


def tiny(name: str, attention: str = "full", **extra):
    torch.manual_seed(0)
    return build_model(name, {**TINY[name], "attention": attention, "window": 4, **extra})


def test_zoo_lists_every_family():
    assert {"digits-cnn", "transformer-lm", "transformer-classifier", "lstm-lm"} <= set(model_names())
    assert get_spec("lstm-lm").recurrent and not get_spec("transformer-lm").recurrent
    assert get_spec("transformer-lm").task["metric"] == "next_token_accuracy"
    spec = get_spec("transformer-lm").input_spec(get_spec("transformer-lm").config())
    assert spec[0].shape == (None, None) and spec[0].dtype == "int64"
    assert spec[0].dynamic_axes == {0: "batch", 1: "sequence"}


def test_unknown_attention_lists_the_valid_ones():
    assert attention_names() == ["full", "linear", "local"]
    with pytest.raises(UsageError, match="unknown attention 'flash'; choose one of: full, linear, local"):
        build_attention("flash", 16, 2, causal=True)
    with pytest.raises(UsageError, match="unknown attention"):
        build_model("transformer-lm", {"attention": "flash"})


@pytest.mark.parametrize("attention", ["full", "local", "linear"])
def test_causal_attention_never_looks_ahead(attention):
    attn = build_attention(attention, 16, 2, causal=True, window=3).eval()
    x = torch.randn(2, 10, 16)
    y = x.clone()
    y[:, 6:] += 1.0
    assert torch.allclose(attn(x)[:, :6], attn(y)[:, :6], atol=1e-6)
    assert not torch.allclose(attn(x)[:, 6:], attn(y)[:, 6:])


def test_local_attention_sees_only_its_window():
    attn = build_attention("local", 16, 2, causal=True, window=3).eval()
    x = torch.randn(1, 10, 16)
    y = x.clone()
    y[:, 2] += 1.0  # outside the window of position 9 (sees 7, 8, 9)
    assert torch.allclose(attn(x)[:, 9], attn(y)[:, 9], atol=1e-6)
    assert not torch.allclose(attn(x)[:, 4], attn(y)[:, 4])


@pytest.mark.parametrize("name, attention", CASES)
def test_forward_shapes(name, attention):
    model = tiny(name, attention).eval()
    out = model(torch.randint(0, 50, (3, 11)))
    expected = (3, 6) if name == "transformer-classifier" else (3, 11, 50)
    assert out.shape == expected


@pytest.mark.parametrize("name", list(TINY))
def test_bad_input_names_the_expected_layout(name):
    model = tiny(name).eval()
    with pytest.raises(ValueError, match=r"expects input of layout \(N, T\) int64 token ids"):
        model(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"\(N, T\) int64"):
        model(torch.randint(0, 50, (5,)))
    if name != "lstm-lm":
        with pytest.raises(ValueError, match=r"T <= 24"):
            model(torch.randint(0, 50, (1, 25)))


@pytest.mark.parametrize("name, attention", CASES)
def test_trace_and_onnx_export_with_dynamic_batch_and_sequence(name, attention):
    import onnxruntime as ort

    model = tiny(name, attention).eval()
    example = torch.randint(0, 50, (2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, example)
        buffer = io.BytesIO()
        torch.onnx.export(
            model, (example,), buffer, dynamo=False, input_names=["tokens"], output_names=["logits"],
            dynamic_axes={"tokens": {0: "batch", 1: "sequence"}, "logits": {0: "batch"}}, opset_version=17,
        )
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    for shape in ((1, 5), (4, 13)):
        x = torch.randint(0, 50, shape)
        with torch.no_grad():
            want = model(x)
        assert torch.allclose(traced(x), want, atol=1e-5)
        got = session.run(None, {"tokens": x.numpy()})[0]
        np.testing.assert_allclose(got, want.numpy(), atol=1e-4, rtol=1e-4)


def test_grad_checkpointing_gives_the_same_gradients_and_recomputes():
    x = torch.randint(0, 50, (2, 16))
    grads = []
    calls = []
    for enabled in (False, True):
        model = tiny("transformer-lm")
        model.set_grad_checkpointing(enabled)
        hook = model.blocks[0].ln1.register_forward_hook(lambda *a: calls.append(enabled))
        model(x).logsumexp(-1).mean().backward()
        hook.remove()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert calls.count(False) == 1 and calls.count(True) == 2  # forward again during backward
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name


def test_lstm_packed_training_path_matches_plain_on_full_rows_and_ignores_padding():
    model = tiny("lstm-lm").eval()
    x = torch.randint(2, 50, (3, 9))
    lengths = torch.tensor([9, 9, 9])
    assert torch.allclose(model(x), model(x, lengths=lengths), atol=1e-5)
    padded = x.clone()
    padded[1, 5:] = 0
    short = model(padded, lengths=torch.tensor([9, 5, 9]))
    alone = model(x[1:2, :5])
    assert torch.allclose(short[1, :5], alone[0], atol=1e-5)


def test_sampling_respects_top_k_and_temperature():
    from edgekit.llm.generation import sample_tokens

    model = tiny("transformer-lm").eval()
    prompt = [3, 4, 5]
    greedy = sample_tokens(model, prompt, 12, temperature=0, context=24)
    assert greedy == sample_tokens(model, prompt, 12, temperature=0, context=24)
    assert sample_tokens(model, prompt, 12, 1.0, 5, 24, seed=1) == sample_tokens(model, prompt, 12, 1.0, 5, 24, seed=1)
    assert sample_tokens(model, prompt, 12, 1.0, 1, 24, seed=3) == greedy  # top-1 is greedy
    with torch.no_grad():
        top = set(torch.topk(model(torch.tensor([prompt]))[0, -1], 3).indices.tolist())
    firsts = {sample_tokens(model, prompt, 1, 2.0, 3, 24, seed=s)[0] for s in range(30)}
    assert firsts <= top
    with pytest.raises(UsageError, match="temperature must be 0 .greedy. or between"):
        sample_tokens(model, prompt, 5, temperature=-1)
    with pytest.raises(UsageError, match="prompt is empty"):
        sample_tokens(model, [], 5)
