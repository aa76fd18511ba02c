"""edgekit's training loop vs a minimal hand-written PyTorch loop: same model, data, batch size.

Runs alternate (edgekit, hand, edgekit, hand, ...) so both see the same machine, and each run
times only the steps after a warm-up window. Two clocks: wall time, and this process's CPU time
(``time.process_time``), which other programs on a busy machine cannot inflate; with one
intra-op thread (the default here) CPU time is the cleaner measure of loop overhead. Prints
units/s per round and the median ratio edgekit / hand for both clocks (goal: >= 0.95).

    python benchmarks/train_throughput.py                      # digits-cnn and transformer-lm, CPU
    python benchmarks/train_throughput.py --model transformer-lm --threads 0 --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRESETS = {
    # model -> (model_config, batch_size)
    "digits-cnn": ({}, 64),
    "transformer-lm": ({"d_model": 64, "n_layers": 2, "dropout": 0.0}, 16),
    "lstm-lm": ({"hidden_size": 128, "dropout": 0.0}, 16),
}


def edgekit_run(model: str, steps: int, warmup: int, device: str) -> tuple[float, float]:
    """(units per wall second, units per CPU second) over steps warmup+1..steps."""
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    config, batch = PRESETS[model]
    marks = []  # (step, wall, cpu, throughput) at each progress record

    def progress(record):
        if record["event"] == "step":
            marks.append((record["step"], time.perf_counter(), time.process_time(), record["throughput"]))

    with tempfile.TemporaryDirectory() as tmp:
        train(
            TrainConfig(
                model=model,
                model_config=config,
                batch_size=batch,
                max_steps=steps,
                log_every=warmup,
                eval_every=steps,
                save_every=steps,
                warmup_steps=0,
                device=device,
                precision="fp32",
            ),
            Path(tmp) / "run",
            progress=progress,
        )
    first = next(i for i, m in enumerate(marks) if m[0] == warmup)
    timed = marks[first:]
    units = sum(rate * (now[1] - before[1]) for before, now in zip(timed, timed[1:]) for rate in [now[3]])
    return units / (timed[-1][1] - timed[0][1]), units / (timed[-1][2] - timed[0][2])


def hand_run(model: str, steps: int, warmup: int, device: str) -> tuple[float, float]:
    """The loop an engineer would write in five minutes: shuffle, slice, forward, backward, step."""
    import torch
    import torch.nn.functional as F

    from edgekit.models import build_model, get_spec
    from edgekit.train.config import TrainConfig
    from edgekit.train.tasks import task_for

    config, batch = PRESETS[model]
    spec = get_spec(model)
    task = task_for(spec)
    data = task.prepare(TrainConfig(model=model), spec.config(config))
    dev = torch.device(device)
    torch.manual_seed(0)
    net = build_model(model, spec.config({**config, **data.model_config})).to(dev)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    order = torch.randperm(len(data.train))
    lm = spec.task["type"] == "language-modeling"
    units, started, cpu = 0, None, None
    for step in range(steps):
        if step == warmup:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            units, started, cpu = 0, time.perf_counter(), time.process_time()
        ids = order[(step * batch) % (len(order) - batch) :][:batch].tolist()
        b = data.train[ids]
        x, y = b["inputs"].to(dev), b["targets"].to(dev)
        if lm:
            kwargs = {"lengths": b["lengths"]} if "lengths" in net.forward.__code__.co_varnames else {}
            loss = F.cross_entropy(net(x, **kwargs).flatten(0, 1), y.flatten(), ignore_index=-100)
            units += int(b["lengths"].sum())
        else:
            loss = F.cross_entropy(net(x), y)
            units += len(y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()  # a real loop reads the loss
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return units / (time.perf_counter() - started), units / (time.process_time() - cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=sorted(PRESETS))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.steps % args.warmup:
        parser.error("--steps must be a multiple of --warmup (the loop logs every --warmup steps)")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, "
          f"{args.steps} steps ({args.warmup} warm-up), {args.rounds} alternating rounds")
    for model in args.model or ["digits-cnn", "transformer-lm"]:
        wall, cpu = [], []
        unit = "tokens" if "lm" in model else "samples"
        for round_ in range(1, args.rounds + 1):
            ek_wall, ek_cpu = edgekit_run(model, args.steps, args.warmup, args.device)
            hand_wall, hand_cpu = hand_run(model, args.steps, args.warmup, args.device)
            wall.append(ek_wall / hand_wall)
            cpu.append(ek_cpu / hand_cpu)
            print(f"{model:15s} round {round_}: {unit}/s  edgekit {ek_wall:9.0f} wall {ek_cpu:9.0f} cpu   "
                  f"hand {hand_wall:9.0f} wall {hand_cpu:9.0f} cpu   ratio wall {wall[-1]:.3f} cpu {cpu[-1]:.3f}")
        print(f"{model:15s} median ratio edgekit/hand: CPU time {statistics.median(cpu):.3f}, "
              f"wall time {statistics.median(wall):.3f} (goal >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
