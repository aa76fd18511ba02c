"""Sample text from a trained language model: temperature and top-k, seeded."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import InputFileError, UsageError


@dataclass(frozen=True)
class Generated:
    prompt: str
    text: str  # the continuation only
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


def sample_tokens(model, prompt_ids, max_tokens: int, temperature: float = 1.0, top_k: int = 0,
                  context: int | None = None, seed: int | None = None) -> list[int]:
    """Extend ``prompt_ids`` by ``max_tokens`` ids, re-reading the last ``context`` tokens each step.

    ``temperature`` 0 is greedy; ``top_k`` 0 samples from the whole vocabulary.
    """
    import torch

    check_sampling(max_tokens, temperature, top_k)
    if len(prompt_ids) == 0:
        raise UsageError("the prompt is empty; give at least one character")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device)
    generator.manual_seed(seed if seed is not None else torch.seed())
    ids = list(prompt_ids)
    model.eval()
    with torch.inference_mode():
        for _ in range(max_tokens):
            window = ids[-context:] if context else ids
            logits = model(torch.tensor([window], dtype=torch.long, device=device))[0, -1].float()
            if temperature == 0:
                ids.append(int(logits.argmax()))
                continue
            logits = logits / temperature
            if top_k:
                kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            ids.append(int(torch.multinomial(probs, 1, generator=generator)))
    return ids[len(prompt_ids):]


def check_sampling(max_tokens: int, temperature: float, top_k: int) -> None:
    if max_tokens < 1:
        raise UsageError(f"max_tokens must be >= 1, got {max_tokens}")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise UsageError(f"temperature must be >= 0 and finite, got {temperature}")
    if top_k < 0:
        raise UsageError(f"top_k must be >= 0 (0: no limit), got {top_k}")


def generate_text(artifact: str | Path, prompt: str, max_tokens: int = 100, temperature: float = 0.8,
                  top_k: int = 20, seed: int | None = None, device: str = "cpu") -> Generated:
    """Continue ``prompt`` with the language model in a checkpoint artifact."""
    import time

    from edgekit.artifacts import load_manifest
    from edgekit.data.tokenizer import Tokenizer
    from edgekit.train.checkpoint import load_checkpoint, load_model_from_artifact
    from edgekit.train.distributed import select_device

    check_sampling(max_tokens, temperature, top_k)  # before anything is loaded
    folder, manifest = load_manifest(artifact)
    if manifest.task.get("type") != "language-modeling":
        raise UsageError(
            f"{folder} holds a {manifest.task.get('type', 'unknown')} model ({manifest.model['name']}); "
            "generate needs a language model such as transformer-lm or lstm-lm"
        )
    _, meta = load_checkpoint(folder / manifest.file("checkpoint").path)
    if "tokenizer" not in meta:
        raise InputFileError(f"checkpoint in {folder} carries no tokenizer")
    tokenizer = Tokenizer.from_dict(meta["tokenizer"])
    model = load_model_from_artifact(folder, manifest).to(select_device(device))
    context = manifest.model.get("config", {}).get("max_len")
    started = time.perf_counter()
    new = sample_tokens(model, tokenizer.encode(prompt).tolist(), max_tokens, temperature, top_k, context, seed)
    return Generated(prompt, tokenizer.decode(new), len(new), time.perf_counter() - started)
