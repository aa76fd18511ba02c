"""Text data: a corpus -> documents -> train/val/test -> token arrays cached on disk.

The default corpus is real English text that every Python install carries offline: the
reference documentation topics in the standard library's ``pydoc_data.topics`` (the text
``help("if")`` prints, a few hundred KB). Users bring their own plain-text file instead.

Documents are paragraphs (blank-line separated). They are assigned to splits by a seeded
permutation, so val/test never share a paragraph with train. Each split is tokenized once
and cached under ``cache_root()/text/<key>/`` as ``.npy`` arrays plus JSON, where ``key``
hashes the corpus bytes, the tokenizer settings and the split rule: edit the corpus and the
cache is rebuilt. The cache folder is built under a temporary name and renamed into place,
so a crash never leaves a half-written cache and concurrent builders (torchrun ranks) agree.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from edgekit.data.digits import ArraySplit
from edgekit.data.tokenizer import Tokenizer, TokenizerSettings
from edgekit.core.errors import EdgekitError, InputFileError, UsageError
from edgekit.core.cache import cache_root as root

CACHE_VERSION = 1
SPLIT_SEED = 20240607
VAL_FRACTION = 0.05
TEST_FRACTION = 0.05
MIN_DOCUMENTS = 20  # fewer paragraphs than this: cut the text into blocks instead
BLOCK_CHARS = 256
SPLITS = ("train", "val", "test")
DEFAULT_CORPUS = "pydoc-text"
DEFAULT_WINDOW = 128
IGNORE_INDEX = -100  # target value for padding; cross-entropy skips it


def cache_root() -> Path:
    """``$EDGEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgekit``, else ``~/.cache/edgekit``."""
    return root()


# --------------------------------------------------------------------------- corpus -> documents


def pydoc_corpus() -> str:
    """The stdlib's documentation topics, in a fixed order, as one text."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key].strip("\n") for key in sorted(topics))


def read_corpus(path: str | os.PathLike | None) -> tuple[str, str]:
    """(text, source): the user's UTF-8 file, or the default corpus when ``path`` is None."""
    if path is None:
        return pydoc_corpus(), DEFAULT_CORPUS
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"text file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise InputFileError(f"{path} holds no text")
    return text, str(path)


def _blocks(text: str, size: int = BLOCK_CHARS) -> list[str]:
    """Cut ``text`` into pieces of about ``size`` characters, at line ends where possible."""
    blocks, current = [], ""
    for line in text.splitlines(keepends=True):
        while len(line) > size:
            if current:
                blocks.append(current)
                current = ""
            blocks.append(line[:size])
            line = line[size:]
        if len(current) + len(line) > size and current:
            blocks.append(current)
            current = ""
        current += line
    if current.strip():
        blocks.append(current)
    return [b for b in blocks if b.strip()]


def documents(text: str) -> list[str]:
    """Paragraphs (blank-line separated), or fixed-size blocks when there are too few paragraphs."""
    paragraphs = [p.strip("\n") for p in text.replace("\r\n", "\n").split("\n\n")]
    paragraphs = [p for p in paragraphs if p.strip()]
    if len(paragraphs) >= MIN_DOCUMENTS:
        return paragraphs
    return [b.strip("\n") for b in _blocks(text.replace("\r\n", "\n"))]


def assign_splits(n_docs: int, seed: int = SPLIT_SEED) -> dict[str, np.ndarray]:
    """Document indices per split (each sorted, so neighbouring paragraphs stay together)."""
    if n_docs < len(SPLITS):
        raise InputFileError(
            f"the text has {n_docs} paragraph(s); at least {len(SPLITS)} are needed for train/val/test"
        )
    order = np.random.default_rng(seed).permutation(n_docs)
    n_test = max(1, round(n_docs * TEST_FRACTION))
    n_val = max(1, round(n_docs * VAL_FRACTION))
    return {
        "test": np.sort(order[:n_test]),
        "val": np.sort(order[n_test : n_test + n_val]),
        "train": np.sort(order[n_test + n_val :]),
    }


# --------------------------------------------------------------------------- tokenized corpus + cache


@dataclass(frozen=True)
class TokenizedSplit:
    """One split as a token stream; ``bounds[i]:bounds[i+1]`` is document ``i``."""

    tokens: np.ndarray  # int32 (n_tokens,)
    bounds: np.ndarray  # int64 (n_docs + 1,)


@dataclass(frozen=True)
class TextCorpus:
    tokenizer: Tokenizer
    splits: dict[str, TokenizedSplit]
    key: str
    source: str
    sha256: str


