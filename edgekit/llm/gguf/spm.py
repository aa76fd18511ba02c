"""A GGUF's SentencePiece vocabulary (``tokenizer.ggml.model = llama``: Llama 2, TinyLlama, Gemma)
as a Hugging Face ``tokenizers`` document.

Why ``tokenizers`` and not ``sentencepiece``: the GGUF holds pieces, scores and types but no
SentencePiece model file, and every other edgekit tokenizer is already a ``tokenizer.json`` that
generate, serve and bench load one way. These vocabularies come from SentencePiece's BPE: a text
is split into characters and the adjacent pair whose joined piece scores highest is merged
until none is in the vocabulary (llama.cpp's ``llm_tokenizer_spm`` does the same). That is a BPE
whose merge ranks follow the joined pieces' scores, so the merges are derived from the scores
(every split of a piece into two vocabulary pieces, best-scored piece first) and the BPE model
of ``tokenizers`` runs them, with byte fallback (``<0x0A>``-style pieces) for characters outside
the vocabulary.

Spaces become ``▁``; with ``tokenizer.ggml.add_space_prefix`` (default true; Gemma's files say
false) a ``▁`` is put before the text and after each special token, as llama.cpp does. Token
types: 2 unknown, 3 control (special, matched whole), 4 user-defined (added tokens), 6 byte.
"""

from __future__ import annotations

import math

from edgekit.core.errors import InputFileError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"


def spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """The BPE merges a SentencePiece vocabulary implies: (left, right) for every piece that splits
    into two vocabulary pieces, ordered by the joined piece's score (best first), then by the
    pieces' ids."""
    ids = {t: i for i, t in enumerate(tokens) if types[i] in (NORMAL, USER_DEFINED, UNUSED)}
    ranked = []
    for piece, i in ids.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in ids and right in ids:
                ranked.append((-scores[i], ids[left], ids[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def build_spm_tokenizer(meta: dict, where: str, vocab_size: int):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    tokens, scores = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.scores")
    types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens or ())
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens) or len(tokens) != vocab_size:
        raise InputFileError(f"{where}: tokenizer.ggml.tokens is not a list of {vocab_size:,} strings "
                             "(the model's vocabulary)")
    if len(set(tokens)) != len(tokens):
        raise InputFileError(f"{where}: tokenizer.ggml.tokens repeats a token")
    if not isinstance(scores, list) or len(scores) != len(tokens) or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) for s in scores):
        raise InputFileError(f"{where}: tokenizer.ggml.scores does not give one finite score per token "
                             "(a SentencePiece vocabulary needs them)")
    if not isinstance(types, list) or len(types) != len(tokens) or not all(t in range(1, 7) for t in types):
        raise InputFileError(f"{where}: tokenizer.ggml.token_type does not give one type (1-6) per token")
    prefix = meta.get("tokenizer.ggml.add_space_prefix", True)
    if not isinstance(prefix, bool):
        raise InputFileError(f"{where}: tokenizer.ggml.add_space_prefix is not true or false")
    unknown = meta.get("tokenizer.ggml.unknown_token_id", types.index(UNKNOWN) if UNKNOWN in types else None)
    if unknown is not None and (isinstance(unknown, bool) or not isinstance(unknown, int)
                                or not 0 <= unknown < vocab_size):
        raise InputFileError(f"{where}: tokenizer.ggml.unknown_token_id is not a token id")
    vocab = {t: i for i, t in enumerate(tokens)}
    model = models.BPE(vocab=vocab, merges=spm_merges(tokens, scores, types), fuse_unk=True, byte_fallback=True,
                       unk_token=tokens[unknown] if unknown is not None else None)
    tokenizer = Tokenizer(model)
    replace = normalizers.Replace(" ", SPACE)
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), replace]) if prefix else replace
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if prefix else []))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t, kind in zip(tokens, types) if kind == CONTROL])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False)
                          for t, kind in zip(tokens, types) if kind == USER_DEFINED])
    if tokenizer.get_vocab_size(with_added_tokens=True) != vocab_size:
        raise InputFileError(f"{where}: the tokenizer's special tokens are not in its vocabulary")
    return tokenizer
