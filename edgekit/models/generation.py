"""Sample text from a trained language model: temperature and top-k, seeded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import UsageError


@dataclass(frozen=True)
class Generated:
    prompt: str
    text: str  # the continuation only
    tokens: int
    seconds: float
    threads: int | None = None  # CPU threads the model ran on (edgekit.threads.resolve_threads)
    notes: tuple[str, ...] = ()

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


def sample_tokens(model, prompt_ids, max_tokens: int, temperature: float = 1.0, top_k: int = 0,
                  context: int | None = None, seed: int | None = None) -> list[int]:
    """Extend ``prompt_ids`` by ``max_tokens`` ids, re-reading the last ``context`` tokens each step.

    ``temperature`` 0 is greedy; ``top_k`` 0 samples from the whole vocabulary.
    """
    import torch

    device = next(model.parameters()).device
    model.eval()

    def step(window: list[int]):
        with torch.inference_mode():
            return model(torch.tensor([window], dtype=torch.long, device=device))[0, -1].float()

    return list(iter_tokens(step, prompt_ids, max_tokens, temperature, top_k, context, seed))


def iter_tokens(step, prompt_ids, max_tokens: int, temperature: float = 1.0, top_k: int = 0,
                context: int | None = None, seed: int | None = None):
    """Yield ``max_tokens`` new ids one at a time; ``step(window)`` gives the next token's logits.

    ``step`` may be any runtime (torch module, TorchScript, ONNX Runtime: see
    ``edgekit.models.lm_runtime``); it returns a 1-D float torch tensor.
    """
    import torch

    check_sampling(max_tokens, temperature, top_k)
    if len(prompt_ids) == 0:
        raise UsageError("the prompt is empty; give at least one character")
    generator = torch.Generator()
    generator.manual_seed(seed if seed is not None else torch.seed())
    ids = [int(i) for i in prompt_ids]
    for _ in range(max_tokens):
        window = ids[-context:] if context else ids
        logits = step(window).float().cpu()
        if temperature == 0:
            ids.append(int(logits.argmax()))
        else:
            logits = logits / temperature
            if top_k:
                kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            ids.append(int(torch.multinomial(probs, 1, generator=generator)))
        yield ids[-1]


def check_sampling(max_tokens: int, temperature: float, top_k: int) -> None:
    from edgekit.bounds import check_sampling as check

    check(max_tokens, temperature, top_k)


def generate_text(artifact: str | Path, prompt: str, max_tokens: int = 100, temperature: float = 0.8,
                  top_k: int = 20, seed: int | None = None, device: str = "cpu", fmt: str | None = None,
                  threads: int | None = None) -> Generated:
    """Continue ``prompt`` with the language model in an artifact: a checkpoint, or a quantized or
    exported one (any format in ``edgekit.formats``; ``fmt`` picks the file, default as in ``lm_runtime.format_order``).

    ``threads``: CPU threads, by the rule ``edgekit bench`` follows (``edgekit.threads``): explicit
    wins, else the artifact's target's count, else all cores, never every core of this host. A
    token is one small forward pass: torch's default of every core spin-waits between them (a
    transformer-lm on 2 cores: 12-14 tokens/s on both, 456 on one)."""
    import time

    from edgekit.artifacts import load_manifest
    from edgekit.bounds import check_threads
    from edgekit.models.lm_runtime import check_language_model, load_language_model, load_tokenizer
    from edgekit.threads import resolve_threads, target_of

    check_sampling(max_tokens, temperature, top_k)  # before anything is loaded
    check_threads(threads, "--threads")
    folder, manifest = load_manifest(artifact)
    check_language_model(folder, manifest)
    tokenizer = load_tokenizer(folder, manifest)
    threads, notes = resolve_threads(threads, target_of(manifest))
    lm = load_language_model(folder, manifest, fmt, device, threads)
    started = time.perf_counter()
    new = list(iter_tokens(lm.step, tokenizer.encode(prompt).tolist(), max_tokens, temperature, top_k, lm.context, seed))
    return Generated(prompt, tokenizer.decode(new), len(new), time.perf_counter() - started, threads, tuple(notes))
