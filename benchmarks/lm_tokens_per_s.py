"""Language models end to end: tokens/s of greedy generation, fp32 vs dynamic int8, for lstm-lm and
transformer-lm; and how often int8 picks the same next token as fp32.

For each model: train briefly (zoo defaults), export fp32 ONNX + TorchScript, quantize
``--method dynamic`` (ONNX + TorchScript), then one interleaved ``edgekit.bench`` session over the
four files (1 thread): its ``tokens_per_s`` is greedy generation of ``--tokens`` tokens after a
16-token prompt (median of interleaved rounds), beside the runner's forward-call p50. Agreement
is teacher-forced: both models read fp32's greedy text and we count equal next-token picks.

    .venv/bin/python benchmarks/lm_tokens_per_s.py [--steps 200] [--tokens 64] [--target x86-64]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def agreement(folder_a, folder_b, fmt_b: str, prompt: str, tokens: int) -> float:
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.lm_runtime import load_language_model, load_tokenizer

    fa, ma = load_manifest(folder_a)
    fb, mb = load_manifest(folder_b)
    ref = load_language_model(fa, ma, "checkpoint", threads=1)
    cand = load_language_model(fb, mb, fmt_b, threads=1)
    ids = load_tokenizer(fa, ma).encode(prompt).tolist()
    same = 0
    for _ in range(tokens):
        window = ids[-ref.context:] if ref.context else ids
        want = int(ref.step(window).argmax())
        same += int(cand.step(window).argmax()) == want
        ids.append(want)
    return same / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--min-time", type=float, default=2.0)
    parser.add_argument("--target", default="x86-64")
    parser.add_argument("--models", default="lstm-lm,transformer-lm")
    args = parser.parse_args()

    from edgekit.bench.api import bench
    from edgekit.export.api import export
    from edgekit.quantize.api import quantize
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    prompt = "def main(argv=None):\n    parser = argparse."
    with tempfile.TemporaryDirectory(prefix="bench-lm-") as tmp:
        tmp = Path(tmp)
        for name in args.models.split(","):
            ckpt, _ = train(TrainConfig(model=name, max_steps=args.steps, seed=0), tmp / name / "ckpt")
            fp32, _ = export(ckpt, tmp / name / "fp32", ("onnx", "torchscript"), target=args.target, onnx_route="torchscript")
            int8, _ = quantize(ckpt, "dynamic", tmp / name / "int8", args.target, formats=("onnx", "torchscript"))
            files = [fp32 / "model.onnx", int8 / "model.onnx", fp32 / "model.pt", int8 / "model.pt"]
            results = bench(files, threads=1, min_time_s=args.min_time, lm_tokens=args.tokens, target=args.target)
            print(f"\n{name}: {args.steps} training steps, target {args.target}, 1 thread, interleaved; "
                  f"tokens/s = greedy generation of {args.tokens} tokens after a 16-token prompt")
            print(f"  {'file':<22}{'size KB':>9}{'fwd p50 ms':>12}{'tokens/s':>10}{'x fp32':>8}{'agree':>8}")
            for i, (path, r) in enumerate(zip(files, results)):
                base = results[i - i % 2]
                agree = "" if r.model.precision == "fp32" else f"{agreement(ckpt, int8, r.model.format, prompt, 64):.1%}"
                print(f"  {path.parent.name + '/' + path.name:<22}{r.model.bytes / 1024:>9.1f}{r.timing.p50:>12.3f}"
                      f"{r.tokens_per_s:>10.0f}{r.tokens_per_s / base.tokens_per_s:>7.2f}x{agree:>8}")


if __name__ == "__main__":
    main()
