"""Exercise edgekit's GPU training paths on one CUDA GPU and print throughput for each.

fp32, bf16 (autocast), fp16 (autocast + GradScaler, loss scale shown), torch.compile,
gradient checkpointing (peak memory shown), then a 1-GPU DDP run and a 1-GPU FSDP run with CPU
offload through torchrun. Exits with status 2 and a message when no CUDA device is visible.

    python benchmarks/gpu_check.py                 # about a minute on a modern GPU
    python benchmarks/gpu_check.py --steps 200 --batch-size 128
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL_CONFIG = {"d_model": 256, "n_heads": 8, "n_layers": 6, "max_len": 256}


def run(label: str, steps: int, batch: int, **overrides) -> dict:
    import torch

    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    records = []
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig(model="transformer-lm", model_config=MODEL_CONFIG, batch_size=batch, max_steps=steps,
                             log_every=max(1, steps // 4), eval_every=steps, device="cuda", **overrides)
        _, manifest = train(config, Path(tmp) / "run", progress=records.append)
    steps_ = [r for r in records if r["event"] == "step"]
    timed = steps_[1:] or steps_  # the first window holds compilation / cuDNN autotuning
    result = {
        "label": label,
        "precision": records[0]["precision"],
        "tokens_per_s": sum(r["throughput"] for r in timed) / len(timed),
        "final_loss": steps_[-1]["loss"],
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "wall_s": time.perf_counter() - started,
        "loss_scale": steps_[-1].get("loss_scale"),
        "warnings": [r["message"] for r in records if r["event"] == "warning"],
        "perplexity": manifest.metrics["perplexity"],
    }
    scale = f"  loss scale {result['loss_scale']:g}" if result["loss_scale"] else ""
    print(f"{label:22s} {result['precision']:5s} {result['tokens_per_s']:12,.0f} tokens/s  loss {result['final_loss']:.3f}  "
          f"peak {result['peak_gib']:.2f} GiB  wall {result['wall_s']:.1f}s{scale}", flush=True)
    for message in result["warnings"]:
        print(f"{'':22s} warning: {message}")
    return result


def torchrun(label: str, steps: int, batch: int, *extra: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m", "edgekit",
               "train", "--model", "transformer-lm", *[a for k, v in MODEL_CONFIG.items() for a in ("--set", f"{k}={v}")],
               "--batch-size", str(batch), "--max-steps", str(steps), "--log-every", str(max(1, steps // 4)),
               "--eval-every", str(steps), "--device", "cuda", "--out", str(out), *extra]
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "EDGEKIT_NO_PROGRESS": "1"})
        if proc.returncode != 0:
            print(f"{label:22s} FAILED (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            return
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps_ = [r for r in records if r["event"] == "step"]
    timed = steps_[1:] or steps_
    rate = sum(r["throughput"] for r in timed) / len(timed)
    start = records[0]
    print(f"{label:22s} {start['precision']:5s} {rate:12,.0f} tokens/s  loss {steps_[-1]['loss']:.3f}  "
          f"world {start['world_size']} ({start['strategy']})  wall {time.perf_counter() - started:.1f}s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible (torch.cuda.is_available() is False); "
              "run this on a machine with an NVIDIA GPU and a CUDA build of torch", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, CUDA {torch.version.cuda}; "
          f"transformer-lm {MODEL_CONFIG}, batch {args.batch_size} x {MODEL_CONFIG['max_len']}, {args.steps} steps")
    s, b = args.steps, args.batch_size
    base = run("fp32", s, b, precision="fp32")
    bf16 = run("bf16 autocast", s, b, precision="bf16") if torch.cuda.is_bf16_supported() else None
    run("fp16 + GradScaler", s, b, precision="fp16")
    run("bf16 + compile" if bf16 else "fp16 + compile", s, b, precision="bf16" if bf16 else "fp16", compile=True)
    ckpt = run("grad checkpointing", s, b, precision="fp32", grad_checkpoint=True)
    print(f"{'':22s} grad checkpointing peak memory: {ckpt['peak_gib'] / base['peak_gib']:.2f}x of fp32 without it")
    run("fp32 workers=4", s, b, precision="fp32", workers=4)
    torchrun("DDP, 1 GPU (torchrun)", s, b, "--strategy", "ddp")
    torchrun("FSDP2 + CPU offload", s, b, "--strategy", "fsdp", "--cpu-offload")
    return 0


if __name__ == "__main__":
    sys.exit(main())
