"""How much does edgekit's bench harness add to a measured latency?

Builds a tiny ONNX MLP in a temporary folder, then alternates, round after round:
  * edgekit:  ``edgekit.bench.api.bench([model])`` (the runner in its own process), its p50;
  * bare:     a plain ``session.run`` loop in a fresh Python process, same threads and session
              options, its p50.
Prints both medians over the rounds and their ratio (goal: within 2 %). Both sides start a new
process every round: one process can settle faster or slower than another (up to ~50 % seen on a
2-core VM), so a bare loop kept in this one process would compare one process against many.

    python benchmarks/harness_overhead.py [--rounds 6] [--threads 1] [--min-time 1.0] [--hidden 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def build_model(path: Path, hidden: int) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((64, hidden)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((hidden, 10)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["input", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "tiny_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def bare_p50(path: Path, threads: int, warmup: int, min_runs: int, min_time_s: float) -> tuple[float, int]:
    """The loop anyone would write: ``session.run`` between two ``perf_counter_ns`` calls."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)}
    for _ in range(warmup + 1):
        session.run(None, feeds)
    clock = time.perf_counter_ns  # a local: a global + attribute lookup would land inside the timing
    samples, total = [], 0
    while len(samples) < min_runs or total < min_time_s * 1e9:
        start = clock()
        session.run(None, feeds)
        took = clock() - start
        samples.append(took)
        total += took
    return float(np.percentile(samples, 50)) / 1e6, len(samples)


def bare_in_fresh_process(model: Path, args) -> tuple[float, int]:
    import subprocess

    argv = [sys.executable, __file__, "--bare-child", str(model), "--threads", str(args.threads),
            "--warmup", str(args.warmup), "--min-runs", str(args.min_runs), "--min-time", str(args.min_time)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": str(args.threads)}).stdout.split()
    return float(out[0]), int(out[1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--min-runs", type=int, default=200)
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--hidden", type=int, default=64, help="hidden width of the MLP (bigger: slower calls)")
    parser.add_argument("--bare-child", metavar="MODEL", help=argparse.SUPPRESS)  # internal: one bare round
    args = parser.parse_args(argv)
    if args.bare_child:
        p50, runs = bare_p50(Path(args.bare_child), args.threads, args.warmup, args.min_runs, args.min_time)
        print(f"{p50!r} {runs}")
        return 0

    from edgekit.bench.api import bench

    with tempfile.TemporaryDirectory(prefix="edgekit-harness-") as tmp:
        model = Path(tmp) / "tiny.onnx"
        build_model(model, args.hidden)
        ours, bare = [], []
        for round_index in range(args.rounds):
            order = ("edgekit", "bare") if round_index % 2 == 0 else ("bare", "edgekit")
            for which in order:
                if which == "edgekit":
                    (res,) = bench([model], threads=args.threads, warmup=args.warmup, min_runs=args.min_runs,
                                   min_time_s=args.min_time, max_runs=10**7)
                    ours.append(res.timing.p50)
                    runs = res.timing.runs
                else:
                    p50, runs = bare_in_fresh_process(model, args)
                    bare.append(p50)
                print(f"round {round_index + 1} {which:8s} p50 {(ours if which == 'edgekit' else bare)[-1] * 1000:9.3f} us"
                      f"  ({runs} runs)", file=sys.stderr)
    ours_p50, bare_p50_ms = statistics.median(ours), statistics.median(bare)
    ratio = ours_p50 / bare_p50_ms
    print(f"model: 64 -> {args.hidden} -> 10 MLP, batch 1, {args.threads} thread(s), {args.rounds} rounds")
    print(f"edgekit p50 (median of rounds): {ours_p50 * 1000:.3f} us")
    print(f"bare    p50 (median of rounds): {bare_p50_ms * 1000:.3f} us")
    print(f"ratio edgekit / bare: {ratio:.4f} ({(ratio - 1) * 100:+.2f} %)  goal: within 2 %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
