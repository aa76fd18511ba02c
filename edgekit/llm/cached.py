"""A language model that keeps its KV cache between calls, from any artifact that holds one.

``generate``, ``serve`` and ``bench`` run a Llama-family model through one interface whatever
the file: the checkpoint (edgekit's torch module, ``edgekit.llm.models.llama``) or an ExecuTorch
program exported with its cache (``edgekit.llm.program``). ``feed(ids, start)`` runs ``ids`` at
positions ``start, start+1, ...`` (a prompt's prefill, or one decode token) and returns the
next token's float32 logits; what was fed at earlier positions stays in the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from edgekit.core.errors import UsageError
from edgekit.formats.artifacts import CACHED_FAMILY, CHECKPOINT, MANIFEST_NAME, is_cached_family
from edgekit.core.device import select_device
from edgekit.core.fileio import read_json
from edgekit.formats import executorch
from edgekit.formats.executorch import FORMAT
from edgekit.llm.program import load_runtime_kernels
from edgekit.sources.checkpoint import load_model_from_artifact



def program_format() -> str:
    """The format table's name for the programs that carry a KV cache (ExecuTorch's)."""
    return FORMAT.name


@dataclass
class CachedLM:
    """``feed(ids, start) -> logits`` (1-D float32 torch tensor of the token after ``ids``);
    ``feed_all`` the logits of every position fed (or of the positions from ``keep_from`` on)."""

    feed_fn: Callable[[list[int], int], Any]  # -> (T, vocab) float32 logits of the fed positions (see all_positions)
    reset_fn: Callable[[], None]
    context: int  # cache positions: prompt + new tokens never exceed it
    format: str
    precision: str
    path: Path
    max_feed: int  # the most ids one call takes (a program's planned prefill length)
    feed_last_fn: Callable[[list[int], int], Any] | None = None  # -> (vocab,) logits of the last position only
    all_positions: bool = True  # False: feed_fn returns only the last fed position's row, (1, vocab)

    def feed(self, ids: list[int], start: int):
        if self.feed_last_fn is not None:
            self._check(ids, start)
            return self.feed_last_fn(ids, start)
        return self.feed_all(ids, start, keep_from=len(ids) - 1)[-1]

    def _check(self, ids: list[int], start: int) -> None:
        if not ids:
            raise UsageError("nothing to feed the language model (no tokens)")
        if start < 0 or start + len(ids) > self.context:
            raise UsageError(f"{start + len(ids)} tokens do not fit this model's context of {self.context} tokens")

    def feed_all(self, ids: list[int], start: int, keep_from: int = 0):
        """Like ``feed``, but the (T - keep_from, vocab) logits of the fed positions ``keep_from`` on
        (perplexity needs them). A program that returns only the last position's logits is fed
        ``ids[:keep_from + 1]`` at once and every later id in a call of its own."""
        import torch

        self._check(ids, start)
        if not 0 <= keep_from < len(ids):
            raise UsageError(f"keep_from {keep_from} is not a position of the {len(ids)} ids fed")
        at_once = len(ids) if self.all_positions else keep_from + 1
        parts = [self.feed_fn(ids[at:min(at + self.max_feed, at_once)], start + at)  # past max_feed: in slices
                 for at in range(0, at_once, self.max_feed)]
        if self.all_positions:
            rows = parts[0] if len(parts) == 1 else torch.cat(parts)
            return rows[keep_from:]
        rows = [parts[-1][-1:]] + [self.feed_fn([token], start + pos)[-1:]
                                   for pos, token in enumerate(ids[at_once:], at_once)]
        return rows[0] if len(rows) == 1 else torch.cat(rows)

    def reset(self) -> None:
        self.reset_fn()


def is_llm_artifact(source) -> bool:
    """``source`` is an artifact folder (or its manifest) of a model that runs with a KV cache.

    Read without verifying anything: a broken or hostile manifest is the normal route's to report."""
    path = Path(str(source))
    manifest = path if path.name == MANIFEST_NAME else path / MANIFEST_NAME
    try:
        if not manifest.is_file() or manifest.is_symlink():
            return False
        data = read_json(manifest, "manifest")
    except Exception:  # noqa: BLE001 - see above
        return False
    return isinstance(data, dict) and isinstance(data.get("model"), dict) and data["model"].get("name") == CACHED_FAMILY


