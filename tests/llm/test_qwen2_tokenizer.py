"""Qwen's byte-level BPE (``tokenizer.ggml.pre = qwen2``, issue 34) against transformers' own
Qwen2Tokenizer built from the same vocabulary and merges, on 3,000 varied strings (digits in runs,
contractions, accents in composed and decomposed form, CJK, emoji, whitespace runs, newlines)."""

from __future__ import annotations

import json
import random

from test_spm_tokenizer import _corpus, _strings


def _vocabulary():
    """A byte-level BPE of 2,000 tokens trained on generated text (the trainer only makes test data)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    trainer_side = Tokenizer(models.BPE())
    trainer_side.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    text = _corpus(random.Random(0), 3000) + ["it's they'll we've I'm don't 12345 678 2024-06-01 x86_64"] * 50
    trainer_side.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=2000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[]))
    vocab = trainer_side.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(trainer_side.to_str())["model"]["merges"]]
    return tokens + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], merges


def test_ids_equal_transformers_qwen2_tokenizer():
    from transformers import Qwen2Tokenizer

    from edgekit.llm.gguf.tokenizer import build_tokenizer

    tokens, merges = _vocabulary()
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.merges": merges, "tokenizer.ggml.token_type": [1] * (len(tokens) - 3) + [3, 3, 3]}
    ours = build_tokenizer(meta, "qwen.gguf", len(tokens))
    reference = Qwen2Tokenizer(vocab={t: i for i, t in enumerate(tokens[:-3])}, merges=[tuple(m.split(" ")) for m in merges])
    rng = random.Random(4)
    strings = _strings(rng, 2900) + ["".join(rng.choice("0123456789 ,.'") for _ in range(30)) for _ in range(60)] + [
        "don't", "They'LL", "e\u0301te\u0301", "x86_64 2024-06-01", "a\n\n\nb", "  \t  x"] * 7
    mismatches = [(s, reference.encode(s, add_special_tokens=False), ours.encode(s, add_special_tokens=False).ids)
                  for s in strings]
    mismatches = [m for m in mismatches if m[1] != m[2]]
    assert not mismatches, (len(mismatches), mismatches[:3])
    assert any(len(tokens[i]) > 3 for s in strings[:50] for i in ours.encode(s).ids)  # real merges ran
    # (the same strings with GPT-2's or Llama 3's expression instead: 374 and 367 of 2,960 differ)
