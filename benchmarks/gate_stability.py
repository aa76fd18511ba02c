"""Does a 10 % regression gate stay quiet on reruns of the same model, and catch a real 25 % slowdown?

Builds, in a temporary folder: the pipeline's default model (digits-mobilenet, fp32 ONNX; timing
does not depend on its weights, so it is exported untrained) and a chain of 8 conv layers. Then:

  1. baseline:  ``bench([mobilenet, chain8])`` once;
  2. reruns:    the same models benched ``--reruns`` more times, each gated against the baseline
                with ``--max-regression 10%``: every failure is a false alarm;
  3. slowdown:  a 10-layer chain under the same file name (25 % more convolutions: a real slowdown),
                benched ``--reruns`` times and gated against the baseline's 8-layer chain:
                every pass is a missed regression.

Each step runs twice, side by side: the gate CI can trust (``--processes`` worker processes per
model, confidence intervals, a reference workload timed in the same rounds) and, for comparison,
the old setup (one process per model; the per-call noise band). Prints the counts.

    python benchmarks/gate_stability.py [--reruns 10] [--processes 4] [--min-time 0.6] [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def build_chain(path: Path, layers: int, channels: int = 32, size: int = 16) -> Path:
    """``layers`` identical 3x3 conv + ReLU layers on a 32-channel 16x16 map: compute-bound, weights
    in cache (37 KB a layer), so 10 layers cost 10/8 of 8 layers (a real 25 % slowdown)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w")]  # one weight shared by every layer: same work each
    nodes, last = [], "input"
    for i in range(layers):
        nodes.append(helper.make_node("Conv", [last, "w"], [f"c{i}"], pads=[1, 1, 1, 1]))
        last = "output" if i == layers - 1 else f"r{i}"
        nodes.append(helper.make_node("Relu", [f"c{i}"], [last]))
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def build_mobilenet(path: Path) -> Path:
    import torch

    from edgekit.models import build_model

    model = build_model("digits-mobilenet").eval()
    torch.onnx.export(model, (torch.rand(1, 1, 32, 32),), str(path), input_names=["input"], output_names=["logits"],
                      opset_version=17, dynamo=False)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=10)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--min-time", type=float, default=0.6, help="timed seconds per model per bench (all processes)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    from edgekit.bench.api import bench
    from edgekit.gates.evaluate import evaluate

    work = Path(tempfile.mkdtemp(prefix="gate-stability-"))
    same = [build_mobilenet(work / "mobilenet.onnx"), build_chain(work / "same" / "chain.onnx", 8)]
    slower = build_chain(work / "slower" / "chain.onnx", 10)

    setups = {
        "trusted": dict(processes=args.processes, reference=True),
        "old (1 process)": dict(processes=1, reference=False),
    }

    def run(paths, setup):
        return bench(paths, threads=args.threads, warmup=10, min_runs=50, min_time_s=args.min_time, **setups[setup])

    def gate(results, baseline):
        report = evaluate(results, [], baseline, 0.10)
        return [c for c in report.checks if c.metric == "p50_regression"]

    started = time.time()
    baselines = {name: run(same, name) for name in setups}
    counts = {name: {"false_alarms": 0, "checks": 0, "caught": 0, "slow_runs": 0, "ratios": []} for name in setups}
    for i in range(args.reruns):
        for name in setups:  # interleaved: both setups see the same machine state
            checks = gate(run(same, name), baselines[name])
            counts[name]["checks"] += len(checks)
            counts[name]["false_alarms"] += sum(c.failed for c in checks)
            for c in checks:
                print(f"rerun {i + 1:2d} {name:16s} {c.model:16s} {c.status:4s} {c.message}")
    for i in range(args.reruns):
        for name in setups:
            slow = run([slower], name)
            (check,) = gate(slow, baselines[name])
            counts[name]["slow_runs"] += 1
            counts[name]["caught"] += check.failed
            counts[name]["ratios"].append(slow[0].timing.p50 / baselines[name][1].timing.p50)
            print(f"slow  {i + 1:2d} {name:16s} chain.onnx       {check.status:4s} {check.message}")

    print()
    print(f"{args.reruns} reruns of 2 models and {args.reruns} runs of a slower variant; 10% gate; "
          f"{args.processes} processes; {time.time() - started:.0f} s")
    print(f"{'setup':18s} {'false alarms':>14s} {'slowdowns caught':>18s} {'slow/base p50 (min-max)':>26s}")
    for name, c in counts.items():
        ratios = c["ratios"]
        print(f"{name:18s} {c['false_alarms']:>6d} of {c['checks']:<5d} {c['caught']:>8d} of {c['slow_runs']:<7d} "
              f"{min(ratios):>12.2f}-{max(ratios):.2f}x")


if __name__ == "__main__":
    main()
