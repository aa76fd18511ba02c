"""SentencePiece vocabularies from GGUF (issue 34), against the ``sentencepiece`` package itself.

A small BPE model is trained here with SentencePiece's own trainer (Llama 2's settings: identity
normalization, byte fallback, split digits, a dummy prefix; and Gemma's: no dummy prefix), its
pieces, scores and types are written as GGUF tokenizer metadata, and edgekit's tokenizer built
from that metadata must give SentencePiece's ids, and decode them to SentencePiece's text, on a
few thousand varied strings (accents, CJK, emoji, digits, whitespace runs, newlines, pieces that
are not in the vocabulary)."""

from __future__ import annotations

import random

import pytest

sentencepiece = pytest.importorskip("sentencepiece")

WORDS = ("the quick brown fox jumps over the lazy dog while a café serves naïve crème brûlée; "
         "Zürich, São Paulo, Kraków and Reykjavík are cities. 東京 は 日本 の 首都 です。 北京 上海 "
         "Привет мир, как дела? Γειά σου κόσμε. مرحبا بالعالم. 🙂 🚀 👍🏽 the year 2024 had 366 days").split()
ODD = ["\n", "\n\n", "\t", "  ", "   ", " \n ", "😀", "ﬁ", "Å", "Å", "\u200b", "𝔘", "ǅ", "…", "—", "«»", "½"]


def _corpus(rng: random.Random, lines: int) -> list[str]:
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
        out.append(" ".join(words))
    return out


def _strings(rng: random.Random, count: int) -> list[str]:
    """Varied test strings: corpus-like text, with whitespace runs, odd characters and digits mixed in."""
    out = ["", " ", "a", "hello world", " leading", "trailing ", "two  spaces", "tab\tand\nnewline", "1234567890"]
    alphabet = "".join(WORDS) + "".join(ODD) + "0123456789 "
    while len(out) < count:
        kind = rng.random()
        if kind < 0.4:
            parts = [rng.choice(WORDS + ODD) for _ in range(rng.randint(1, 12))]
            out.append("".join(p + rng.choice(["", " ", " ", "  ", "\n", "\t"]) for p in parts))
        elif kind < 0.7:
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
        else:
            out.append(" " * rng.randint(0, 3) + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))
                       + " " * rng.randint(0, 3))
    return out


def _train(tmp_path, dummy_prefix: bool):
    rng = random.Random(0)
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(_corpus(rng, 3000)), encoding="utf-8")
    prefix = tmp_path / ("spm-prefix" if dummy_prefix else "spm-plain")
    sentencepiece.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(prefix), model_type="bpe", vocab_size=600, character_coverage=0.98,
        byte_fallback=True, split_digits=True, normalization_rule_name="identity", add_dummy_prefix=dummy_prefix,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, user_defined_symbols=["<|user|>"],
        minloglevel=2, num_threads=1)
    return sentencepiece.SentencePieceProcessor(model_file=f"{prefix}.model")


def _metadata(sp, dummy_prefix: bool) -> dict:
    """What llama.cpp's converter writes for a SentencePiece model."""
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    types = []
    for i in range(len(pieces)):
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i)
                     else 5 if sp.is_unused(i) else 4 if pieces[i] == "<|user|>" else 1)
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": pieces,
            "tokenizer.ggml.scores": [sp.get_score(i) for i in range(len(pieces))], "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.add_space_prefix": dummy_prefix, "tokenizer.ggml.unknown_token_id": sp.unk_id(),
            "tokenizer.ggml.bos_token_id": sp.bos_id(), "tokenizer.ggml.eos_token_id": sp.eos_id()}


@pytest.mark.parametrize("dummy_prefix", [True, False], ids=["llama-style", "gemma-style"])
def test_ids_and_text_equal_sentencepiece_on_thousands_of_strings(tmp_path, dummy_prefix):
    from edgekit.llm.gguf.tokenizer import build_tokenizer

    sp = _train(tmp_path, dummy_prefix)
    meta = _metadata(sp, dummy_prefix)
    ours = build_tokenizer(meta, "test.gguf", len(meta["tokenizer.ggml.tokens"]))
    strings = _strings(random.Random(1), 3000)
    mismatches = []
    for text in strings:
        expected = sp.encode(text)
        got = ours.encode(text, add_special_tokens=False).ids
        if got != expected:
            mismatches.append((text, expected, got))
        elif ours.decode(got, skip_special_tokens=False) != sp.decode(expected):
            mismatches.append((text, sp.decode(expected), ours.decode(got)))
    assert not mismatches, (len(mismatches), mismatches[:3])
    # the vocabulary is exercised: multi-character merges, byte fallback and the user-defined piece
    used = {i for text in strings for i in sp.encode(text)}
    assert any(sp.is_byte(i) for i in used) and any(len(sp.id_to_piece(i)) > 3 for i in used)


