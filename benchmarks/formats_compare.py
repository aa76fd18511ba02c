"""TorchScript vs ONNX vs ExecuTorch (.pte, XNNPACK), fp32 and static int8, side by side in one run.

The default model (digits-mobilenet, trained here on the packaged digits set) goes through the
CLI a user runs: ``train`` -> ``export --format F`` -> ``quantize --method static --format F``
(calibrated on the packaged calibration set; ``.pte`` through PT2E) -> ``export``. Then one
``edgekit bench`` session times all six files interleaved (batch 1, 1 thread, worker processes
alternating), so the ratios hold on a noisy shared machine even when absolute times drift.

Printed per format: size and p50 of int8 as ratios of the same format's fp32, test accuracy of
both, and each fp32 file's p50 as a ratio of ONNX fp32.

    .venv/bin/python benchmarks/formats_compare.py [--epochs 6] [--min-time 2] [--processes 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

EDGEKIT = [sys.executable, "-m", "edgekit"]


def edgekit(*args) -> None:
    subprocess.run([*EDGEKIT, *map(str, args)], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--min-time", type=float, default=2.0)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--model", default="digits-mobilenet")
    args = parser.parse_args()

    from edgekit import formats
    from edgekit.formats.artifacts import load_manifest

    names = formats.available_names()
    with tempfile.TemporaryDirectory(prefix="edgekit-formats-") as scratch:
        work = Path(scratch)
        edgekit("train", "--model", args.model, "--epochs", args.epochs, "--out", work / "ckpt")
        files = {}
        for fmt in names:
            edgekit("export", work / "ckpt", "--format", fmt, "--out", work / f"fp32-{fmt}")
            edgekit("quantize", work / "ckpt", "--method", "static", "--format", fmt, "--out", work / f"q-{fmt}")
            edgekit("export", work / f"q-{fmt}", "--out", work / f"int8-{fmt}")
            for precision in ("fp32", "int8"):
                folder = work / f"{precision}-{fmt}"
                _, manifest = load_manifest(folder)
                entry = manifest.file(fmt)
                files[(fmt, precision)] = (folder / entry.path, entry)
        edgekit("bench", *[path for path, _ in files.values()], "--threads", "1", "--min-time", args.min_time,
                "--processes", args.processes, "--json", work / "bench.json")
        results = json.loads((work / "bench.json").read_text())["results"]
    p50 = {(r["model"]["format"], r["model"]["precision"]): r["timing"]["p50"] for r in results}

    print(f"{args.model}: static int8 vs fp32 per format, one interleaved bench session (batch 1, 1 thread)")
    print(f"{'format':<12} {'fp32 KB':>9} {'int8 KB':>9} {'size x':>7} {'fp32 ms':>8} {'int8 ms':>8} "
          f"{'p50 x':>6} {'fp32 acc':>9} {'int8 acc':>9} {'fp32 vs onnx':>13}")
    for fmt in names:
        (_, f32), (_, i8) = files[(fmt, "fp32")], files[(fmt, "int8")]
        print(f"{fmt:<12} {f32.total_bytes / 1024:>9.1f} {i8.total_bytes / 1024:>9.1f} "
              f"{i8.total_bytes / f32.total_bytes:>6.2f}x {p50[(fmt, 'fp32')]:>8.3f} {p50[(fmt, 'int8')]:>8.3f} "
              f"{p50[(fmt, 'int8')] / p50[(fmt, 'fp32')]:>5.2f}x {f32.metrics.get('accuracy', 0):>9.4f} "
              f"{i8.metrics.get('accuracy', 0):>9.4f} {p50[(fmt, 'fp32')] / p50[('onnx', 'fp32')]:>12.2f}x")


if __name__ == "__main__":
    main()