def torch_cached(model, path: Path, fmt: str = "checkpoint", precision: str = "fp32") -> CachedLM:
    """A ``edgekit.llm.models.llama.Llama`` module (eval mode) as a ``CachedLM``."""
    import torch

    where = next(model.parameters()).device

    def feed(ids: list[int], start: int, last_only: bool = False):
        with torch.inference_mode():
            tokens = torch.tensor([ids], dtype=torch.long, device=where)
            positions = torch.arange(start, start + len(ids), dtype=torch.long, device=where)
            return model.step(tokens, positions, last_only=last_only)[0].float().cpu()

    return CachedLM(feed, model.reset_cache, int(model.max_len), fmt, precision, path, int(model.max_len),
                    feed_last_fn=lambda ids, start: feed(ids, start, last_only=True)[-1])


def program_cached(path: Path, details: dict, threads: int | None = None) -> CachedLM:
    """An ExecuTorch program written by ``edgekit.llm.program`` as a ``CachedLM``: its ``forward``
    is ``(tokens (1, T), input_pos (T,), key_pos (S,)) -> logits`` of the last position, (1, 1,
    vocab) (the manifest's ``"logits": "last position"``), or, made by an older edgekit, of every
    position, (1, T, vocab), and without ``key_pos``; its cache is program state."""
    import torch

    from edgekit.llm.program import LAST_POSITION

    context = int(details["context"])
    max_feed = int(details.get("max_prefill", context))
    loaded: dict = {}

    def load():
        if threads:
            torch.set_num_threads(threads)
        load_runtime_kernels()  # the program calls ExecuTorch's LLM kernels besides XNNPACK
        loaded["method"] = executorch.load_method(path)
        loaded["key_pos"] = loaded["method"].metadata.num_inputs() == 3  # made with the key_pos input

    def feed(ids: list[int], start: int):
        tokens = torch.tensor([ids], dtype=torch.long)
        inputs = (tokens, torch.arange(start, start + len(ids), dtype=torch.long))
        if loaded["key_pos"]:  # the cells filled once these ids are in
            inputs += (torch.arange(start + len(ids), dtype=torch.long),)
        return loaded["method"].execute(inputs)[0][0].float()

    def reset():
        """Nothing to clear: a conversation fed from position 0 overwrites the cache as it goes, and
        the program's attention (``llama::custom_sdpa``, causal from ``start``) never reads a
        position past the last one fed, so what an earlier, longer one left there is unseen."""

    load()
    return CachedLM(feed, reset, context, executorch.FORMAT.name, str(details.get("precision", "fp32")), path, max_feed,
                    all_positions=details.get("logits") != LAST_POSITION)


def open_cached(folder: Path, manifest, fmt: str | None = None, threads: int | None = None,
                device: str = "cpu") -> CachedLM:
    """The artifact's cached language model: its ``.pte`` program or, by default when the artifact
    has one, its checkpoint."""
    if not is_cached_family(manifest):
        raise UsageError(f"{folder} holds {manifest.model.get('name')}, not a model that runs with a KV cache")
    have = manifest.formats()
    program = program_format()
    fmt = fmt or (CHECKPOINT if CHECKPOINT in have else program if program in have else None)
    if fmt not in have or fmt not in (CHECKPOINT, program):
        raise UsageError(f"{folder} has no {fmt or 'checkpoint or executorch'} file for a cached language model "
                         f"(it has: {', '.join(have) or 'none'})")
    entry = manifest.file(fmt)
    path = folder / entry.path
    if fmt == program:
        if device not in ("cpu", "auto"):
            raise UsageError(f"executorch programs run on the CPU here, not {device!r}")
        return program_cached(path, entry.details, threads)
    import torch


    if threads:
        torch.set_num_threads(threads)
    model = load_model_from_artifact(folder, manifest).to(select_device(device)).eval()
    return torch_cached(model, path, CHECKPOINT, entry.precision)
