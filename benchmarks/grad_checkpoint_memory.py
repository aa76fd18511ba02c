"""Peak memory of Transformer training steps with and without gradient checkpointing.

Each measurement runs in a fresh subprocess (so one run's allocations cannot hide the other's
peak): build the model and a batch, note the peak RSS so far (the baseline), run two training
steps, note the peak RSS again. The difference is what the steps needed: weights' gradients,
optimizer state and, above all, the activations kept for backward, which checkpointing trades
for recomputation. On CUDA the same is read from ``torch.cuda.max_memory_allocated``.

    python benchmarks/grad_checkpoint_memory.py
    python benchmarks/grad_checkpoint_memory.py --layers 12 --seq-len 256 --device cuda
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def child(args) -> None:
    import torch
    import torch.nn.functional as F

    from edgekit.models import build_model

    device = torch.device(args.device)
    config = {"vocab_size": 128, "d_model": args.d_model, "n_heads": 4, "n_layers": args.layers,
              "max_len": args.seq_len, "dropout": 0.0}
    torch.manual_seed(0)
    model = build_model("transformer-lm", config).to(device)
    model.set_grad_checkpointing(bool(args.child_checkpoint))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 128, (args.batch, args.seq_len), device=device)
    # Allocate the optimizer state up front so the baseline holds everything except activations.
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.perf_counter()
    for _ in range(2):
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), x.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"base": base, "peak": peak, "seconds": time.perf_counter() - started}))


def measure(args, checkpoint: bool) -> dict:
    cmd = [sys.executable, __file__, "--child-checkpoint", str(int(checkpoint)), "--device", args.device,
           "--layers", str(args.layers), "--d-model", str(args.d_model), "--seq-len", str(args.seq_len),
           "--batch", str(args.batch)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child-checkpoint", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_checkpoint is not None:
        child(args)
        return 0

    what = "GPU allocated" if args.device.startswith("cuda") else "peak RSS"
    print(f"transformer-lm: {args.layers} layers, d_model {args.d_model}, batch {args.batch} x {args.seq_len} tokens, "
          f"{args.device}; memory = {what} during 2 training steps above the pre-step baseline")
    results = {False: [], True: []}
    for round_ in range(args.rounds):
        for checkpoint in (False, True):
            r = measure(args, checkpoint)
            results[checkpoint].append(r)
            print(f"round {round_ + 1}  grad checkpoint {'on ' if checkpoint else 'off'}: "
                  f"step memory {(r['peak'] - r['base']) / 2**20:8.1f} MiB   (peak {r['peak'] / 2**20:8.1f} MiB, "
                  f"{r['seconds'] / 2:.2f} s/step)")
    off = min(r["peak"] - r["base"] for r in results[False])
    on = min(r["peak"] - r["base"] for r in results[True])
    t_off = min(r["seconds"] for r in results[False])
    t_on = min(r["seconds"] for r in results[True])
    print(f"step memory with / without checkpointing = {on / off:.3f}   (time per step ratio {t_on / t_off:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
