"""Digits CNN: static int8 keeps accuracy (within 0.5 points) and the int8 ONNX model is faster.

Trains the default digits CNN, exports fp32, quantizes (static, target recipe), then times fp32 and
int8 ONNX side by side in one interleaved ``edgekit.bench`` session at batch 32, and reports the
ratios. Also: QAT vs static PTQ on the same CNN with one outlier activation channel (the
function-preserving 50x rescale used in tests/quantize/test_quantize_accuracy_aware.py).

    .venv/bin/python benchmarks/quantize_digits.py [--target x86-64] [--epochs 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="x86-64")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--min-time", type=float, default=3.0, help="seconds of timed runs per model")
    parser.add_argument("--no-qat", action="store_true")
    args = parser.parse_args()

    from edgekit.bench.api import bench
    from edgekit.export.api import export
    from edgekit.quantize.api import quantize
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    calib = REPO / "calib_data" / "digits"
    with tempfile.TemporaryDirectory(prefix="bench-digits-") as tmp:
        tmp = Path(tmp)
        ckpt, trained = train(TrainConfig(epochs=args.epochs, seed=0), tmp / "ckpt")
        float_acc = trained.metrics["accuracy"]
        fp32_dir, _ = export(ckpt, tmp / "fp32", ("onnx",), target=args.target)
        q_dir, q = quantize(ckpt, "static", tmp / "int8", args.target, calib=calib, formats=("onnx",))
        entry = q.file("onnx")
        acc = entry.metrics["accuracy"]
        print(f"digits CNN, target {args.target}, recipe {entry.details['recipe']}, {args.threads} thread(s)")
        print(f"accuracy: fp32 {float_acc:.4f}  int8 static {acc:.4f}  drop {100 * (float_acc - acc):.2f} points "
              f"({'PASS' if 100 * (float_acc - acc) <= 0.5 else 'FAIL'} for <= 0.5)")
        results = bench([fp32_dir / "model.onnx", q_dir / "model.onnx"], target=args.target, threads=args.threads,
                        batch=args.batch, warmup=20, min_runs=100, min_time_s=args.min_time)
        fp32_ms, int8_ms = results[0].timing.p50, results[1].timing.p50
        ratio = int8_ms / fp32_ms
        print(f"latency at batch {args.batch} (p50, interleaved): fp32 {fp32_ms:.3f} ms  int8 {int8_ms:.3f} ms  "
              f"ratio {ratio:.2f}x ({'PASS' if ratio <= 0.6 else 'FAIL'} for <= 0.6x)")
        print(f"size: fp32 {results[0].model.bytes / 1024:.1f} KB  int8 {results[1].model.bytes / 1024:.1f} KB")
        if not args.no_qat:
            _qat_vs_ptq(ckpt, tmp, calib, args.target)


def _qat_vs_ptq(ckpt: Path, tmp: Path, calib: Path, target: str) -> None:
    from edgekit.formats.artifacts import describe_file, finalize, load_manifest
    from edgekit.core.errors import ParityError
    from edgekit.quantize.api import quantize
    from edgekit.sources.checkpoint import CHECKPOINT_FILE, load_checkpoint, save_checkpoint

    folder, manifest = load_manifest(ckpt)
    state, meta = load_checkpoint(folder / CHECKPOINT_FILE)
    state["features.0.1.weight"][0] *= 50.0
    state["features.0.1.bias"][0] *= 50.0
    state["features.1.0.weight"][:, 0] /= 50.0
    out = tmp / "outlier"
    out.mkdir()
    save_checkpoint(out / CHECKPOINT_FILE, state, meta)
    finalize(dataclasses.replace(manifest, files=(describe_file(out, CHECKPOINT_FILE, "checkpoint",
                                                                  metrics=manifest.files[0].metrics),)), out)
    float_acc = manifest.metrics["accuracy"]
    print(f"\nQAT vs static PTQ, digits CNN with one 50x outlier activation channel (float accuracy {float_acc:.4f})")
    for name, method, fmt, opts in [
        ("static PTQ (ORT, minmax)", "static", "onnx", {"calib": calib}),
        ("static PTQ (ORT, percentile)", "static", "onnx", {"calib": calib, "calibrate_method": "percentile"}),
        ("static PTQ (torch FX)", "static", "torchscript", {"calib": calib}),
        ("QAT 3 epochs", "qat", "onnx", {"epochs": 3}),
        ("QAT 3 epochs", "qat", "torchscript", {"epochs": 3}),
    ]:
        try:
            _, q = quantize(out, method, tmp / f"o-{method}-{fmt}-{len(opts)}", "rpi4", formats=(fmt,), **opts)
            acc = q.file(fmt).metrics["accuracy"]
            print(f"  {name:<30} {fmt:<12} accuracy {acc:.4f}  drop {100 * (float_acc - acc):6.2f} points")
        except ParityError as exc:
            print(f"  {name:<30} {fmt:<12} refused: {exc}")


if __name__ == "__main__":
    main()
