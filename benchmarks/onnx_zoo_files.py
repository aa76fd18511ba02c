"""ONNX files as the model zoo has them, through ``edgekit quantize --method dynamic`` (the CLI).

Subjects: the nine "light" zoo files the ``onnx`` package ships (IR 3: every initializer also a
graph input; opset 9; inputs named ``data_0`` or ``gpu_0/data_0``; weights generated at run time by
``ConstantOfShape``). Before issue 21 every one failed to quantize. For each: the int8 file's size
against the fp32 bytes of the weights the file generates, and the worst cosine of the int8 output
to ONNX Runtime's own float output on three fresh 224x224 images (each run by ORT, one call per
image: the files fix their batch at 1), plus the quantize wall time (this machine is shared: read
times as rough, ratios as measured). Weights generated as one value make uniform outputs (cosine 1
says little), so SqueezeNet and ShuffleNet are also run with seeded real weights in the zoo's own
layout (IR 3, every initializer a graph input: the test's ``with_weights``), dynamic and static
(calibrated on 8 images in one block), against the float file's size.

    .venv/bin/python benchmarks/onnx_zoo_files.py [--only squeezenet,shufflenet]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "formats"))

from test_onnx_zoo_files import (  # noqa: E402
    LARGE, LIGHT, SMALL, generated_weight_bytes, images, int8_vs_float, with_weights)

import numpy as np  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated names (without light_), default: all nine")
    args = parser.parse_args()
    names = [n for n in (*SMALL, *LARGE) if not args.only or n.removeprefix("light_") in args.only.split(",")]
    edgekit = Path(sys.executable).with_name("edgekit")
    print(f"{'file':<22} {'fp32 weights':>13} {'int8 file':>10} {'ratio':>6} {'cosine':>8} {'quantize s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            source, out = LIGHT / f"{name}.onnx", Path(tmp) / name
            start = time.perf_counter()
            subprocess.run([str(edgekit), "quantize", str(source), "--method", "dynamic", "--out", str(out)],
                           check=True, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            int8 = out / "model.onnx"
            weights, size = generated_weight_bytes(source), int8.stat().st_size
            print(f"{name:<22} {weights / 2**20:>10.1f} MB {size / 2**20:>7.1f} MB {size / weights:>5.2f}x "
                  f"{int8_vs_float(int8, source):>8.5f} {seconds:>10.1f}")
        calib = Path(tmp) / "calib"
        calib.mkdir()
        np.save(calib / "images.npy", images(8, seed=5))
        print(f"\n{'with seeded weights':<22} {'method':>8} {'fp32 file':>10} {'int8 file':>10} {'ratio':>6} {'cosine':>8}")
        for name in ("squeezenet", "shufflenet"):
            source = with_weights(f"light_{name}", Path(tmp) / f"{name}.onnx")
            for method, extra in (("dynamic", []), ("static", ["--calib", str(calib)])):
                out = Path(tmp) / f"{name}-{method}"
                subprocess.run([str(edgekit), "quantize", str(source), "--method", method, "--out", str(out), *extra],
                               check=True, capture_output=True, text=True)
                int8 = out / "model.onnx"
                fp32, size = source.stat().st_size, int8.stat().st_size
                print(f"{name:<22} {method:>8} {fp32 / 2**20:>7.1f} MB {size / 2**20:>7.1f} MB {size / fp32:>5.2f}x "
                      f"{int8_vs_float(int8, source):>8.5f}")


if __name__ == "__main__":
    main()
