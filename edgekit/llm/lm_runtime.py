"""A language model from any artifact, as one call: token window -> next-token logits.

``edgekit generate``, ``edgekit serve`` and ``edgekit bench`` read language models from a
checkpoint (the torch module) or any model file in the format table (``edgekit.formats``: its
predictor runs the window), and the tokenizer the model was trained with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from edgekit.formats.artifacts import CHECKPOINT, MANIFEST_NAME, TOKENIZER_FILE, Manifest, check_carried
from edgekit.core.errors import InputFileError, UsageError, EdgekitError, first_line
from edgekit import formats
from edgekit.core.device import select_device
from edgekit.core.fileio import read_json, sha256_file, read_regular
from edgekit.llm.chat import load_template
from edgekit.sources.checkpoint import load_model_from_artifact

_MAX_PARENT_HOPS = 4


@dataclass(frozen=True)
class LanguageModel:
    """``step(ids)`` returns the float32 logits (a 1-D torch tensor) of the token after ``ids``."""

    step: Callable[[list[int]], Any]
    format: str
    precision: str
    context: int | None  # tokens re-read each step (the model's max_len), None: all of them
    path: Path


def check_language_model(folder: Path, manifest) -> None:
    if manifest.task.get("type") != "language-modeling":
        raise UsageError(
            f"{folder} holds a {manifest.task.get('type', 'unknown')} model ({manifest.model['name']}); "
            "generate needs a language model such as transformer-lm or lstm-lm"
        )


def format_order() -> tuple[str, ...]:
    """The file a language model is read from when none is asked for: the float module where there
    is one, else the model formats in the table's preference (ONNX Runtime's int8 kernels first)."""
    return (CHECKPOINT, *sorted(formats.names(), key=lambda name: formats.get(name).board.preference))


def pick_file(manifest, fmt: str | None = None):
    """The manifest entry to generate from: ``fmt`` if given, else the first of ``format_order()`` present."""
    order = format_order()
    if fmt is not None:
        if fmt not in order:
            raise UsageError(f"unknown format {fmt!r}; choose one of: {', '.join(order)}")
        return manifest.file(fmt)
    for name in order:
        if name in manifest.formats():
            return manifest.file(name)
    have = ", ".join(manifest.formats()) or "none"
    raise InputFileError(f"artifact has no model file a language model can run from (it has: {have})")


def load_language_model(folder: Path, manifest, fmt: str | None = None, device: str = "cpu",
                        threads: int | None = None) -> LanguageModel:
    """Load the artifact's model file of format ``fmt`` (default: see ``format_order``) for generation."""
    check_language_model(folder, manifest)
    entry = pick_file(manifest, fmt)
    context = manifest.model.get("config", {}).get("max_len")
    path = folder / entry.path
    load = _torch_step if entry.format == CHECKPOINT else _file_step
    step = load(folder, manifest, entry, device, threads)
    return LanguageModel(step, entry.format, entry.precision, int(context) if context else None, path)


def _torch_step(folder, manifest, entry, device, threads):
    import torch


    if threads:
        torch.set_num_threads(threads)
    model = load_model_from_artifact(folder, manifest).to(select_device(device)).eval()
    where = next(model.parameters()).device

    def step(ids: list[int]):
        with torch.inference_mode():
            return model(torch.tensor([ids], dtype=torch.long, device=where))[0, -1].float().cpu()

    return step


def _file_step(folder, manifest, entry, device, threads):
    """A model file run by its format's own predictor (numpy in, numpy out), one window per step."""
    import numpy as np
    import torch


    if device not in ("cpu", "auto"):
        raise UsageError(f"{entry.format} language models run on the CPU here, not {device!r}")
    if threads:
        torch.set_num_threads(threads)
    path = folder / entry.path
    try:
        predict = formats.get(entry.format).ops().predictor(path, entry.details, threads or 1)
    except EdgekitError:
        raise
    except Exception as exc:  # noqa: BLE001 - each runtime raises its own exception family
        raise InputFileError(f"{path} is not a loadable {entry.format} model: {first_line(exc)}") from None
    dtype = np.dtype(manifest.inputs[0].dtype) if manifest.inputs else np.dtype(np.int64)

    def step(ids: list[int]):
        logits = predict(np.asarray([ids], dtype=dtype))
        return torch.from_numpy(np.ascontiguousarray(logits[0, -1], dtype=np.float32))

    return step


