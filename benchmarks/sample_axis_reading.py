"""Reading calibration samples along a declared ``--sample-axis``: a (C, N, F) ``.npy`` read along
axis 1 vs the same samples laid out (N, C, F) and read along axis 0, and vs reading the whole file
for every batch (what a non-zero sample axis cost before ``NpyFile.along``).

Each reading is a fresh subprocess (its VmHWM is its own peak), one full pass over the set in
batches of 32, all three on the same samples in one run; the batches are checked identical.

    .venv/bin/python benchmarks/sample_axis_reading.py [--samples 20000] [--channels 8] [--features 64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import hashlib, json, pathlib, sys, time
import numpy as np
from edgekit.core.input_spec import InputSpec
from edgekit.userdata.sets import CalibrationSet, NpyFile
how, path, channels, features = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
axis = 0 if how == "axis0" else 1
shape = (None, channels, features) if axis == 0 else (channels, None, features)
spec = InputSpec("x", shape, "float32", {axis: "n"})
digest = hashlib.sha256()
started = time.perf_counter()
if how == "whole-file":  # the reading before: the whole .npy, then the batch's samples taken from it
    array = NpyFile(pathlib.Path(path))
    for start in range(0, array.shape[1], 32):
        whole = np.asarray(array[:])
        batch = np.take(whole, np.arange(start, min(start + 32, array.shape[1])), axis=1)
        digest.update(np.ascontiguousarray(np.swapaxes(batch, 0, 1)).tobytes())
else:
    calib = CalibrationSet((pathlib.Path(path),), (spec,), 32, None, (("x", 1),) if axis else ())
    for feed in calib.feeds():
        batch = feed["x"] if axis == 0 else np.swapaxes(feed["x"], 0, 1)
        digest.update(np.ascontiguousarray(batch).tobytes())
seconds = time.perf_counter() - started
# VmHWM: this process image's own peak (ru_maxrss would carry the parent's over fork + exec)
peak = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024.0
print(json.dumps({"seconds": seconds, "peak_rss_mb": peak, "sha256": digest.hexdigest()}))
"""


def _run(how: str, path: Path, channels: int, features: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, how, str(path), str(channels), str(features)],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{how}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--features", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cnf = np.random.default_rng(0).standard_normal((args.channels, args.samples, args.features)).astype(np.float32)
        np.save(Path(tmp) / "cnf.npy", cnf)
        np.save(Path(tmp) / "ncf.npy", np.ascontiguousarray(np.swapaxes(cnf, 0, 1)))
        megabytes = cnf.nbytes / 2**20
        del cnf
        runs = {"axis0": _run("axis0", Path(tmp) / "ncf.npy", args.channels, args.features),
                "axis1": _run("axis1", Path(tmp) / "cnf.npy", args.channels, args.features),
                "whole-file": _run("whole-file", Path(tmp) / "cnf.npy", args.channels, args.features)}
    same = len({r["sha256"] for r in runs.values()}) == 1
    base = runs["axis0"]
    print(f"{args.samples} samples of ({args.channels}, {args.features}) float32, {megabytes:.1f} MB, batches of 32; "
          f"identical batches: {same}")
    for how, r in runs.items():
        print(f"  {how:<10} {r['seconds']:8.3f} s ({r['seconds'] / base['seconds']:6.2f}x)   "
              f"peak RSS {r['peak_rss_mb']:7.1f} MB ({r['peak_rss_mb'] / base['peak_rss_mb']:5.2f}x)")


if __name__ == "__main__":
    main()