def corpus_key(text: str, settings: TokenizerSettings) -> str:
    rule = {
        "cache_version": CACHE_VERSION,
        "tokenizer": settings.to_dict(),
        "split_seed": SPLIT_SEED,
        "fractions": [VAL_FRACTION, TEST_FRACTION],
        "min_documents": MIN_DOCUMENTS,
        "block_chars": BLOCK_CHARS,
    }
    digest = hashlib.sha256(json.dumps(rule, sort_keys=True).encode())
    digest.update(text.encode("utf-8"))
    return digest.hexdigest()[:32]


def _tokenize(text: str, settings: TokenizerSettings) -> tuple[Tokenizer, dict[str, TokenizedSplit]]:
    docs = documents(text)
    by_split = {name: [docs[i] + "\n\n" for i in idx] for name, idx in assign_splits(len(docs)).items()}
    tokenizer = Tokenizer.fit("".join(by_split["train"]), settings)
    splits = {}
    for name, pieces in by_split.items():
        encoded = [tokenizer.encode(p) for p in pieces]
        bounds = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=bounds[1:])
        splits[name] = TokenizedSplit(np.concatenate(encoded).astype(np.int32), bounds)
    return tokenizer, splits


def _write_cache(folder: Path, key: str, source: str, tokenizer: Tokenizer, splits) -> None:
    """Write the cache into a temporary sibling folder, then rename it into place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        for name, split in splits.items():
            np.save(tmp / f"{name}.tokens.npy", split.tokens, allow_pickle=False)
            np.save(tmp / f"{name}.bounds.npy", split.bounds, allow_pickle=False)
        (tmp / "tokenizer.json").write_text(json.dumps(tokenizer.to_dict()))
        (tmp / "meta.json").write_text(json.dumps({"key": key, "source": source, "version": CACHE_VERSION}))
        try:
            os.rename(tmp, folder)
        except OSError:
            pass  # another process finished first: its cache is identical, keep it
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_cache(folder: Path, key: str) -> tuple[Tokenizer, dict[str, TokenizedSplit]] | None:
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("key") != key or meta.get("version") != CACHE_VERSION:
            return None
        tokenizer = Tokenizer.from_dict(json.loads((folder / "tokenizer.json").read_text()))
        splits = {
            name: TokenizedSplit(
                np.load(folder / f"{name}.tokens.npy", allow_pickle=False),
                np.load(folder / f"{name}.bounds.npy", allow_pickle=False),
            )
            for name in SPLITS
        }
    except Exception:  # noqa: BLE001 - a damaged cache entry is rebuilt, never an error
        return None
    if any(split.tokens.ndim != 1 or split.bounds.ndim != 1 for split in splits.values()):
        return None
    return tokenizer, splits


def load_text_corpus(
    path: str | os.PathLike | None = None,
    settings: TokenizerSettings = TokenizerSettings(),
    cache_dir: str | os.PathLike | None = None,
) -> TextCorpus:
    """Tokenized train/val/test splits of a corpus, from the disk cache when it is current."""
    text, source = read_corpus(path)
    key = corpus_key(text, settings)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "text"
    folder = folder / key
    cached = _read_cache(folder, key) if folder.is_dir() else None
    if cached is None:
        tokenizer, splits = _tokenize(text, settings)
        try:
            if cache_dir is None:
                from edgekit.core.cache import part_dir

                part_dir("text")  # made tagged as edgekit's; refused where no cache may live
            if folder.exists():  # stale or damaged: move it aside, then rebuild
                with contextlib.suppress(OSError):
                    aside = Path(tempfile.mkdtemp(prefix=f".{key}.stale.", dir=folder.parent))
                    os.replace(folder, aside / "old")
                    shutil.rmtree(aside, ignore_errors=True)
            _write_cache(folder, key, source, tokenizer, splits)
        except (OSError, EdgekitError):
            pass  # an unwritable (or refused) cache only costs the tokenization next time
    else:
        tokenizer, splits = cached
    return TextCorpus(tokenizer, splits, key, source, sha)


# --------------------------------------------------------------------------- language-model batches


def pack_spans(bounds: np.ndarray, seq_len: int) -> np.ndarray:
    """(n, 2) start/end token offsets: whole paragraphs packed greedily up to ``seq_len + 1``
    tokens (one extra for the shifted target); longer paragraphs are cut. Lengths vary."""
    if seq_len < 1:
        raise UsageError(f"seq_len must be >= 1, got {seq_len}")
    limit = seq_len + 1
    spans: list[tuple[int, int]] = []
    start = None
    for doc_start, doc_end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if start is None:
            start = doc_start
        if doc_end - start <= limit:
            continue
        if doc_start > start:
            spans.append((start, doc_start))
            start = doc_start
        while doc_end - start > limit:
            spans.append((start, start + limit))
            start += limit
    if start is not None and int(bounds[-1]) - start >= 2:
        spans.append((start, int(bounds[-1])))
    out = np.asarray([s for s in spans if s[1] - s[0] >= 2], dtype=np.int64).reshape(-1, 2)
    return out


class LanguageModelingDataset:
    """Indexed by a *list* of sample ids, returning one padded batch (fast: no per-sample collate).

    Batch: ``inputs`` (B, T) int64 right-padded with 0, ``targets`` (B, T) int64 with
    ``IGNORE_INDEX`` at padding, ``lengths`` (B,) int64 real lengths (kept on the CPU).
    """

    def __init__(self, split: TokenizedSplit, seq_len: int):
        self.tokens = split.tokens
        self.spans = pack_spans(split.bounds, seq_len)
        self.seq_len = seq_len

    def __len__(self) -> int:
        return len(self.spans)

    def __getitem__(self, ids) -> dict:
        import torch

        spans = self.spans[np.asarray(ids, dtype=np.int64).reshape(-1)]
        lengths = spans[:, 1] - spans[:, 0] - 1
        width = int(lengths.max())
        inputs = np.zeros((len(spans), width), dtype=np.int64)
        targets = np.full((len(spans), width), IGNORE_INDEX, dtype=np.int64)
        for row, (start, end) in enumerate(spans.tolist()):
            piece = self.tokens[start:end]
            inputs[row, : end - start - 1] = piece[:-1]
            targets[row, : end - start - 1] = piece[1:]
        return {
            "inputs": torch.from_numpy(inputs),
            "targets": torch.from_numpy(targets),
            "lengths": torch.from_numpy(lengths),
        }


def lm_windows(split: str, window: int = DEFAULT_WINDOW) -> ArraySplit:
    """Fixed-length windows of the default corpus (char tokenizer) for other stages:
    ``inputs`` (N, window) token ids and ``labels`` (N, window) next-token ids."""
    corpus = load_text_corpus()
    tokens = corpus.splits[split].tokens.astype(np.int64)
    n = (len(tokens) - 1) // window
    inputs = tokens[: n * window].reshape(n, window)
    labels = tokens[1 : n * window + 1].reshape(n, window)
    return ArraySplit(inputs, labels)


# --------------------------------------------------------------------------- topic classification

# Six documentation topics on clearly different subjects (no shared paragraphs).
TOPICS = ("compound", "formatstrings", "string-methods", "debugger", "typesmapping", "execmodel")
TOPIC_WINDOW = 64


@lru_cache(maxsize=1)
def _topic_windows() -> tuple[Tokenizer, dict[str, tuple[list[str], list[int]]]]:
    from pydoc_data.topics import topics

    parts: dict[str, tuple[list[str], list[int]]] = {name: ([], []) for name in SPLITS}
    for label, topic in enumerate(TOPICS):
        text = " ".join(topics[topic].split())  # collapse layout whitespace
        windows = [text[i : i + TOPIC_WINDOW] for i in range(0, len(text) - TOPIC_WINDOW + 1, TOPIC_WINDOW)]
        n_val = n_test = max(1, len(windows) // 10)
        cut = {
            "train": windows[: -n_val - n_test],
            "val": windows[-n_val - n_test : -n_test],
            "test": windows[-n_test:],
        }
        for name, chunk in cut.items():
            parts[name][0].extend(chunk)
            parts[name][1].extend([label] * len(chunk))
    tokenizer = Tokenizer.fit("".join(parts["train"][0]))
    return tokenizer, parts


def topic_tokenizer() -> Tokenizer:
    return _topic_windows()[0]


def topic_split(split: str) -> ArraySplit:
    """Which of ``TOPICS`` a 64-character window of documentation comes from.

    Each topic's text is cut into windows; the last 10% of each topic is ``test``, the 10%
    before it ``val`` (contiguous blocks, so held-out text is not interleaved with training text).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    tokenizer, parts = _topic_windows()
    texts, labels = parts[split]
    inputs = np.stack([tokenizer.encode(t) for t in texts]).astype(np.int64)
    return ArraySplit(inputs, np.asarray(labels, dtype=np.int64))
