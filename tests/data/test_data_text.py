"""Text pipeline: tokenizers, document splits, the on-disk token cache, batches."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.data import text
from edgekit.data.tokenizer import PAD_ID, UNK_ID, Tokenizer, TokenizerSettings
from edgekit.core.errors import InputFileError, UsageError

CORPUS = "\n\n".join(f"Paragraph {i}: the quick brown fox jumps over the lazy dog {i * 7}." for i in range(40))


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


def test_char_tokenizer_round_trips_and_maps_unknowns():
    tok = Tokenizer.fit("hello world")
    assert tok.vocab[:2] == ("<pad>", "<unk>")
    ids = tok.encode("hello")
    assert ids.dtype == np.int32 and tok.decode(ids) == "hello"
    assert tok.encode("hz")[1] == UNK_ID
    assert tok.decode([PAD_ID, *tok.encode("ho")]) == "ho"
    assert Tokenizer.from_dict(json.loads(json.dumps(tok.to_dict()))) == tok


def test_word_tokenizer_keeps_whitespace_and_caps_the_vocabulary():
    tok = Tokenizer.fit("a b b c c c, d", TokenizerSettings("word", max_vocab=5))
    assert len(tok) == 5  # pad, unk + the 3 most frequent pieces
    assert tok.decode(tok.encode("c c")) == "c c"
    with pytest.raises(UsageError, match="unknown tokenizer 'bpe'; choose one of: char, word"):
        TokenizerSettings("bpe")


def test_default_corpus_is_real_offline_text():
    corpus = text.pydoc_corpus()
    assert len(corpus) > 200_000 and "statement" in corpus


def test_splits_are_disjoint_documents():
    split = text.assign_splits(100)
    ids = np.concatenate([split["train"], split["val"], split["test"]])
    assert sorted(ids.tolist()) == list(range(100))
    assert len(split["val"]) == len(split["test"]) == 5
    with pytest.raises(InputFileError, match="at least 3"):
        text.assign_splits(2)


def test_cache_is_reused_and_rebuilt_when_the_corpus_changes(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(CORPUS)
    first = text.load_text_corpus(path)
    folder = text.cache_root() / "text" / first.key
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["meta.json", "tokenizer.json"] + [f"{s}.{k}.npy" for s in text.SPLITS for k in ("tokens", "bounds")]
    )
    for npy in folder.glob("*.npy"):
        np.load(npy, allow_pickle=False)  # plain arrays, no pickle
    again = text.load_text_corpus(path)
    assert again.key == first.key
    assert np.array_equal(again.splits["train"].tokens, first.splits["train"].tokens)

    path.write_text(CORPUS + "\n\nA new closing paragraph.")
    changed = text.load_text_corpus(path)
    assert changed.key != first.key and (text.cache_root() / "text" / changed.key).is_dir()
    assert text.load_text_corpus(path, TokenizerSettings("word")).key not in (first.key, changed.key)


def test_damaged_cache_is_rebuilt(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(CORPUS)
    first = text.load_text_corpus(path)
    folder = text.cache_root() / "text" / first.key
    (folder / "train.tokens.npy").write_bytes(b"garbage")
    rebuilt = text.load_text_corpus(path)
    assert np.array_equal(rebuilt.splits["train"].tokens, first.splits["train"].tokens)
    np.load(folder / "train.tokens.npy", allow_pickle=False)


def test_missing_or_binary_file_is_an_input_error(tmp_path):
    with pytest.raises(InputFileError, match="text file not found"):
        text.load_text_corpus(tmp_path / "nope.txt")
    (tmp_path / "b.txt").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(InputFileError, match="not UTF-8"):
        text.load_text_corpus(tmp_path / "b.txt")


def test_short_texts_are_cut_into_blocks():
    docs = text.documents("one long line " * 200)
    assert len(docs) >= 3 and all(len(d) <= text.BLOCK_CHARS for d in docs)


def test_packed_spans_cover_whole_paragraphs_with_varied_lengths():
    bounds = np.array([0, 5, 9, 40, 43, 50])
    spans = text.pack_spans(bounds, seq_len=9)  # at most 10 tokens each
    assert spans.tolist() == [[0, 9], [9, 19], [19, 29], [29, 39], [39, 40 + 3], [43, 50]]


def test_lm_batches_are_padded_with_ignored_targets(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(CORPUS)
    corpus = text.load_text_corpus(path)
    data = text.LanguageModelingDataset(corpus.splits["train"], seq_len=32)
    batch = data[[0, 1, 2]]
    lengths = batch["lengths"].tolist()
    assert batch["inputs"].shape == batch["targets"].shape == (3, max(lengths))
    for row, n in enumerate(lengths):
        start = data.spans[[0, 1, 2][row], 0]
        assert batch["inputs"][row, :n].tolist() == corpus.splits["train"].tokens[start : start + n].tolist()
        assert batch["targets"][row, : n - 1].tolist() == batch["inputs"][row, 1:n].tolist()
        assert (batch["targets"][row, n:] == text.IGNORE_INDEX).all()
        assert (batch["inputs"][row, n:] == PAD_ID).all()


def test_named_text_datasets_for_other_stages():
    from edgekit.data.datasets import load_split

    topics = load_split("pydoc-topics", "test")
    assert topics.inputs.shape[1] == text.TOPIC_WINDOW and topics.inputs.dtype == np.int64
    assert set(topics.labels.tolist()) == set(range(len(text.TOPICS)))
    windows = load_split("pydoc-text", "val")
    assert windows.inputs.shape == windows.labels.shape and windows.inputs.shape[1] == text.DEFAULT_WINDOW
    assert np.array_equal(windows.inputs[0, 1:], windows.labels[0, :-1])
