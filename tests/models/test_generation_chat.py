"""Generation a chat user expects (issue 22): sampling filters against hand-computed distributions,
the KV-cached loop against full recompute, stop ids and strings, seeds, streaming.

The model is a tiny random Llama written as a GGUF (``conftest.write_tiny_gguf``) and imported
with ``edgekit import``: its weights are random, so the tests check the machinery, not the words.
"""

from __future__ import annotations

import math

import pytest
import torch
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.llm.generation import TextStream, generate_cached, generate_text, iter_tokens, pick_token, sampling_probs

runner = CliRunner()
LOGITS = torch.tensor([2.0, 1.0, 0.0, -1.0])


def _softmax(values):
    exps = [math.exp(v) for v in values]
    return [e / sum(exps) for e in exps]


FULL = _softmax([2.0, 1.0, 0.0, -1.0])  # 0.6439, 0.2369, 0.0871, 0.0321


@pytest.mark.parametrize("temperature,top_k,top_p,expected", [
    (1.0, 0, 1.0, FULL),
    (1.0, 2, 1.0, [*_softmax([2.0, 1.0]), 0, 0]),
    (2.0, 3, 1.0, [*_softmax([1.0, 0.5, 0.0]), 0]),
    (1.0, 0, 0.6, [1, 0, 0, 0]),  # the most likely alone holds 0.644 >= 0.6
    (1.0, 0, 0.7, [*_softmax([2.0, 1.0]), 0, 0]),  # 0.644 < 0.7: the second is needed, 0.881 >= 0.7
    (1.0, 0, 0.9, [*_softmax([2.0, 1.0, 0.0]), 0]),  # 0.881 < 0.9 <= 0.968
    (1.0, 3, 0.7, [*_softmax([2.0, 1.0]), 0, 0]),  # top-k first, then top-p over what is left
])
def test_sampling_distribution_is_the_hand_computed_one(temperature, top_k, top_p, expected):
    probs = sampling_probs(LOGITS, temperature, top_k, top_p)
    assert probs.tolist() == pytest.approx(expected, abs=1e-6)


def test_top_p_on_shuffled_logits_masks_by_probability_not_position():
    logits = torch.tensor([0.0, 2.0, -1.0, 1.0])  # the same values as LOGITS, shuffled
    assert sampling_probs(logits, 1.0, 0, 0.7).tolist() == pytest.approx([0, FULL[0] / sum(FULL[:2]), 0,
                                                                         FULL[1] / sum(FULL[:2])], abs=1e-6)


def test_draws_follow_the_distribution_and_never_pick_a_masked_id():
    generator = torch.Generator().manual_seed(0)
    draws = [pick_token(LOGITS, 1.0, 0, 0.7, generator) for _ in range(4000)]
    assert set(draws) <= {0, 1}
    share = draws.count(0) / len(draws)
    assert share == pytest.approx(FULL[0] / (FULL[0] + FULL[1]), abs=0.03)  # 0.731, 4000 draws: sd 0.007


def test_greedy_is_the_first_highest_logit():
    assert pick_token(torch.tensor([0.5, 3.0, 3.0, -1.0]), 0.0) == 1


class _Chars:
    """A byte tokenizer: id = byte; decoding is UTF-8 with U+FFFD for a cut character (as byte-level BPE)."""

    @staticmethod
    def decode(ids):
        return bytes(ids).decode("utf-8", errors="replace")


def test_stream_holds_a_character_until_all_its_bytes_are_there():
    stream = TextStream(_Chars.decode)
    pieces = [stream.push(b) for b in "né🤖!".encode()]
    assert pieces == ["n", "", "é", "", "", "", "🤖", "!"]
    assert stream.finish() == "" and stream.text == "né🤖!"


def test_stream_cuts_at_a_stop_string_and_never_prints_it():
    stream = TextStream(_Chars.decode, ["END"])
    pieces = []
    for b in b"okay EN":
        pieces.append(stream.push(b))
    assert "".join(pieces) == "okay "  # "EN" may be the start of "END": held back
    assert stream.push(ord("D")) == "" and stream.stopped
    assert stream.text == "okay "


