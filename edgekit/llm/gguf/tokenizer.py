"""A GGUF file's tokenizer as a Hugging Face ``tokenizers`` document (``tokenizer.json``).

Built with the ``tokenizers`` library straight from ``tokenizer.ggml.tokens``/``merges``/
``token_type``, no transformers needed. Byte-level BPE (``tokenizer.ggml.model = gpt2``) with the
pre-tokenizers llama.cpp names in ``tokenizer.ggml.pre``:

- ``smollm`` (SmolLM, SmolLM2): every digit on its own, then GPT-2's split (llama.cpp's
  ``\\p{N}`` then the GPT-2 expression; the original SmolLM2 ``tokenizer.json`` says the same with
  ``Digits(individual_digits=True)`` + ``ByteLevel``). The vocabulary proves it: it holds no
  token of two digits;
- ``gpt2``/``default``: GPT-2's split;
- ``llama-bpe``/``llama3``/``llama-v3`` (Llama 3): the Llama 3 expression;
- ``qwen2`` (Qwen2, Qwen2.5, Qwen3): the Llama 3 expression with single digits, after NFC.

Tokens marked CONTROL (type 3) are special (matched whole, e.g. ``<|im_start|>``), USER_DEFINED
(type 4) are added tokens. SentencePiece vocabularies (``tokenizer.ggml.model = llama``: Llama 2,
TinyLlama, Gemma) are built by ``edgekit.llm.gguf.spm``.
"""

from __future__ import annotations

from edgekit.core.errors import InputFileError
from edgekit.core.outputs import safe_text

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2/2.5/3: Llama 3's expression with every digit on its own (transformers' Qwen2Tokenizer, which
# also NFC-normalizes the text first)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = ("smollm", "gpt2", "default", "llama-bpe", "llama3", "llama-v3", "qwen2")
CONTROL, USER_DEFINED = 3, 4


def build_tokenizer(meta: dict, where: str, vocab_size: int):
    """The ``tokenizers.Tokenizer`` the GGUF metadata describes (an InputFileError when it cannot)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    kind = meta.get("tokenizer.ggml.model")
    if kind == "llama":
        from edgekit.llm.gguf.spm import build_spm_tokenizer

        return build_spm_tokenizer(meta, where, vocab_size)
    if kind != "gpt2":
        raise InputFileError(f"{where} has a {safe_text(str(kind))} tokenizer; edgekit builds byte-level BPE "
                             "(tokenizer.ggml.model = gpt2: SmolLM2, Llama 3, Qwen) and SentencePiece (llama) ones")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise InputFileError(f"{where} uses the pre-tokenizer {safe_text(str(pre))}; edgekit knows "
                             f"{', '.join(PRE_TOKENIZERS)}")
    tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens or ())
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens) or len(tokens) != vocab_size:
        raise InputFileError(f"{where}: tokenizer.ggml.tokens is not a list of {vocab_size:,} strings "
                             "(the model's vocabulary)")
    if len(set(tokens)) != len(tokens):
        raise InputFileError(f"{where}: tokenizer.ggml.tokens repeats a token")
    if not isinstance(merges, list) or not all(isinstance(m, str) and m.count(" ") == 1 for m in merges):
        raise InputFileError(f"{where}: tokenizer.ggml.merges is missing or not a list of 'a b' pairs")
    if not isinstance(types, list) or len(types) != len(tokens):
        raise InputFileError(f"{where}: tokenizer.ggml.token_type does not give one type per token")
    vocab = {token: i for i, token in enumerate(tokens)}
    pairs = [tuple(m.split(" ")) for m in merges]
    unknown = next((p for p in pairs if p[0] not in vocab or p[1] not in vocab or p[0] + p[1] not in vocab), None)
    if unknown is not None:
        raise InputFileError(f"{where}: the merge {safe_text(' '.join(unknown))} names tokens outside the vocabulary")
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    split = LLAMA3_SPLIT if pre in ("llama-bpe", "llama3", "llama-v3") else QWEN2_SPLIT if pre == "qwen2" else GPT2_SPLIT
    if pre == "qwen2":
        tokenizer.normalizer = normalizers.NFC()
    steps = [pre_tokenizers.Split(Regex(split), behavior="isolated"),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    if pre == "smollm":
        steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t, kind in zip(tokens, types) if kind == CONTROL])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False)
                          for t, kind in zip(tokens, types) if kind == USER_DEFINED])
    if tokenizer.get_vocab_size(with_added_tokens=True) != vocab_size:
        raise InputFileError(f"{where}: the tokenizer's special tokens are not in its vocabulary")
    return tokenizer


def special_ids(meta: dict, where: str, vocab_size: int) -> dict:
    """bos/eos (and the extra end-of-turn ids chat models stop at) from the metadata."""
    out = {}
    for key in ("bos", "eos", "eot", "eom", "padding", "unknown"):
        value = meta.get(f"tokenizer.ggml.{key}_token_id")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
            raise InputFileError(f"{where}: tokenizer.ggml.{key}_token_id {safe_text(repr(value))[:40]} is not a token id")
        out[f"{key}_id"] = value
    if "eos_id" not in out:
        raise InputFileError(f"{where}: tokenizer.ggml.eos_token_id is missing (generation could not stop)")
    return out
