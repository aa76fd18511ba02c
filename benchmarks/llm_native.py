"""A language model's ``.pte`` on ``edgekit-run`` (C++, no Python) against ExecuTorch's Python runtime, side by side.

For each artifact given (made by ``edgekit quantize/export`` of a GGUF model with ``--kernels
portable``), alternating A B A B in fresh processes, one thread, the same prompt ids (the first
``--prompt-tokens`` ids of the held-out text, edgekit.llm.quality) and greedy decoding:

- ``edgekit-run generate`` built for this host (the runner a board bundle ships, for this CPU);
- the Python runtime, through edgekit bench's own worker (``python -m edgekit.llm.bench``).

Prints time to first token, decode tokens/s and peak RSS (VmHWM) per side, medians over
``--repeats``, and native/Python ratios from this same run, and whether both sides decoded the
same ids.

    .venv/bin/python benchmarks/llm_native.py runs/smollm2-int4 [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def _prompt(folder: Path, n: int) -> list[int]:
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.quality import heldout_text
    from edgekit.llm.lm_runtime import load_llm_text

    folder, manifest = load_manifest(folder)
    return load_llm_text(folder, manifest).tokenizer.encode(heldout_text()[0], add_special_tokens=False).ids[:n]


def _native(runner: Path, folder: Path, context: int, prompt: list[int], new: int) -> dict:
    done = subprocess.run([str(runner), "generate", str(folder / "model.pte"), "--prompt-ids", ",".join(map(str, prompt)),
                           "--context", str(context), "--max-new-tokens", str(new), "--threads", "1"],
                          capture_output=True, text=True, timeout=1800, check=True)
    doc = json.loads(done.stdout.splitlines()[0])
    return {"ttft_ms": doc["ttft_ms"], "decode_tps": doc["decode_tokens_per_s"], "peak_rss_mb": doc["peak_rss_mb"],
            "tokens": doc["tokens"]}


def _python(folder: Path, prompt_tokens: int, new: int) -> dict:
    request = {"folder": str(folder), "format": "executorch", "threads": 1, "prompt_tokens": prompt_tokens,
               "new_tokens": new}
    done = subprocess.run([sys.executable, "-m", "edgekit.llm.bench", json.dumps(request)], capture_output=True,
                          text=True, timeout=1800, check=True)
    doc = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    return {"ttft_ms": doc["ttft_ms"], "decode_tps": doc["decode_tps"], "peak_rss_mb": doc["peak_rss_mb"]}


def _python_tokens(folder: Path, prompt: list[int], new: int) -> list[int]:
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.cached import open_cached
    from edgekit.llm.generation import generate_cached

    folder, manifest = load_manifest(folder)
    return list(generate_cached(open_cached(folder, manifest, "executorch", 1), prompt, new, stop_ids=()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from edgekit.formats.artifacts import load_manifest
    from edgekit.native.build import build_runner
    from edgekit.native.toolchain import host_arch

    runner = build_runner(host_arch()).binary
    report = {}
    for folder in args.artifacts:
        _, manifest = load_manifest(folder)
        details = manifest.file("executorch").details
        context = int(details["context"])
        prompt = _prompt(folder, args.prompt_tokens)
        runs = {"native": [], "python": []}
        for _ in range(args.repeats):
            runs["native"].append(_native(runner, folder, context, prompt, args.new_tokens))
            runs["python"].append(_python(folder, len(prompt), args.new_tokens))
        same = runs["native"][0]["tokens"] == _python_tokens(folder, prompt, args.new_tokens)
        med = {side: {key: statistics.median(r[key] for r in rs) for key in ("ttft_ms", "decode_tps", "peak_rss_mb")}
               for side, rs in runs.items()}
        ratio = {key: med["native"][key] / med["python"][key] for key in med["native"]}
        report[str(folder)] = {"kernels": details.get("kernels"), "precision": details.get("precision"),
                               "median": med, "native_over_python": ratio, "same_ids": same,
                               "prompt_tokens": len(prompt), "new_tokens": args.new_tokens, "repeats": args.repeats}
        print(f"{folder} ({details.get('precision')}, kernels {details.get('kernels')}), {len(prompt)}-token prompt, "
              f"{args.new_tokens} new tokens, 1 thread, medians of {args.repeats} A B rounds:")
        for side in ("native", "python"):
            m = med[side]
            print(f"  {side:7s} TTFT {m['ttft_ms']:8.1f} ms  decode {m['decode_tps']:6.1f} tok/s  "
                  f"peak RSS {m['peak_rss_mb']:6.1f} MiB")
        print(f"  native/python: TTFT {ratio['ttft_ms']:.2f}x  decode {ratio['decode_tps']:.2f}x  "
              f"peak RSS {ratio['peak_rss_mb']:.2f}x  same greedy ids: {same}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
