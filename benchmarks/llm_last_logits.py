"""Peak memory of a prompt's prefill through the checkpoint when generation computes only the last
position's logits (``CachedLM.feed``) against every position's (``feed_all``, what it did before).

Each side runs in its own process (A B A B), loads the artifact, resets its peak-RSS mark (the load
peaks at ~2.8x the float weights, higher than any prefill here), feeds one prompt of N ids and
reports the peak RSS during the prefill (VmHWM). Prints the ratio last-only / every-position per
round.

    .venv/bin/python benchmarks/llm_last_logits.py runs/gemma3 --prompt-tokens 512 --rounds 2

(``runs/gemma3``: ``edgekit import gguf:gemma3-270m --out runs/gemma3``; its vocabulary of 262,144
makes every position's logits 1 MiB.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = """
import json, sys, time, torch
from pathlib import Path
from edgekit.formats.artifacts import load_manifest
from edgekit.llm.cached import open_cached
folder, mode, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
lm = open_cached(*load_manifest(folder), fmt="checkpoint", threads=1)
ids = [(i * 7919) % 5000 + 100 for i in range(n)]
open("/proc/self/clear_refs", "w").write("5")  # the peak from here on: the prefill's, not the load's
start = time.perf_counter()
logits = lm.feed(ids, 0) if mode == "last" else lm.feed_all(ids, 0)[-1]
elapsed = time.perf_counter() - start
peak = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) * 1024
print(json.dumps({"peak": peak, "s": elapsed, "top": int(logits.argmax())}))
"""


def run(folder: str, mode: str, tokens: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, folder, mode, str(tokens)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifact")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"{args.artifact}, prompt of {args.prompt_tokens} ids, 1 thread; {time.strftime('%Y-%m-%d %H:%M')}")
    for r in range(args.rounds):
        every = run(args.artifact, "every", args.prompt_tokens)
        last = run(args.artifact, "last", args.prompt_tokens)
        assert every["top"] == last["top"], "both must give the same next token"
        print(f"round {r + 1}: peak RSS last-only {last['peak'] / 2**20:,.0f} MiB, every position "
              f"{every['peak'] / 2**20:,.0f} MiB: ratio {last['peak'] / every['peak']:.3f}; prefill "
              f"{last['s']:.2f} s vs {every['s']:.2f} s: ratio {last['s'] / every['s']:.3f}")


if __name__ == "__main__":
    main()
