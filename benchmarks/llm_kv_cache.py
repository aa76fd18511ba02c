"""Greedy decode with the KV cache vs recomputing the whole window each token (issue 22).

SmolLM2-135M-Instruct from its GGUF (``gguf:smollm2-135m``, built in memory as edgekit's float
``Llama``), one thread, the same 32-token prompt, 64 new tokens, run interleaved A B A B so drift
on a shared host hits both alike:

- A: ``generate_cached`` through ``CachedLM`` (prefill once, one ``model.step`` per token);
- B: ``iter_tokens`` over ``model(window)``, the plain forward, every position recomputed.

Both must produce the same ids (the cache changes nothing but the time). Prints tokens/s of
each round, the medians, and the ratio A/B.

    .venv/bin/python benchmarks/llm_kv_cache.py [--new-tokens 64] [--rounds 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="gguf:smollm2-135m")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch

    from edgekit.llm.cached import torch_cached
    from edgekit.llm.generation import generate_cached, iter_tokens
    from edgekit.llm.gguf.importer import build_model, open_gguf

    torch.set_num_threads(args.threads)
    opened = open_gguf(args.source, context=args.prompt_tokens + args.new_tokens)
    model = build_model(opened)
    text = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
            "combined movable metal type, oil-based ink and a wooden press into a system that could")
    prompt = opened.tokenizer.encode(text, add_special_tokens=False).ids
    if len(prompt) < args.prompt_tokens:
        raise SystemExit(f"the prompt text has only {len(prompt)} tokens")
    prompt = prompt[:args.prompt_tokens]
    lm = torch_cached(model, opened.gguf.path)

    def cached():
        return list(generate_cached(lm, prompt, args.new_tokens, temperature=0.0))

    def recompute():
        def step(window):
            with torch.inference_mode():
                return model(torch.tensor([window]))[0, -1]

        return list(iter_tokens(step, prompt, args.new_tokens, temperature=0.0))

    runs: dict[str, list[float]] = {"kv_cache": [], "recompute": []}
    outputs = {}
    for _ in range(args.rounds):
        for name, run in (("kv_cache", cached), ("recompute", recompute)):
            started = time.perf_counter()
            outputs[name] = run()
            runs[name].append(args.new_tokens / (time.perf_counter() - started))
    if outputs["kv_cache"] != outputs["recompute"]:
        raise SystemExit("the cached and recomputed greedy ids differ")
    medians = {name: statistics.median(values) for name, values in runs.items()}
    result = {"model": args.source, "threads": args.threads, "prompt_tokens": len(prompt), "new_tokens": args.new_tokens,
              "rounds": args.rounds, "tokens_per_s": runs, "median_tokens_per_s": medians,
              "ratio_kv_cache_over_recompute": medians["kv_cache"] / medians["recompute"], "same_ids": True}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, values in runs.items():
        print(f"{name:10s} " + "  ".join(f"{v:6.2f}" for v in values) + f"   median {medians[name]:6.2f} tokens/s")
    print(f"KV cache / recompute: {result['ratio_kv_cache_over_recompute']:.2f}x "
          f"({len(prompt)}-token prompt, {args.new_tokens} new tokens, {args.threads} thread, same greedy ids)")


if __name__ == "__main__":
    main()
