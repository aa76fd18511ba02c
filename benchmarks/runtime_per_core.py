"""Every runtime that runs on a Raspberry Pi, counted on the board's own core: executed aarch64
instructions per inference under QEMU (Cortex-A72: Pi 4, Cortex-A76: Pi 5), side by side in one run.

For the default model (digits-mobilenet) and the digits CNN, fp32 and static int8:

  .pte   edgekit-run (ExecuTorch, XNNPACK), edgekit's native runner     (emulate.icount.count_per_run)
  .onnx  edgekit-run (ONNX Runtime's C++ API), edgekit's native runner
  .onnx  onnxruntime's Python wheel, in a Python bundle                  (emulate.icount_python)
  ncnn   ncnn's Python wheel, in a Python bundle
  tflite ai-edge-litert's Python wheel (LiteRT, XNNPACK), in a Python bundle

The Python rows include Python's per-call work (runner.py's bound call); edgekit-run's rows have none.
Counts are deterministic (the same to the instruction from run to run); timings are not measured.
Prints the table, each row's ratio to the cheapest row of its model, precision and core, and which
runtime edgekit would pick (the cheapest). Needs root, qemu-user, the cached arm64 rootfs
(benchmarks/emulated_verify.sh), the executorch/ncnn/tflite extras and crossbuild-essential-arm64.

    .venv/bin/python benchmarks/runtime_per_core.py [--work runs/runtime-per-core] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EDGEKIT = [str(Path(sys.executable).parent / "edgekit")]  # the CLI of this Python's environment
MODELS = ("digits-mobilenet", "digits-cnn")
CORES = ("cortex-a72", "cortex-a76")
FORMATS = "executorch,onnx,ncnn,tflite"
PYTHON_BUNDLES = ("onnx", "ncnn", "tflite")
EDGEKIT_RUN = ("pte edgekit-run", "onnx edgekit-run")


def edgekit(*args) -> None:
    done = subprocess.run([*EDGEKIT, *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"edgekit {' '.join(map(str, args))} failed:\n{done.stderr[-2000:]}")


def prepare(work: Path, model: str) -> dict[str, Path]:
    """The model's fp32 and static int8 exports in every format, and a Python bundle of each Python runtime."""
    base = work / model
    if not (base / "checkpoint").is_dir():
        edgekit("train", "--model", model, "--epochs", "1", "--seed", "0", "--out", base / "checkpoint")
    folders = {}
    for precision in ("fp32", "int8"):
        dist = base / f"dist-{precision}"
        if not dist.is_dir():
            source = base / "checkpoint"
            if precision == "int8":
                edgekit("quantize", source, "--method", "static", "--target", "rpi4", "--format", FORMATS,
                        "--out", base / "int8")
                source = base / "int8"
            edgekit("export", source, "--format", FORMATS, "--out", dist)
        folders[precision] = dist
        for fmt in PYTHON_BUNDLES:
            bundle = base / f"bundle-{precision}-{fmt}"
            if not bundle.is_dir():
                edgekit("bundle", dist, "--target", "rpi4", "--format", fmt, "--out", bundle)
    return folders


def count_all(work: Path, runs: int) -> list[dict]:
    from edgekit.core.artifacts import load_manifest
    from edgekit.emulate.bundle import open_bundle
    from edgekit.emulate.icount import count_per_run
    from edgekit.emulate.icount_python import count_python_bundle

    rows = []
    for model in MODELS:
        folders = prepare(work, model)
        for precision, dist in folders.items():
            _, manifest = load_manifest(dist)
            for cpu in CORES:
                def add(runtime: str, counts: dict) -> None:
                    rows.append({"model": model, "precision": precision, "cpu": cpu, "runtime": runtime,
                                 "per_run": counts["per_run"], "simd_fp": counts["classes"]["simd_fp"]})
                    print(f"  {model} {precision} {cpu} {runtime}: {counts['per_run']:,}", file=sys.stderr)

                pte = dist / manifest.file("executorch").path
                add("pte edgekit-run", count_per_run(pte, "executorch", cpu, runs=runs))
                add("onnx edgekit-run", count_per_run(dist / manifest.file("onnx").path, "onnx", cpu, runs=runs))
                for fmt in PYTHON_BUNDLES:
                    bundle = open_bundle(work / model / f"bundle-{precision}-{fmt}")
                    add(f"{fmt} python", count_python_bundle(bundle, cpu, runs=runs))
    return rows


def report(rows: list[dict]) -> None:
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["precision"], row["cpu"]), []).append(row)
    print(f"{'model':17} {'prec':5} {'core':11} {'runtime':17} {'instr/run':>12} {'x cheapest':>10}")
    for (model, precision, cpu), group in groups.items():
        cheapest = min(r["per_run"] for r in group)
        for row in sorted(group, key=lambda r: r["per_run"]):
            print(f"{model:17} {precision:5} {cpu:11} {row['runtime']:17} {row['per_run']:>12,} "
                  f"{row['per_run'] / cheapest:>9.2f}x")
        best = min(group, key=lambda r: r["per_run"])
        own = min((r for r in group if r["runtime"] in EDGEKIT_RUN), key=lambda r: r["per_run"])
        others = min((r for r in group if r["runtime"] not in EDGEKIT_RUN), key=lambda r: r["per_run"])
        print(f"  -> pick (the cheapest): {best['runtime']}; edgekit-run's best ({own['runtime']}) / best "
              f"Python runtime ({others['runtime']}): {own['per_run'] / others['per_run']:.2f}x\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "runtime-per-core")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = count_all(args.work, args.runs)
    (args.work / "counts.json").write_text(json.dumps(rows, indent=1))
    report(rows)


if __name__ == "__main__":
    main()
