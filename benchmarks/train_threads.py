"""Default training threads: each zoo model trained with 1 thread and with every core, side by side.

Every run is a fresh process (torch's thread pools are per process) training the model for a
fixed number of optimizer steps with ``edgekit.train.loop.train``; runs alternate between the
thread counts (1, N, 1, N, ...) so machine drift hits both alike. Prints the wall time of each
run and, per model, the median ratio time(N threads) / time(1 thread): above 1, more threads
cost more than they give, and ``edgekit train``'s default (``edgekit.train.threads``) should
pick fewer threads for that model.

    python benchmarks/train_threads.py                           # the CPU-sized zoo models
    python benchmarks/train_threads.py --models digits-cnn --rounds 5 --steps 60
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, tempfile
from pathlib import Path
from edgekit.train.config import TrainConfig
from edgekit.train.loop import train
model, steps, threads, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
marks = []
def progress(r):
    if r["event"] == "step":
        marks.append((r["step"], time.perf_counter()))
with tempfile.TemporaryDirectory() as tmp:
    cfg = TrainConfig(model=model, max_steps=steps, epochs=1000, threads=threads, batch_size=batch,
                      log_every=1, eval_every=10**6, device="cpu", seed=0)
    train(cfg, Path(tmp) / "run", progress=progress)
# time the steps after the first fifth (data loading and the first steps' allocations excluded)
first = next(m for m in marks if m[0] >= steps // 5)
print(json.dumps({"s_per_step": (marks[-1][1] - first[1]) / (marks[-1][0] - first[0])}))
"""


def run(model: str, steps: int, threads: int, batch: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_CPP_LOG_LEVEL": "ERROR"}
    out = subprocess.run([sys.executable, "-c", CHILD, model, str(steps), str(threads), str(batch)],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["s_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="digits-cnn,digits-mobilenet,transformer-classifier")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"{cores} logical cores; {args.steps} steps per run, batch {args.batch_size}, {args.rounds} rounds")
    for model in args.models.split(","):
        ratios = []
        for r in range(args.rounds):
            one = run(model, args.steps, 1, args.batch_size)
            many = run(model, args.steps, cores, args.batch_size)
            ratios.append(many / one)
            print(f"{model:24s} round {r + 1}: 1 thread {one * 1e3:7.1f} ms/step, {cores} threads "
                  f"{many * 1e3:7.1f} ms/step, ratio {many / one:.2f}", flush=True)
        print(f"{model:24s} median time({cores} threads) / time(1 thread) = {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
