"""A model over 2 GB through export -> quantize -> bundle -> verify -> bench, as a user runs it (the CLI).

    .venv/bin/python benchmarks/external_data.py [WORK_DIR]     # default: runs/external-data

The model (benchmarks/large_mlp.py, 604 M parameters, 2.42 GB in fp32) cannot be one ONNX file:
protobuf stops at 2 GB. The export must write model.onnx (the graph) + model.onnx.data (the
weights), check both, and quantize, bundle and bench must carry both. Prints each step's wall
time and peak RSS, the files' sizes as ratios of the parameters' fp32 bytes, and the parity the
export measured. Needs about 18 GB of RAM (dynamic int8 quantization peaks there) and 10 GB
of disk; takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EDGEKIT = [sys.executable, "-m", "edgekit"]


def step(name: str, argv: list[str], env: dict) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    if proc.returncode != 0:
        sys.exit(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    print(f"{name:<8} {seconds:7.1f} s   peak RSS so far {peak_gb:5.1f} GB")
    return seconds


def main() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import large_mlp

    work = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "runs" / "external-data").resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])}
    params = large_mlp.LAYERS * (large_mlp.WIDTH * large_mlp.WIDTH + large_mlp.WIDTH)
    fp32_bytes = params * 4
    print(f"model: {params / 1e6:.0f} M parameters, {fp32_bytes / 1e9:.2f} GB in fp32 (protobuf limit: 2.15 GB)")

    step("export", [*EDGEKIT, "export", "large_mlp:build", "--input-shape", f"Nx{large_mlp.WIDTH}",
                    "--format", "onnx", "--target", "x86-64", "--out", str(work / "export")], env)
    step("quantize", [*EDGEKIT, "quantize", str(work / "export" / "model.onnx"), "--method", "dynamic",
                      "--target", "x86-64", "--out", str(work / "int8")], env)
    step("bundle", [*EDGEKIT, "bundle", str(work / "export"), "--target", "x86-64", "--out", str(work / "bundle")], env)
    step("verify", [*EDGEKIT, "verify", str(work / "bundle")], env)
    step("bench", [*EDGEKIT, "bench", str(work / "bundle" / "model.onnx"), "--min-runs", "5", "--min-time", "1",
                   "--json", str(work / "bench.json")], env)

    manifest = json.loads((work / "export" / "manifest.json").read_text())
    entry = manifest["files"][0]
    parity = entry["metrics"]["parity"]
    print(f"model.onnx       {entry['bytes']:>14,} B  ({entry['bytes'] / fp32_bytes:.2e} x fp32 parameters)")
    for data in entry["data_files"]:
        print(f"{data['path']:<16} {data['bytes']:>14,} B  ({data['bytes'] / fp32_bytes:.4f} x fp32 parameters)")
    print(f"parity vs torch: max abs {parity.get('max_abs'):.2e}, cosine {parity.get('cosine'):.6f}")
    int8 = json.loads((work / "int8" / "manifest.json").read_text())["files"][0]
    int8_bytes = int8["bytes"] + sum(d["bytes"] for d in int8["data_files"])
    fidelity = int8["metrics"].get("fidelity") or {}
    print(f"int8 dynamic     {int8_bytes:>14,} B  ({int8_bytes / fp32_bytes:.4f} x fp32 parameters; "
          f"files: {', '.join([int8['path'], *(d['path'] for d in int8['data_files'])])}); "
          f"cosine vs float {fidelity.get('cosine')}")
    bundled = sorted(p.name for p in (work / "bundle").iterdir())
    print(f"bundle files: {', '.join(bundled)}; tar.gz {(work / 'bundle.tar.gz').stat().st_size / 1e9:.2f} GB")
    bench = json.loads((work / "bench.json").read_text())
    result = bench["results"][0]
    print(f"bench: p50 {result['timing']['p50']:.1f} ms, model bytes {result['model']['bytes']:,} "
          f"({result['model']['bytes'] / fp32_bytes:.4f} x fp32 parameters)")


if __name__ == "__main__":
    main()