def test_stream_gives_back_a_held_prefix_that_was_no_stop():
    stream = TextStream(_Chars.decode, ["END"])
    text = "".join(stream.push(b) for b in b"ENJOY") + stream.finish()
    assert text == "ENJOY" and not stream.stopped


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_gguf):
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.cached import open_cached

    out = tmp_path_factory.mktemp("chat") / "llm"
    result = runner.invoke(app, ["import", f"gguf:{tiny_gguf}", "--out", str(out), "--context", "64"])
    assert result.exit_code == 0, result.output
    folder, manifest = load_manifest(out)
    return folder, open_cached(folder, manifest, threads=1)


def test_cached_greedy_equals_recomputing_the_whole_window(tiny):
    """The KV cache changes nothing: the same ids as the plain forward over the whole sequence."""
    from edgekit.sources.checkpoint import load_model_from_artifact
    from edgekit.formats.artifacts import load_manifest

    folder, lm = tiny
    model = load_model_from_artifact(*load_manifest(folder))
    prompt = [5, 77, 260, 31, 299 - 3]

    def full(window):
        with torch.inference_mode():
            return model(torch.tensor([window]))[0, -1]

    cached = list(generate_cached(lm, prompt, 24, temperature=0.0))
    assert cached == list(iter_tokens(full, prompt, 24, temperature=0.0))
    assert len(cached) == 24


def test_a_stop_id_ends_generation_and_is_not_yielded(tiny):
    _, lm = tiny
    prompt = [5, 77, 260, 31]
    free = list(generate_cached(lm, prompt, 20, 0.0))
    k = next(i for i in range(1, len(free)) if free[i] not in free[:i])
    assert list(generate_cached(lm, prompt, 20, 0.0, stop_ids=[free[k]])) == free[:k]


def test_seeds(tiny):
    _, lm = tiny
    prompt = [5, 77, 260, 31]
    one = list(generate_cached(lm, prompt, 16, 1.0, 0, 1.0, seed=7))
    assert one == list(generate_cached(lm, prompt, 16, 1.0, 0, 1.0, seed=7))
    others = {tuple(generate_cached(lm, prompt, 16, 1.0, 0, 1.0, seed=s)) for s in range(8, 12)}
    assert len(others | {tuple(one)}) > 1


def test_streaming_equals_not_streaming(tiny):
    folder, _ = tiny
    pieces = []
    streamed = generate_text(folder, "the cat", 20, 1.0, 0, seed=3, threads=1, chat=False, on_text=pieces.append)
    plain = generate_text(folder, "the cat", 20, 1.0, 0, seed=3, threads=1, chat=False)
    assert "".join(pieces) == streamed.text == plain.text
    assert streamed.tokens == plain.tokens == 20 and streamed.stop == "max_tokens"


def test_a_stop_string_through_the_cli(tiny):
    folder, _ = tiny
    free = runner.invoke(app, ["generate", str(folder), "the cat", "--raw", "--temperature", "0", "--max-tokens", "30",
                               "--json"])
    assert free.exit_code == 0, free.output
    import json

    text = json.loads(free.stdout)["text"]
    stop = text[len(text) // 2: len(text) // 2 + 3]
    assert stop.strip() and stop in text
    result = runner.invoke(app, ["generate", str(folder), "the cat", "--raw", "--temperature", "0", "--max-tokens", "30",
                                 "--stop", stop])
    assert result.exit_code == 0, result.output
    assert result.stdout == text[:text.index(stop)] + "\n"  # streamed, cut before the stop string
    assert "ended by stop" in result.stderr and "tokens/s" in result.stderr


def test_chat_prompt_is_the_rendered_template(tiny):
    """--chat (the default with a template) feeds the template's text; --raw the prompt alone."""
    folder, _ = tiny
    chat = generate_text(folder, "the cat", 2, 0.0, threads=1)
    raw = generate_text(folder, "the cat", 2, 0.0, threads=1, chat=False)
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.lm_runtime import load_llm_text

    text = load_llm_text(*load_manifest(folder))
    rendered = "<|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n"
    assert chat.chat and chat.prompt_tokens == len(text.tokenizer.encode(rendered).ids)
    assert not raw.chat and raw.prompt_tokens == len(text.tokenizer.encode("the cat").ids)
