"""A native ONNX bundle (``edgekit-run`` + the wheel's libonnxruntime.so, no Python) against the Python
ONNX bundle (``--runtime python``: numpy + onnxruntime installed with pip), side by side in one run.

For one ONNX export per model (the digits CNN, ``digits-cnn``, or ``--model digits-mobilenet``, the default
pipeline model), trained and exported here:

- size: each rpi4 bundle's folder (``bytes_on_disk``) and what the board must hold to run it: the
  native bundle as it is; the Python bundle plus the wheels pip installs (``--wheels``: onnxruntime
  and numpy for manylinux_2_28_aarch64, fetched from the package index) and its Python;
- peak RSS and latency on this host: both x86-64 bundles under ``edgekit bench`` in one command
  (interleaved, fresh processes, one thread): the native bundle's ``edgekit-run`` (sandboxed), and
  the board package's ``runner.py`` on Python's ONNX Runtime; the same library release both sides.

Prints the raw figures and the native/Python ratios.

    .venv/bin/python benchmarks/native_onnx.py [--model digits-cnn|digits-mobilenet] [--min-runs 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

EDGEKIT = [sys.executable, "-m", "edgekit"]


def edgekit(*args: str) -> str:
    done = subprocess.run([*EDGEKIT, *args], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"edgekit {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="digits-cnn")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--min-runs", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="native-onnx-bench-") as tmp:
        work = Path(tmp)
        edgekit("train", "--model", args.model, "--epochs", str(args.epochs), "--out", str(work / "ckpt"))
        sizes, figures = {}, {}
        for target in ("rpi4", "x86-64"):
            edgekit("export", str(work / "ckpt"), "--format", "onnx", "--target", target, "--out", str(work / f"onnx-{target}"))
            for runtime in ("native", "python"):
                extra = ["--wheels"] if target == "rpi4" and runtime == "python" else []
                edgekit("bundle", str(work / f"onnx-{target}"), "--target", target, "--runtime", runtime, *extra,
                        "--out", str(work / f"{runtime}-{target}"))
        for runtime in ("native", "python"):
            bundle = work / f"{runtime}-rpi4"
            info = json.loads((bundle / "bundle.json").read_text())
            archive = bundle.parent / f"{bundle.name}.tar.gz"
            wheels = folder_bytes(bundle / "wheels") if (bundle / "wheels").is_dir() else 0
            sizes[runtime] = {"folder_bytes": folder_bytes(bundle), "wheels_bytes": wheels,
                              "archive_bytes": archive.stat().st_size if archive.is_file() else None,
                              "runtime": info["runtime"]}
        report = work / "bench.json"
        edgekit("bench", str(work / "native-x86-64"), str(work / "python-x86-64"), "--threads", "1",
                "--min-runs", str(args.min_runs), "--min-time", "1", "--json", str(report))
        results = json.loads(report.read_text())["results"]
        for runtime, result in zip(("native", "python"), results):
            figures[runtime] = {"runtime": result["runtime"]["name"], "p50_ms": result["timing"]["p50"],
                                "mean_ms": result["timing"]["mean"], "load_ms": result["timing"]["load"],
                                "peak_rss_mb": result["memory"]["peak_rss"], "runs": result["timing"]["runs"]}

    n, p = sizes["native"], sizes["python"]
    print(f"model: {args.model} ({args.epochs} epochs), ONNX fp32")
    print(f"rpi4 bundle on disk: native {n['folder_bytes'] / 1e6:.1f} MB (edgekit-run + lib/libonnxruntime.so + model); "
          f"python {p['folder_bytes'] / 1e6:.1f} MB, of which wheels/ {p['wheels_bytes'] / 1e6:.1f} MB "
          f"(onnxruntime + numpy; the board also needs Python 3)")
    print(f"  native / python (with its wheels): {n['folder_bytes'] / p['folder_bytes']:.2f}x")
    if n["archive_bytes"] and p["archive_bytes"]:
        print(f"  archives: native {n['archive_bytes'] / 1e6:.1f} MB, python {p['archive_bytes'] / 1e6:.1f} MB "
              f"({n['archive_bytes'] / p['archive_bytes']:.2f}x)")
    fn, fp = figures["native"], figures["python"]
    print(f"this host, 1 thread ({fn['runs']} / {fp['runs']} runs): native p50 {fn['p50_ms']:.4f} ms, "
          f"python p50 {fp['p50_ms']:.4f} ms -> latency ratio {fn['p50_ms'] / fp['p50_ms']:.2f}x")
    print(f"  peak RSS: native {fn['peak_rss_mb']:.1f} MB, python {fp['peak_rss_mb']:.1f} MB -> "
          f"{fn['peak_rss_mb'] / fp['peak_rss_mb']:.2f}x; load: native {fn['load_ms']:.1f} ms, python {fp['load_ms']:.1f} ms")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "sizes": sizes, "host": figures}, indent=2))


if __name__ == "__main__":
    main()
