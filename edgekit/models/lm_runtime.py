"""A language model from any artifact, as one call: token window -> next-token logits.

``edgekit generate``, ``edgekit serve`` and ``edgekit bench`` read language models from a
checkpoint (the torch module), a TorchScript file (float, or torch.ao dynamic int8) or an ONNX
file (float, or ONNX Runtime int8), and the tokenizer the model was trained with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from edgekit.errors import InputFileError, UsageError

TOKENIZER_FILE = "tokenizer.json"
# The file a language model is read from when none is asked for: the float module where there is
# one, else ONNX (ONNX Runtime's int8 kernels), else TorchScript.
FORMAT_ORDER = ("checkpoint", "onnx", "torchscript")
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


def pick_file(manifest, fmt: str | None = None):
    """The manifest entry to generate from: ``fmt`` if given, else the first of FORMAT_ORDER present."""
    if fmt is not None:
        if fmt not in FORMAT_ORDER:
            raise UsageError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMAT_ORDER)}")
        return manifest.file(fmt)
    for name in FORMAT_ORDER:
        if name in manifest.formats():
            return manifest.file(name)
    have = ", ".join(manifest.formats()) or "none"
    raise InputFileError(f"artifact has no model file a language model can run from (it has: {have})")


def load_language_model(folder: Path, manifest, fmt: str | None = None, device: str = "cpu",
                        threads: int | None = None) -> LanguageModel:
    """Load the artifact's model file of format ``fmt`` (default: see FORMAT_ORDER) for generation."""
    check_language_model(folder, manifest)
    entry = pick_file(manifest, fmt)
    context = manifest.model.get("config", {}).get("max_len")
    path = folder / entry.path
    loaders = {"checkpoint": _torch_step, "torchscript": _torchscript_step, "onnx": _onnx_step}
    step = loaders[entry.format](folder, manifest, entry, device, threads)
    return LanguageModel(step, entry.format, entry.precision, int(context) if context else None, path)


def _torch_step(folder, manifest, entry, device, threads):
    import torch

    from edgekit.train.checkpoint import load_model_from_artifact
    from edgekit.train.distributed import select_device

    if threads:
        torch.set_num_threads(threads)
    model = load_model_from_artifact(folder, manifest).to(select_device(device)).eval()
    where = next(model.parameters()).device

    def step(ids: list[int]):
        with torch.inference_mode():
            return model(torch.tensor([ids], dtype=torch.long, device=where))[0, -1].float().cpu()

    return step


def _torchscript_step(folder, manifest, entry, device, threads):
    import torch

    if device not in ("cpu", "auto"):
        raise UsageError(f"TorchScript language models run on the CPU here, not {device!r}")
    engine = (entry.details or {}).get("quantized_engine")
    if engine:
        if engine not in torch.backends.quantized.supported_engines:
            raise InputFileError(f"{entry.path} needs torch's {engine!r} quantized engine, which this torch lacks")
        torch.backends.quantized.engine = engine
    if threads:
        torch.set_num_threads(threads)
    try:
        module = torch.jit.load(str(folder / entry.path), map_location="cpu").eval()
    except (RuntimeError, ValueError) as exc:
        raise InputFileError(f"{folder / entry.path} is not a loadable TorchScript model: {str(exc).splitlines()[0]}") from None

    def step(ids: list[int]):
        with torch.inference_mode():
            out = module(torch.tensor([ids], dtype=torch.long))
            out = out[0] if isinstance(out, (tuple, list)) else out
            return out[0, -1].float()

    return step


def _onnx_step(folder, manifest, entry, device, threads):
    import numpy as np
    import onnxruntime as ort
    import torch

    if device not in ("cpu", "auto"):
        raise UsageError(f"ONNX language models run on the CPU here, not {device!r}")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    try:
        session = ort.InferenceSession(str(folder / entry.path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception family
        raise InputFileError(f"{folder / entry.path} is not a loadable ONNX model: {str(exc).splitlines()[0]}") from None
    feed = session.get_inputs()[0]
    dtype = np.int32 if feed.type == "tensor(int32)" else np.int64

    def step(ids: list[int]):
        logits = session.run(None, {feed.name: np.asarray([ids], dtype=dtype)})[0]
        return torch.from_numpy(np.ascontiguousarray(logits[0, -1], dtype=np.float32))

    return step


def load_tokenizer(folder: Path, manifest):
    """The model's tokenizer: ``tokenizer.json`` in the artifact, in its checkpoint, or up its parents.

    A parent is trusted only while its manifest still has the checksum the child recorded.
    """
    from edgekit.artifacts import MANIFEST_NAME, Manifest
    from edgekit.data.tokenizer import Tokenizer
    from edgekit.fileio import read_json, sha256_file

    for _ in range(_MAX_PARENT_HOPS + 1):
        if (folder / TOKENIZER_FILE).is_file():
            return Tokenizer.from_dict(_json_object(read_json(folder / TOKENIZER_FILE, "tokenizer"), folder / TOKENIZER_FILE))
        if "checkpoint" in manifest.formats():
            from edgekit.train.checkpoint import load_checkpoint

            _, meta = load_checkpoint(folder / manifest.file("checkpoint").path)
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


def carry_tokenizer(parent: dict | None, dest: Path) -> None:
    """Copy the parent artifact's ``tokenizer.json`` into a derived artifact being written at ``dest``."""
    import shutil

    if not parent or not parent.get("path"):
        return
    source = Path(str(parent["path"])) / TOKENIZER_FILE
    if source.is_file() and not (dest / TOKENIZER_FILE).exists():
        shutil.copyfile(source, dest / TOKENIZER_FILE)
