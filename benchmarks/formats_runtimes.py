"""Board runtimes on this host, side by side in one run: ONNX Runtime, ExecuTorch (XNNPACK), ncnn and
LiteRT (.tflite), fp32 and int8, each as a ratio of ONNX Runtime at the same precision.

The model (digits-cnn by default, trained here) goes through the CLI a user runs for each
format this host can write among those four: ``export --format F`` and ``quantize --method
static --format F`` -> ``export``. One ``edgekit bench`` session then times every file
interleaved (batch 1, 1 thread, worker processes alternating), so the ratios hold on a noisy
shared machine even when absolute times drift. These are x86 host figures, not a board's.

    .venv/bin/python benchmarks/formats_runtimes.py [--model digits-cnn] [--min-time 2] [--processes 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

EDGEKIT = [sys.executable, "-m", "edgekit"]
RUNTIMES = ("onnx", "executorch", "ncnn", "tflite")  # the baseline first


def edgekit(*args) -> None:
    subprocess.run([*EDGEKIT, *map(str, args)], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="digits-cnn")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--min-time", type=float, default=2.0)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()

    from edgekit import formats
    from edgekit.formats.artifacts import load_manifest

    names = [name for name in RUNTIMES if name in formats.available_names()]
    with tempfile.TemporaryDirectory(prefix="edgekit-runtimes-") as scratch:
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
                files[(fmt, precision)] = (folder / manifest.file(fmt).path, manifest.file(fmt))
        edgekit("bench", *[path for path, _ in files.values()], "--threads", "1", "--min-time", args.min_time,
                "--processes", args.processes, "--json", work / "bench.json")
        results = json.loads((work / "bench.json").read_text())["results"]
    p50 = {(r["model"]["format"], r["model"]["precision"]): r["timing"]["p50"] for r in results}

    print(f"{args.model}: p50 latency per runtime, one interleaved bench session (batch 1, 1 thread, this host)")
    print(f"{'runtime':<11} {'prec':<5} {'KB':>8} {'p50 ms':>8} {'vs onnx':>8} {'vs own fp32':>12} {'accuracy':>9}")
    for precision in ("fp32", "int8"):
        for fmt in names:
            _, entry = files[(fmt, precision)]
            own = p50[(fmt, precision)]
            print(f"{fmt:<11} {precision:<5} {entry.total_bytes / 1024:>8.1f} {own:>8.4f} "
                  f"{own / p50[('onnx', precision)]:>7.2f}x {own / p50[(fmt, 'fp32')]:>11.2f}x "
                  f"{entry.metrics.get('accuracy') or 0:>9.4f}")


if __name__ == "__main__":
    main()
