"""Tokens per second of language models: greedy generation, timed in interleaved rounds.

The runner times one forward call at the bench's input shape; what a text generator's user feels
is the rate of new tokens, one forward pass over the (growing) context per token. For every
language-model artifact among the benchmarked models, this generates ``tokens`` tokens greedily
after a fixed ``prompt_tokens``-token prompt through ``edgekit.llm.lm_runtime`` (the same
ONNX Runtime / TorchScript file the runner timed), ``rounds`` times, models taking turns so
machine drift hits all alike, and reports the median rate.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from edgekit import formats
from edgekit.formats.artifacts import load_manifest
from edgekit.llm.lm_runtime import load_language_model

GEN_TOKENS = 32
PROMPT_TOKENS = 16
ROUNDS = 5


def generation_rate_note(tokens: int, prompt_tokens: int, rounds: int) -> str:
    return (f"tokens/s: greedy generation of {tokens} tokens after a {prompt_tokens}-token prompt, one forward pass "
            f"per token over the context (up to the model's max_len), median of {rounds} interleaved rounds, "
            "timed in the bench process")


def with_generation_rates(models, results: list, threads: int, tokens: int = GEN_TOKENS,
                          prompt_tokens: int = PROMPT_TOKENS, rounds: int = ROUNDS) -> list:
    """``results`` with ``tokens_per_s`` filled in for the language models among ``models``."""
    steps = {i: step for i, m in enumerate(models) if (step := _language_model(m, threads)) is not None}
    if not steps:
        return results
    rates: dict[int, list[float]] = {i: [] for i in steps}
    for i, step in steps.items():  # one untimed round each: first-call costs stay out
        _generate(step, tokens=2, prompt_tokens=prompt_tokens)
    for _ in range(rounds):
        for i, step in steps.items():
            seconds = _generate(step, tokens, prompt_tokens)
            rates[i].append(tokens / max(seconds, 1e-9))
    note = generation_rate_note(tokens, prompt_tokens, rounds)
    return [replace(r, tokens_per_s=statistics.median(rates[i]), notes=r.notes + (note,)) if i in rates else r
            for i, r in enumerate(results)]


def _language_model(model, threads: int):
    """(step, context) of a benchmarked model that is a language model in an artifact, else None."""
    if model.entry is None or model.format not in formats.names():
        return None

    folder, manifest = load_manifest(model.path.parent, verify=False)
    if manifest.task.get("type") != "language-modeling":
        return None
    lm = load_language_model(folder, manifest, model.format, "cpu", threads)
    return lm.step, lm.context


def _generate(step_context, tokens: int, prompt_tokens: int) -> float:
    step, context = step_context
    ids = [2 + i % 50 for i in range(prompt_tokens)]
    started = time.perf_counter()
    for _ in range(tokens):
        window = ids[-context:] if context else ids
        ids.append(int(step(window).argmax()))
    return time.perf_counter() - started