def load_tokenizer(folder: Path, manifest):
    """The model's tokenizer: ``tokenizer.json`` in the artifact, in its checkpoint, or up its parents.

    A parent is trusted only while its manifest still has the checksum the child recorded.
    """
    from edgekit.data.tokenizer import Tokenizer

    for _ in range(_MAX_PARENT_HOPS + 1):
        if (folder / TOKENIZER_FILE).is_file():
            check_carried(folder, manifest, TOKENIZER_FILE)  # the manifest's checksum covers it
            return Tokenizer.from_dict(_json_object(read_json(folder / TOKENIZER_FILE, "tokenizer", finite=True),
                                                    folder / TOKENIZER_FILE))
        if CHECKPOINT in manifest.formats():
            from edgekit.sources.checkpoint import load_checkpoint

            _, meta = load_checkpoint(folder / manifest.file(CHECKPOINT).path)
            if "tokenizer" in meta:
                return Tokenizer.from_dict(meta["tokenizer"])
        parent = manifest.parent or {}
        path = Path(str(parent.get("path", ""))) if parent.get("path") else None
        if path is None or not (path / MANIFEST_NAME).is_file() \
                or sha256_file(path / MANIFEST_NAME) != parent.get("manifest_sha256"):
            break
        folder = path
        manifest = Manifest.from_dict(read_json(path / MANIFEST_NAME, "manifest"), str(path / MANIFEST_NAME))
    raise InputFileError(
        f"no tokenizer for this language model: no {TOKENIZER_FILE} in the artifact and its parent checkpoint "
        "is gone or changed; copy the training run's tokenizer.json beside the model"
    )


def _json_object(data, where) -> dict:
    if not isinstance(data, dict):
        raise InputFileError(f"{where} is not a tokenizer (a JSON object)")
    return data


@dataclass(frozen=True)
class LLMText:
    """The text side of a pretrained language model: its tokenizer (Hugging Face ``tokenizers``),
    chat template, special tokens and the ids that end a reply."""

    tokenizer: Any
    template: str | None
    bos: str | None
    eos: str | None
    bos_id: int | None
    add_bos: bool
    stop_ids: tuple[int, ...]


def llm_text(tokenizer, template: str | None, info: dict) -> LLMText:
    """``LLMText`` from a tokenizer, template and the manifest's ``model.tokenizer`` record."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)

    def token_id(key):
        value = info.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
            raise InputFileError(f"the model's {key} {value!r} is not a token id of its tokenizer")
        return value

    bos_id, eos_id = token_id("bos_id"), token_id("eos_id")
    stops = tuple(sorted({i for i in (eos_id, token_id("eot_id"), token_id("eom_id")) if i is not None}))
    return LLMText(tokenizer, template, tokenizer.id_to_token(bos_id) if bos_id is not None else None,
                   tokenizer.id_to_token(eos_id) if eos_id is not None else None, bos_id, bool(info.get("add_bos")), stops)


def load_llm_text(folder: Path, manifest) -> LLMText:
    """The tokenizer and chat template of a pretrained model's artifact: in the artifact, or in the
    parent it was made from (trusted while the parent's manifest has the checksum the child recorded)."""
    info = manifest.model.get("tokenizer") if isinstance(manifest.model.get("tokenizer"), dict) else {}
    for _ in range(_MAX_PARENT_HOPS + 1):
        path = folder / TOKENIZER_FILE
        if path.is_file():
            check_carried(folder, manifest, TOKENIZER_FILE)
            from tokenizers import Tokenizer

            data = read_regular(path, 64 << 20)
            if data is None:
                raise InputFileError(f"{path} is not a regular file of at most 64 MiB")
            try:
                tokenizer = Tokenizer.from_str(data.decode("utf-8"))
            except Exception as exc:  # noqa: BLE001 - tokenizers raises its own Exception type
                raise InputFileError(f"{path} is not a Hugging Face tokenizer: {str(exc).splitlines()[0][:200]}") from None
            return llm_text(tokenizer, load_template(folder, manifest), info)
        parent = manifest.parent or {}
        where = Path(str(parent.get("path", ""))) if parent.get("path") else None
        if where is None or not (where / MANIFEST_NAME).is_file() \
                or sha256_file(where / MANIFEST_NAME) != parent.get("manifest_sha256"):
            break
        folder = where
        from edgekit.core.fileio import read_json

        manifest = Manifest.from_dict(read_json(where / MANIFEST_NAME, "manifest"), str(where / MANIFEST_NAME))
    raise InputFileError(f"no {TOKENIZER_FILE} for this language model in the artifact or the checkpoint it was "
                         "made from; import the model again (edgekit import gguf:...)")
