"""Peak memory of calibration vs the number of calibration samples: 10x more must cost < 1.2x RSS.

Each run is a fresh subprocess (so ru_maxrss is that run's own peak) calibrating the digits CNN's
ONNX export over a set of N or 10N samples on disk. edgekit's streaming calibrators are measured
side by side with ONNX Runtime's own histogram calibrator, which keeps every batch's activations
until ``compute_data``.

    .venv/bin/python benchmarks/calibration_memory.py [--samples 1000] [--method entropy]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys
from pathlib import Path
import numpy as np
kind, model, data, method = sys.argv[1:5]
from edgekit.core.input_spec import InputSpec
from edgekit.userdata.sets import open_calibration
spec = InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"})
calib = open_calibration(data, spec, batch_size=32)
if kind == "edgekit":
    from edgekit.quantize.calibration.calibrators import make_calibrator
    from edgekit.quantize.calibration.onnx_ranges import collect_ranges
    ranges, samples = collect_ranges(Path(model), calib.feeds(), make_calibrator(method))
else:
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator
    import tempfile
    class Reader:
        def __init__(self): self.it = calib.feeds()
        def get_next(self): return next(self.it, None)
    methods = {"entropy": CalibrationMethod.Entropy, "percentile": CalibrationMethod.Percentile,
               "minmax": CalibrationMethod.MinMax}
    with tempfile.TemporaryDirectory() as tmp:
        cal = create_calibrator(Path(model), None, augmented_model_path=str(Path(tmp) / "aug.onnx"),
                                calibrate_method=methods[method])
        cal.collect_data(Reader())
        ranges = cal.compute_data()
    samples = calib.count()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print(json.dumps({"samples": samples, "tensors": len(list(ranges)), "peak_rss_mb": peak}))
"""


def _model(folder: Path) -> Path:
    import torch

    from edgekit.formats.onnx_export import export_onnx
    from edgekit.models import build_model, get_spec
    from edgekit.quantize.toolkits.ort_backend import preprocess

    torch.manual_seed(0)
    model = build_model("digits-cnn").eval()  # random weights: activations, not accuracy, matter here
    spec = get_spec("digits-cnn")
    inputs = spec.input_spec(spec.default_config)
    raw = folder / "digits.onnx"
    export_onnx(model, (torch.rand(2, 1, 8, 8),), inputs, spec.outputs, raw, 17)
    return preprocess(raw, folder / "digits-prepared.onnx")


def _data(folder: Path, samples: int) -> Path:
    import numpy as np

    folder.mkdir()
    rng = np.random.default_rng(0)
    block = 1024  # whole batches of 32: ORT's histogram calibrator fails on a ragged last batch
    for start in range(0, samples, block):
        n = min(block, samples - start)
        np.save(folder / f"part{start // block:05d}.npy", rng.random((n, 1, 8, 8), dtype=np.float32))
    return folder


def _run(kind: str, model: Path, data: Path, method: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(model), str(data), method],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1024, help="the small set; the large one is 10x")
    parser.add_argument("--method", default="entropy", choices=["minmax", "percentile", "entropy"])
    parser.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime's own calibrator")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="calib-mem-") as tmp:
        tmp = Path(tmp)
        model = _model(tmp)
        small = _data(tmp / "small", args.samples)
        large = _data(tmp / "large", 10 * args.samples)
        kinds = ["edgekit"] + ([] if args.no_ort else ["onnxruntime"])
        print(f"calibration method: {args.method}; model: digits CNN (ONNX); batch 32")
        print(f"{'calibrator':<12} {'samples':>8} {'peak RSS MB':>12}")
        ratios = {}
        for kind in kinds:
            runs = [_run(kind, model, data, args.method) for data in (small, large)]
            for n, run in zip((args.samples, 10 * args.samples), runs):
                text = f"{run['peak_rss_mb']:12.1f}" if "peak_rss_mb" in run else f"  error: {run['error']}"
                print(f"{kind:<12} {n:>8} {text}")
            if all("peak_rss_mb" in r for r in runs):
                ratios[kind] = runs[1]["peak_rss_mb"] / runs[0]["peak_rss_mb"]
        for kind, ratio in ratios.items():
            verdict = "PASS" if ratio < 1.2 else "over 1.2x"
            print(f"{kind}: 10x samples -> {ratio:.3f}x peak RSS ({verdict} for the < 1.2x goal)" if kind == "edgekit"
                  else f"{kind}: 10x samples -> {ratio:.3f}x peak RSS")
        if ratios.get("edgekit", 99) >= 1.2:
            sys.exit(1)


if __name__ == "__main__":
    main()