def test_a_special_token_in_the_text_is_one_id_and_the_prefix_follows_it(tmp_path):
    """Control tokens are matched whole (a chat template's markers); like llama.cpp, the text after
    one gets the space prefix again."""
    from edgekit.llm.gguf.tokenizer import build_tokenizer

    sp = _train(tmp_path, True)
    meta = _metadata(sp, True)
    ours = build_tokenizer(meta, "test.gguf", len(meta["tokenizer.ggml.tokens"]))
    eos = sp.id_to_piece(sp.eos_id())
    ids = ours.encode(f"the dog{eos}the cat", add_special_tokens=False).ids
    assert ids == sp.encode("the dog") + [sp.eos_id()] + sp.encode("the cat")
    assert ours.encode("<|user|>the cat", add_special_tokens=False).ids[0] == sp.piece_to_id("<|user|>")


def test_a_vocabulary_without_scores_is_refused_in_one_line(tmp_path):
    from edgekit.core.errors import InputFileError
    from edgekit.llm.gguf.tokenizer import build_tokenizer

    sp = _train(tmp_path, True)
    meta = _metadata(sp, True)
    del meta["tokenizer.ggml.scores"]
    with pytest.raises(InputFileError, match="tokenizer.ggml.scores does not give one finite score per token"):
        build_tokenizer(meta, "test.gguf", len(meta["tokenizer.ggml.tokens"]))


def test_a_gemma3_gguf_with_a_sentencepiece_vocabulary_imports_and_generates(tmp_path):
    """Through the CLI as a user would: ``edgekit import`` then ``edgekit generate`` (greedy, raw
    prompt) on a tiny Gemma 3 whose vocabulary is SentencePiece's; the prompt's ids are
    SentencePiece's and the reply is transformers' greedy continuation of them."""
    import json

    import torch
    from test_gguf_archs import _common, reference_from_gguf, write_gguf
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    sp = _train(tmp_path, False)
    meta = _metadata(sp, False)
    vocab = len(meta["tokenizer.ggml.tokens"])
    torch.manual_seed(5)
    cfg = Gemma3TextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=128,
                           sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                           query_pre_attn_scalar=32, rms_norm_eps=1e-6,
                           rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "default", "rope_theta": 1e6}})
    model = Gemma3ForCausalLM(cfg)
    with torch.no_grad():  # byte and control pieces get zero logits (tied embeddings): the reply is text
        for i, kind in enumerate(meta["tokenizer.ggml.token_type"]):
            if kind != 1:
                model.model.embed_tokens.weight[i] = 0

    def metadata(w):
        _common(w, cfg, 1e6, head_dim=32)
        w.add_vocab_size(vocab)
        w.add_sliding_window(4)
        w.add_sliding_window_pattern(2)

    def tokenizer(w):
        w.add_tokenizer_model("llama")
        w.add_token_list(meta["tokenizer.ggml.tokens"])
        w.add_token_scores(meta["tokenizer.ggml.scores"])
        w.add_token_types(meta["tokenizer.ggml.token_type"])
        w.add_add_space_prefix(False)
        w.add_unk_token_id(sp.unk_id())
        w.add_bos_token_id(sp.bos_id())
        w.add_eos_token_id(sp.eos_id())
        w.add_add_bos_token(False)

    path = write_gguf(tmp_path / "gemma-spm.gguf", model, "gemma3", metadata, {}, tokenizer=tokenizer)
    runner, out = CliRunner(), tmp_path / "gemma"
    result = runner.invoke(app, ["import", f"gguf:{path}", "--out", str(out)])
    assert result.exit_code == 0, result.output
    prompt = "the quick brown fox"
    result = runner.invoke(app, ["generate", str(out), prompt, "--raw", "--temperature", "0", "--max-tokens", "12",
                                 "--json"])
    assert result.exit_code == 0, result.output
    reply = json.loads(result.stdout)
    ids = sp.encode(prompt)
    assert reply["prompt_tokens"] == len(ids)
    reference = reference_from_gguf(path, model, "gemma3")
    with torch.inference_mode():
        tokens = torch.tensor([ids])
        for _ in range(reply["tokens"]):
            tokens = torch.cat([tokens, reference(tokens).logits[:, -1:].argmax(-1)], 1)
    assert reply["tokens"] == 12 and reply["text"] == sp.decode(tokens[0, len(ids):].tolist())
