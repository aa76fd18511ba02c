"""What ``edgekit serve`` serves: an artifact, a model file in one, or a bundle folder, as a model
object for ``edgekit.serve.app.create_app`` (ONNX through onnxruntime, TorchScript through torch,
ExecuTorch ``.pte`` through ExecuTorch's runtime, each format's wrapper named by its table
entry's ``serve_model``; language models also get a generator for ``/v1/generate``)."""

from __future__ import annotations

import importlib
from pathlib import Path

from edgekit.artifacts import CHECKPOINT
from edgekit.errors import EdgekitError, InputFileError, UsageError


def load_served_model(path: str | Path, fmt: str | None = None, threads: int | None = None):
    """The model in ``path``; ``fmt`` (a format name) picks a file when an artifact holds several."""
    from edgekit import formats
    from edgekit.artifacts import load_manifest, model_file_for

    path = Path(path)
    if path.is_dir() and (path / "bundle.json").is_file():
        from edgekit.bundle.layout import read_bundle_json

        path = path / read_bundle_json(path)["model"]
    if path.is_dir():
        folder, manifest = load_manifest(path)
        entries = [f for f in manifest.files if f.format in (*formats.names(), CHECKPOINT)]
        if fmt is not None:
            entry = manifest.file(fmt)
        elif len(entries) == 1:
            entry = entries[0]
        else:
            best = formats.preferred([f.format for f in entries])
            if best is None:
                raise UsageError(f"{folder} holds several models; choose one with --format")
            entry = manifest.file(best)
    else:
        folder, manifest, entry = model_file_for(path)
    if entry.format == CHECKPOINT:
        model = TorchModel(folder, manifest, entry, threads)
    else:
        module, _, name = formats.get(entry.format).serve_model.partition(":")
        model = getattr(importlib.import_module(module), name)(folder, manifest, entry, threads)
    if manifest.task.get("type") == "language-modeling":
        vocab = manifest.model.get("config", {}).get("vocab_size")
        for spec in model.specs:  # token ids past the vocabulary are a 422, not a runtime failure
            if vocab and spec["dtype"].startswith("int") and spec["value_range"] is None:
                spec["value_range"] = (0.0, float(vocab))
        model.generator = Generator(folder, manifest, entry.format, threads)
    return model


def open_onnx(folder: Path, manifest, entry, threads: int | None):
    """The ONNX wrapper (standalone, so it takes the manifest as a dict), with edgekit's errors."""
    from edgekit.serve.onnx_model import OnnxModel

    try:
        return OnnxModel(folder / entry.path, manifest.to_dict(), threads)
    except Exception as exc:  # onnxruntime's own exception family
        raise InputFileError(f"{folder / entry.path} cannot be served: {str(exc).splitlines()[0][:300]}") from None


class TorchModel:
    """A TorchScript file or a checkpoint's module, called with numpy arrays."""

    def __init__(self, folder: Path, manifest, entry, threads: int | None):
        import torch

        from edgekit.serve.inputs import spec_from_dict

        if threads:
            torch.set_num_threads(threads)
        if entry.format == CHECKPOINT:
            from edgekit.formats.checkpoint import load_model_from_artifact

            self.module = load_model_from_artifact(folder, manifest)
        else:
            from edgekit.formats.torchscript_backend import load_torchscript

            engine = (entry.details or {}).get("quantized_engine")
            if engine not in torch.backends.quantized.supported_engines:
                engine = None
            self.module = load_torchscript(folder / entry.path, engine)  # InputFileError for a bad file
        self.specs = [spec_from_dict(s.to_dict()) for s in manifest.inputs]
        self.outputs = list(manifest.outputs) or ["output"]
        self.summary = {
            "model": manifest.model.get("name"), "task": manifest.task.get("type"), "format": entry.format,
            "path": entry.path, "precision": entry.precision, "bytes": entry.total_bytes, "sha256": entry.sha256,
            "inputs": [{"name": s["name"], "dtype": s["dtype"], "shape": list(s["shape"]) if s["shape"] else None}
                       for s in self.specs],
            "outputs": self.outputs, "runtime": f"torch {torch.__version__}",
        }

    def run(self, feed: dict) -> list:
        import torch

        with torch.inference_mode():
            out = self.module(*(torch.from_numpy(feed[s["name"]]) for s in self.specs))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return [o.detach().float().numpy() if o.is_floating_point() else o.numpy() for o in outs]

    def example_feed(self) -> dict:
        import numpy as np

        return {s["name"]: np.zeros([1 if d is None else d for d in s["shape"]], dtype=s["dtype"]) for s in self.specs}


class Generator:
    """Token-by-token text from the artifact's language model (``lm_runtime``), for /v1/generate."""

    def __init__(self, folder: Path, manifest, fmt: str, threads: int | None):
        from edgekit.models.lm_runtime import load_language_model, load_tokenizer

        self.tokenizer = load_tokenizer(folder, manifest)
        self.lm = load_language_model(folder, manifest, fmt, "cpu", threads)

    def check(self, max_tokens: int, temperature: float, top_k: int) -> None:
        from edgekit.models.generation import check_sampling

        try:
            check_sampling(max_tokens, temperature, top_k)
        except EdgekitError as exc:
            raise ValueError(str(exc)) from None

    def stream(self, prompt: str, max_tokens: int, temperature: float, top_k: int, seed: int | None):
        from edgekit.models.generation import iter_tokens

        ids = self.tokenizer.encode(prompt).tolist()
        if not ids:
            raise ValueError("the prompt encodes to no tokens")
        tokens = iter_tokens(self.lm.step, ids, max_tokens, temperature, top_k, self.lm.context, seed)
        return (self.tokenizer.decode([token]) for token in tokens)
