"""Calibration from a text file: one sample per line, tokenized with the model's own tokenizer.

As ``optimum-cli`` does: an ``hf:FOLDER`` model brings its tokenizer (``tokenizer.json``; a folder
with only ``vocab.txt`` or sentencepiece files goes through transformers' ``AutoTokenizer``);
any other model names one with ``--tokenizer FILE|FOLDER``. The sequence length comes from the
input spec: a fixed one (``--input-shape input_ids=Nx128``) pads and truncates every row to it;
a dynamic one pads each batch to its longest row, truncated at the tokenizer's own maximum (its
``truncation`` setting, else ``model_max_length``, at most 512) and the model's position table.

Inputs a tokenizer does not make get their conventional values: ``token_type_ids`` zeros (one
segment), ``position_ids`` 0..S-1; ``attention_mask`` marks the real tokens. Any other input is
refused (give ``.npz`` calibration data for it).

Lines are read one at a time (blank lines skipped), so memory does not grow with the file; the
file is checked whole when it is opened: UTF-8 text, no NUL bytes, no line over 1 MiB.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from edgekit.core.input_spec import InputSpec
from edgekit.core.errors import InputFileError, UsageError, first_line
from edgekit.core.fileio import read_json
from edgekit.formats.limits import MAX_CALIB_LINES

TEXT_SUFFIXES = (".txt",)
MAX_LINE_BYTES = 1 << 20
MAX_TOKENIZER_BYTES = 256 << 20
DEFAULT_MAX_LENGTH = 512
MADE = ("input_ids", "attention_mask")  # what the tokenizer makes
DEFAULTED = ("token_type_ids", "position_ids")  # what gets its conventional value


def is_text(path: Path) -> bool:
    return path.suffix.lower() in TEXT_SUFFIXES


# ---------------------------------------------------------------------------------------------
# the tokenizer


@dataclass
class TextTokenizer:
    backend: object  # a tokenizers.Tokenizer, padding and truncation off
    pad_id: int
    max_length: int | None  # what the tokenizer itself declares
    source: Path

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.backend.to_str().encode()).hexdigest()

    def encode(self, texts: list[str], max_length: int) -> list[list[int]]:
        self.backend.enable_truncation(max_length=max_length)
        try:
            return [e.ids for e in self.backend.encode_batch(texts)]
        finally:
            self.backend.no_truncation()


def load_tokenizer(path: Path) -> TextTokenizer:
    """``tokenizer.json`` (a file, or in the folder ``path``), else the folder through AutoTokenizer."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"tokenizer not found: {path}")
    file = path / "tokenizer.json" if path.is_dir() else path
    if file.is_file():
        size = file.stat().st_size
        if size > MAX_TOKENIZER_BYTES:
            raise InputFileError(f"tokenizer {file} is {size / 2**20:.0f} MiB (over {MAX_TOKENIZER_BYTES >> 20} MiB)")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise UsageError("calibrating from text needs the tokenizers package (pip install tokenizers)") from None
        try:
            backend = Tokenizer.from_file(str(file))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exceptions on bad JSON
            raise InputFileError(f"tokenizer {file} cannot be read ({first_line(exc, 160)})") from None
    elif path.is_dir():
        backend = _auto_tokenizer(path)
    else:
        raise InputFileError(f"tokenizer {path} is neither a tokenizer.json file nor a folder holding one")
    folder = file.parent if file.is_file() else path
    settings = _tokenizer_config(folder)
    declared = None
    if backend.truncation:
        declared = int(backend.truncation.get("max_length") or 0) or None
    if declared is None:
        limit = settings.get("model_max_length")
        declared = int(limit) if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit <= 1 << 20 else None
    pad_id = None
    if backend.padding:
        pad_id = backend.padding.get("pad_id")
    if pad_id is None:
        names = [settings.get("pad_token"), "[PAD]", "<pad>"]
        ids = [backend.token_to_id(n) for n in names if isinstance(n, str)]
        pad_id = next((i for i in ids if i is not None), 0)
    backend.no_padding()
    backend.no_truncation()
    return TextTokenizer(backend, int(pad_id), declared, path)


def _tokenizer_config(folder: Path) -> dict:
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    doc = read_json(path, "tokenizer config")
    pad = doc.get("pad_token")
    if isinstance(pad, dict):  # {"content": "[PAD]", ...}
        doc = {**doc, "pad_token": pad.get("content")}
    return doc


def _auto_tokenizer(folder: Path):
    try:
        import transformers
    except ImportError:
        raise UsageError(f"{folder} has no tokenizer.json; reading its tokenizer needs transformers "
                         "(pip install transformers)") from None
    try:
        tok = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True, use_fast=True,
                                                         trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError...
        raise InputFileError(f"no tokenizer in {folder} ({first_line(exc, 160)}); give --tokenizer "
                             "tokenizer.json") from None
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise InputFileError(f"the tokenizer in {folder} has no fast (tokenizers) form; give --tokenizer tokenizer.json")
    return backend


# ---------------------------------------------------------------------------------------------
# the file


