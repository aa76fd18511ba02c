"""What ``edgekit serve`` serves: an artifact, a model file in one, or a bundle folder, as a model
object for ``edgekit.serve.app.create_app``: a file of the format table through the board's runtime
for its format (``edgekit.board.served``, what a bundle's serve.py runs), a checkpoint through
torch; language models also get a generator for ``/v1/generate``."""

from __future__ import annotations

import importlib
from pathlib import Path

from edgekit.formats.artifacts import CHECKPOINT, load_manifest, model_file_for, is_cached_family
from edgekit.core.errors import EdgekitError, InputFileError, UsageError
from edgekit import formats
from edgekit.board.errors import BoardError, first_line
from edgekit.board.served import ServedModel
from edgekit.core.children import popen_kwargs
from edgekit.llm.generation import check_sampling, iter_tokens
from edgekit.llm.lm_runtime import load_language_model, load_tokenizer
from edgekit.serve import startup_probe
from edgekit.sources.checkpoint import load_model_from_artifact


def load_served_model(path: str | Path, fmt: str | None = None, threads: int | None = None):
    """The model in ``path``; ``fmt`` (a format name) picks a file when an artifact holds several.

    This loads the file in this process: a server first calls ``probe_served_model``, so that a
    file that crashes its runtime takes down a child process, not the server."""

    folder, manifest, entry = served_entry(path, fmt)

    if is_cached_family(manifest):  # a pretrained LLM (edgekit import gguf:...): text through its KV cache
        from edgekit.llm.serving import ServedLLM

        return ServedLLM(folder, manifest, entry, threads)
    if entry.format == CHECKPOINT:
        model = CheckpointModel(folder, manifest, entry, threads)
    else:
        model = open_table_format(folder, manifest, entry, threads)
    _bound_axes(model.specs, manifest, entry)
    if manifest.task.get("type") == "language-modeling":
        vocab = manifest.model.get("config", {}).get("vocab_size")
        for spec in model.specs:  # token ids past the vocabulary are a 422, not a runtime failure
            if vocab and spec["dtype"].startswith("int") and spec["value_range"] is None:
                spec["value_range"] = (0.0, float(vocab))
        model.generator = Generator(folder, manifest, entry.format, threads)
    return model


def _bound_axes(specs: list[dict], manifest, entry) -> None:
    """Give the dynamic axes past the batch axis the longest size the model takes (a 422 past it,
    not a runtime failure): a language model's context (``max_len``), a program's planned shapes."""
    planned = (entry.details or {}).get("max_shapes") or {}
    context = manifest.model.get("config", {}).get("max_len") if manifest.task.get("type") == "language-modeling" else None
    for spec in specs:
        for axis, name in spec["dynamic_axes"].items():
            bounds = [int(b) for b in (planned.get(name), context) if isinstance(b, int) and not isinstance(b, bool) and b > 0]
            if axis > 0 and bounds:
                spec.setdefault("max_sizes", {})[axis] = min(bounds)


def probe_served_model(path: str | Path, fmt: str | None = None, timeout_s: float | None = None) -> dict:
    """Load and run the model once in a child process (``startup_probe``), before this process does:
    a file that crashes the runtime is a one-line InputFileError (exit 2); the child's report otherwise."""
    folder, _, entry = served_entry(path, fmt)
    what = str(folder / entry.path)
    try:
        return startup_probe.probe("loader:open_for_probe", [str(path), entry.format], what,
                                   timeout_s=timeout_s or startup_probe.PROBE_TIMEOUT_S, popen_kwargs=popen_kwargs(),
                                   meanwhile=lambda: _import_runtime(entry.format))
    except startup_probe.ProbeFailed as exc:
        raise (InputFileError if exc.exit_code == 2 else EdgekitError)(str(exc)) from None


def open_for_probe(path: str, fmt: str):
    """In the probe's child: the served model, one thread (``startup_probe`` runs its warm-up call)."""
    return load_served_model(path, fmt, threads=1)


def _import_runtime(fmt: str) -> None:
    """Import what the in-process load will need while the probe's child works (best effort: a
    missing module is the load's to report)."""
    if fmt in formats.names():
        table = formats.get(fmt)
        names = [table.board.runtime, *(n for n in table.board.requirements if n == "torch")]
    else:  # a checkpoint: torch
        names = ["torch"]
    for name in ["edgekit.serve.app", "uvicorn", *names]:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - ImportError, or a runtime that fails to import: the load says it
            pass


def served_entry(path: str | Path, fmt: str | None = None):
    """(folder, manifest, file entry) of the model ``path`` names: an artifact folder (``fmt`` picks a
    file when it holds several), a model file in one, or a bundle folder."""
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
    return folder, manifest, entry


def open_table_format(folder: Path, manifest, entry, threads: int | None):
    """A model file of the format table, through the board's runtime for its format (the code a
    bundle's serve.py runs too), with edgekit's one-line errors."""
    from edgekit.serve.inputs import spec_from_dict

    spec = formats.get(entry.format)
    spec.require()  # one line naming the extra when the runtime is not installed here
    engine = (entry.details or {}).get("quantized_engine") if spec.quantization.packed_engine else None
    if engine:
        import torch

        engine = engine if engine in torch.backends.quantized.supported_engines else None
    try:
        return ServedModel.open(folder / entry.path, manifest.to_dict(), entry.format, threads, spec_from_dict, engine)
    except BoardError as exc:
        raise InputFileError(f"{folder / entry.path} cannot be served: {first_line(exc)[:300]}") from None
    except ValueError as exc:  # a manifest input the server cannot take (spec_from_dict)
        raise InputFileError(f"{folder / entry.path} cannot be served: {first_line(exc)[:300]}") from None


class CheckpointModel:
    """A checkpoint's torch module (not a board format: the float model as trained), called with numpy arrays."""

    def __init__(self, folder: Path, manifest, entry, threads: int | None):
        import torch

        from edgekit.serve.inputs import spec_from_dict

        if threads:
            torch.set_num_threads(threads)
        self.module = load_model_from_artifact(folder, manifest)
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
        self.tokenizer = load_tokenizer(folder, manifest)
        self.lm = load_language_model(folder, manifest, fmt, "cpu", threads)

    def check(self, max_tokens: int, temperature: float, top_k: int) -> None:
        try:
            check_sampling(max_tokens, temperature, top_k)
        except EdgekitError as exc:
            raise ValueError(str(exc)) from None

    def stream(self, prompt: str, max_tokens: int, temperature: float, top_k: int, seed: int | None):
        ids = self.tokenizer.encode(prompt).tolist()
        if not ids:
            raise ValueError("the prompt encodes to no tokens")
        tokens = iter_tokens(self.lm.step, ids, max_tokens, temperature, top_k, self.lm.context, seed)
        return (self.tokenizer.decode([token]) for token in tokens)
