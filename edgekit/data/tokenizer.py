"""Tokenizers for text models: character-level (default) or word-level, JSON-serialisable.

A tokenizer is its vocabulary: a list of strings whose positions are the token ids. Id 0 is
padding and id 1 stands for anything not in the vocabulary. ``to_dict``/``from_dict`` round-trip
through plain JSON so a checkpoint can carry its tokenizer without pickle.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.core.errors import InputFileError, UsageError, unknown_name

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
SPECIALS = (PAD, UNK)
DEFAULT_MAX_VOCAB = 8000

# Words, runs of whitespace and single punctuation marks: joining the pieces gives the text back.
_WORD_PIECES = re.compile(r"\w+|\s+|[^\w\s]")


def _chars(text: str) -> list[str]:
    return list(text)


def _words(text: str) -> list[str]:
    return _WORD_PIECES.findall(text)


_SPLITTERS = {"char": _chars, "word": _words}
KINDS = tuple(_SPLITTERS)


@dataclass(frozen=True)
class TokenizerSettings:
    """What decides a vocabulary: the kind of pieces and (for words) how many to keep."""

    kind: str = "char"
    max_vocab: int = DEFAULT_MAX_VOCAB

    def __post_init__(self) -> None:
        if self.kind not in _SPLITTERS:
            raise unknown_name("tokenizer", self.kind, KINDS)
        if not isinstance(self.max_vocab, int) or self.max_vocab < len(SPECIALS) + 1:
            raise UsageError(f"max_vocab must be an integer >= {len(SPECIALS) + 1}, got {self.max_vocab!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "max_vocab": self.max_vocab}


@dataclass(frozen=True)
class Tokenizer:
    settings: TokenizerSettings
    vocab: tuple[str, ...]
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if tuple(self.vocab[: len(SPECIALS)]) != SPECIALS:
            raise InputFileError(f"tokenizer vocabulary must start with {SPECIALS}")
        object.__setattr__(self, "_index", {piece: i for i, piece in enumerate(self.vocab)})

    @classmethod
    def fit(cls, text: str, settings: TokenizerSettings = TokenizerSettings()) -> "Tokenizer":
        """Build the vocabulary from ``text``: every character, or the most frequent words."""
        counts = Counter(_SPLITTERS[settings.kind](text))
        if settings.kind == "char":
            pieces = sorted(counts)
        else:
            ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            pieces = sorted(piece for piece, _ in ranked[: settings.max_vocab - len(SPECIALS)])
        pieces = [p for p in pieces if p not in SPECIALS]
        return cls(settings, SPECIALS + tuple(pieces))

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> np.ndarray:
        index = self._index
        return np.fromiter(
            (index.get(piece, UNK_ID) for piece in _SPLITTERS[self.settings.kind](text)), dtype=np.int32
        )

    def decode(self, ids) -> str:
        pieces = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i == PAD_ID:
                continue
            pieces.append(self.vocab[i] if 0 <= i < len(self.vocab) else UNK)
        return "".join(pieces)

    def to_dict(self) -> dict[str, Any]:
        return {**self.settings.to_dict(), "vocab": list(self.vocab)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Tokenizer":
        try:
            settings = TokenizerSettings(str(data["kind"]), int(data.get("max_vocab", DEFAULT_MAX_VOCAB)))
            vocab = tuple(str(piece) for piece in data["vocab"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputFileError(f"malformed tokenizer: {exc!r}") from None
        return cls(settings, vocab)