def text_lines(path: Path, max_lines: int | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line, checked as it is read; past ``max_lines``
    lines (blank ones too) the file is refused."""
    with open(path, "rb") as fh:
        if b"\x00" in fh.read(8192):  # as git and file(1) tell binary from text
            raise InputFileError(f"calibration text {path} is binary (NUL bytes in its first 8 KiB), not text "
                                 "with one sample per line")
        fh.seek(0)
        number = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if max_lines is not None and number > max_lines:
                raise InputFileError(f"calibration text {path} has over {max_lines:,} lines; calibrate on a few hundred "
                                     "representative ones, or pass --calib-max-samples N to use the first N")
            if len(raw) > MAX_LINE_BYTES:
                raise InputFileError(f"calibration text {path}: line {number} is over {MAX_LINE_BYTES >> 20} MiB; "
                                     "the file holds one sample per line")
            if b"\x00" in raw:
                raise InputFileError(f"calibration text {path} is binary (a NUL byte on line {number}), not text "
                                     "with one sample per line")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputFileError(f"calibration text {path} is not UTF-8 text (line {number}, byte "
                                     f"{exc.start}: {raw[exc.start:exc.start + 1]!r})") from None
            if number == 1:
                text = text.lstrip("\ufeff")
            text = text.strip()
            if text:
                yield number, text


@dataclass(frozen=True, eq=False)
class TextCalibrationSet:
    files: tuple[Path, ...]
    specs: tuple[InputSpec, ...]
    tokenizer: TextTokenizer
    batch_size: int = 32
    max_samples: int | None = None
    length: int | None = None  # every row padded / truncated to this; None: each batch to its longest row
    max_length: int = DEFAULT_MAX_LENGTH
    samples: int = 0  # non-blank lines in the file
    fixed_batch: bool = False  # the model takes exactly batch_size rows
    _vocab: int | None = field(default=None, repr=False)

    @property
    def settings(self) -> dict:
        """What the samples depend on besides the file's contents (the range cache's key)."""
        return {"kind": "text", "tokenizer_sha256": self.tokenizer.sha256, "length": self.length,
                "max_length": self.max_length, "pad_id": self.tokenizer.pad_id}

    def count(self) -> int:
        total = self.samples if self.max_samples is None else min(self.samples, self.max_samples)
        return total - total % self.batch_size if self.fixed_batch else total

    def feeds(self) -> Iterator[dict[str, np.ndarray]]:
        remaining = self.count()
        texts: list[str] = []
        for _, text in text_lines(self.files[0]):
            if remaining <= 0:
                break
            texts.append(text)
            if len(texts) == min(self.batch_size, remaining):
                remaining -= len(texts)
                yield self._feed(texts)
                texts = []
        if texts and remaining > 0:
            yield self._feed(texts)

    def batches(self) -> Iterator[np.ndarray]:
        name = self.specs[0].name
        for feed in self.feeds():
            yield feed[name]

    def _feed(self, texts: list[str]) -> dict[str, np.ndarray]:
        rows = self.tokenizer.encode(texts, self.length or self.max_length)
        length = self.length or max(1, max(len(r) for r in rows))
        ids = np.full((len(rows), length), self.tokenizer.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), length), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = row
            mask[i, :len(row)] = 1
        top = int(ids.max()) if ids.size else 0
        if self._vocab is not None and top >= self._vocab:
            raise InputFileError(f"the tokenizer {self.tokenizer.source} makes token id {top}, outside the model's "
                                 f"vocabulary [0, {self._vocab}): is it this model's tokenizer?")
        values = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids),
                  "position_ids": np.broadcast_to(np.arange(length, dtype=np.int64), ids.shape)}
        return {spec.name: np.ascontiguousarray(values[spec.name], dtype=spec.dtype) for spec in self.specs}


def open_text(path: Path, specs: tuple[InputSpec, ...], tokenizer: Path | None, batch_size: int,
              max_samples: int | None, max_length: int | None = None) -> TextCalibrationSet:
    if tokenizer is None:
        raise UsageError(f"calibration data {path} is text: name the model's tokenizer with --tokenizer "
                         "(tokenizer.json or its folder; an hf: folder brings its own)")
    names = [s.name for s in specs]
    other = [n for n in names if n not in MADE + DEFAULTED]
    if other or "input_ids" not in names:
        raise UsageError(f"a text file calibrates token inputs ({', '.join(MADE)}; {', '.join(DEFAULTED)} get their "
                         f"defaults); this model takes {', '.join(names)}: give .npz calibration data"
                         + (f" for {', '.join(other)}" if other else ""))
    lengths, batches = set(), set()
    for spec in specs:
        if len(spec.shape) != 2 or spec.dtype not in ("int64", "int32"):
            raise UsageError(f"input {spec.name!r} is {spec.dtype} {tuple(spec.shape)}; token inputs are "
                             "int64 or int32 of shape (batch, sequence)")
        if spec.shape[1] is not None:
            lengths.add(spec.shape[1])
        if spec.shape[0] is not None:
            batches.add(spec.shape[0])
    if len(lengths) > 1 or len(batches) > 1:
        raise UsageError(f"the token inputs ({', '.join(names)}) disagree on their fixed sizes")
    tok = load_tokenizer(tokenizer)
    length = lengths.pop() if lengths else None
    cap = min(x for x in (tok.max_length or DEFAULT_MAX_LENGTH, DEFAULT_MAX_LENGTH, max_length or math.inf))

    enough = None if max_samples is None else max([max_samples, *batches])  # a fixed batch needs that many lines
    samples = 0
    for _ in text_lines(path, MAX_CALIB_LINES):  # the count stops at the limit, or at the samples used
        samples += 1
        if enough is not None and samples >= enough:
            break
    if samples == 0:
        raise InputFileError(f"calibration text {path} holds no samples (no non-blank line)")
    fixed = bool(batches)
    if fixed:
        batch_size = batches.pop()
        if samples < batch_size:
            raise InputFileError(f"calibration text {path} holds {samples} line(s); the model takes batches of {batch_size}")
    ids_spec = next(s for s in specs if s.name == "input_ids")
    vocab = int(ids_spec.value_range[1]) if ids_spec.value_range else None
    return TextCalibrationSet((path,), specs, tok, batch_size, max_samples, length, int(cap), samples, fixed, vocab)
