"""A native ncnn bundle (``edgekit-run`` + libncnn.so built from ncnn's source, no Python) against the
Python ncnn bundle (``--runtime python``: the board package on ncnn's own wheel), side by side in one run.

For the default pipeline model (``digits-mobilenet``, trained here, or ``--checkpoint``), exported to
ncnn at fp32 and at static int8 (``quantize --method static --format ncnn``), each bundled for the
Raspberry Pi 4 (Cortex-A72) and 5 (Cortex-A76) both ways:

- executed aarch64 instructions per inference on the emulated core (``edgekit bench BUNDLE --emulate``,
  one thread, the model's reference inputs): the native bundle counted with its own edgekit-run, the
  Python bundle with its own ncnn wheel in the cached arm64 rootfs (Python's per-call work included);
- bytes on disk of the rpi4 bundles: the native folder as it is; the Python folder with ``--wheels``
  (ncnn and numpy for manylinux aarch64; the board also needs Python 3).

Prints the raw figures and the native/Python ratios. Needs root, qemu-user, the cached rootfs and the
ncnn venv in it (``bash benchmarks/emulated_verify.sh``), the cross compiler and CMake.

    .venv/bin/python benchmarks/ncnn_native.py [--checkpoint DIR] [--model digits-mobilenet] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

EDGEKIT = [sys.executable, "-m", "edgekit"]
TARGETS = {"rpi4": "cortex-a72", "rpi5": "cortex-a76"}


def edgekit(*args: str) -> str:
    done = subprocess.run([*EDGEKIT, *map(str, args)], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"edgekit {' '.join(map(str, args))} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def per_run(bundle: Path, work: Path) -> int:
    out = work / f"{bundle.name}.json"
    edgekit("bench", bundle, "--emulate", "--json", out)
    doc = json.loads(out.read_text())
    result = doc["results"][0] if "results" in doc else doc
    return int(result["emulated"]["instructions"]["per_run"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="digits-mobilenet")
    parser.add_argument("--checkpoint", type=Path, help="a trained checkpoint (default: train --model here)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ncnn-native-bench-") as tmp:
        work = Path(tmp)
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = work / "ckpt"
            edgekit("train", "--model", args.model, "--out", checkpoint)
        precisions = ("fp32", "int8")
        counts, sizes = {}, {}
        for target, core in TARGETS.items():  # each target's own export (a bundle checks what it was made for)
            edgekit("export", checkpoint, "--format", "ncnn", "--target", target, "--out", work / f"fp32-{target}")
            edgekit("quantize", checkpoint, "--method", "static", "--format", "ncnn", "--target", target,
                    "--out", work / f"q-{target}")
            edgekit("export", work / f"q-{target}", "--out", work / f"int8-{target}")
            for precision in precisions:
                export = work / f"{precision}-{target}"
                for runtime in ("native", "python"):
                    bundle = work / f"{precision}-{target}-{runtime}-bundle"
                    extra = ["--wheels"] if target == "rpi4" and runtime == "python" else []
                    edgekit("bundle", export, "--target", target, "--runtime", runtime, *extra, "--out", bundle)
                    counts[(precision, core, runtime)] = per_run(bundle, work)
                    if target == "rpi4":
                        sizes[(precision, runtime)] = folder_bytes(bundle)

    print(f"model: {args.model}, ncnn files; instructions per inference on the emulated core (1 thread):")
    for precision in precisions:
        for core in TARGETS.values():
            n, p = counts[(precision, core, "native")], counts[(precision, core, "python")]
            print(f"  {precision:4} {core}: native {n:,}  python wheel {p:,}  -> native/python {n / p:.3f}x")
    for precision in precisions:
        n, p = sizes[(precision, "native")], sizes[(precision, "python")]
        print(f"rpi4 bundle on disk, {precision}: native {n / 1e6:.2f} MB (edgekit-run + lib/libncnn.so + model); python "
              f"{p / 1e6:.2f} MB with its wheels/ (ncnn + numpy; the board also needs Python 3) -> {n / p:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model,
                                         "instructions": {" ".join(k): v for k, v in counts.items()},
                                         "bytes": {" ".join(k): v for k, v in sizes.items()}}, indent=2))


if __name__ == "__main__":
    main()
