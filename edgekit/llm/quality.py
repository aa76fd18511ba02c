"""How much a quantized language model lost: perplexity on held-out text, and how often its
greedy next token is the float model's.

The held-out text is shipped by an installed package that has nothing to do with calibration or
training: the long description of the installed torch distribution (its ``METADATA``; torch is a
dependency of edgekit, so it is there wherever edgekit runs). ``--eval-text`` names another file.

Perplexity is scored in windows of ``window`` tokens every ``stride`` tokens, each window a fresh
cache, each token scored once (the first window all but its first token, later ones their last
``stride``), log-softmax in float64: the protocol of ``benchmarks/LLM_PROTOCOL.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import InputFileError, UsageError

HELDOUT_DISTRIBUTION = "torch"
MAX_TEXT_BYTES = 1 << 20
DEFAULT_EVAL_TOKENS = 1024
DEFAULT_WINDOW = 512
DEFAULT_STRIDE = 256
# a quantized file whose perplexity grew past these shares of the float model's is not recommended
PPL_BUDGET = {"int8": 0.01, "int4": 0.10}


@dataclass(frozen=True)
class Quality:
    perplexity: float
    tokens: int  # scored tokens
    greedy_agreement: float | None = None  # share of positions whose argmax equals the float model's

    def to_dict(self) -> dict:
        out = {"perplexity": round(self.perplexity, 4), "scored_tokens": self.tokens}
        if self.greedy_agreement is not None:
            out["greedy_agreement"] = round(self.greedy_agreement, 4)
        return out


def heldout_text(path: Path | None = None) -> tuple[str, str]:
    """(text, where it came from): ``path``, else the installed torch's long description."""
    if path is not None:
        from edgekit.core.fileio import read_regular

        raw = read_regular(Path(path), MAX_TEXT_BYTES)
        where = str(path)
        if raw is None:
            raise InputFileError(f"--eval-text {path} is not a readable regular file of at most "
                                 f"{MAX_TEXT_BYTES >> 20} MiB")
    else:
        import importlib.metadata as md

        try:
            dist = md.distribution(HELDOUT_DISTRIBUTION)
            raw = (dist.read_text("METADATA") or "").encode("utf-8")[:MAX_TEXT_BYTES]
        except md.PackageNotFoundError:
            raise InputFileError("no held-out text: torch is not installed here (give --eval-text FILE)") from None
        parts = raw.decode("utf-8", errors="replace").replace("\r\n", "\n").split("\n\n", 1)
        raw = parts[-1].encode("utf-8")
        where = f"{HELDOUT_DISTRIBUTION} {dist.version} METADATA (long description)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(f"{where} is not UTF-8 text") from None
    if not text.strip():
        raise InputFileError(f"{where} holds no text")
    return text, where


def windows(n_tokens: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first scored) of every window; every token but the first scored once."""
    if not 0 < stride <= window:
        raise UsageError(f"need 0 < stride ({stride}) <= window ({window})")
    out, scored_to, begin = [], 1, 0
    while True:
        end = min(begin + window, n_tokens)
        out.append((begin, end, max(scored_to, begin + 1)))
        scored_to = end
        if end >= n_tokens:
            return out
        begin += stride


def measure(lm, ids: list[int], window: int = DEFAULT_WINDOW, stride: int = DEFAULT_STRIDE,
            reference=None) -> Quality:
    """Perplexity of ``lm`` (a ``CachedLM``) on ``ids``; with ``reference`` (a ``CachedLM`` of the
    float model) also the share of scored positions whose greedy token is the reference's."""
    import torch

    window = min(window, lm.context)
    stride = min(stride, window)
    if len(ids) < 2:
        raise InputFileError("the evaluation text is shorter than two tokens")
    nll, count, agree = 0.0, 0, 0
    for begin, end, first in windows(len(ids), window, stride):
        lm.reset()
        # the rows that predict ids[first:end]: positions first-1 .. end-2 of the window
        rows = lm.feed_all(ids[begin:end - 1], 0, keep_from=first - 1 - begin).double()
        target = torch.tensor(ids[first:end], dtype=torch.long)
        nll += float(-(torch.log_softmax(rows, dim=-1).gather(1, target[:, None])).sum())
        count += len(target)
        if reference is not None:
            reference.reset()
            ref = reference.feed_all(ids[begin:end - 1], 0, keep_from=first - 1 - begin)
            agree += int((rows.argmax(dim=-1) == ref.argmax(dim=-1)).sum())
    return Quality(math.exp(nll / count), count, agree / count if reference is not None else None)
