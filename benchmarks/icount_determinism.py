"""Can a 1 % regression gate on emulated instruction counts flake? 20 reruns of one artifact, gated.

Counts the same ExecuTorch program ``--reruns`` times (each a fresh QEMU process in a fresh sandbox,
``edgekit.emulate.icount``) on the target's core and gates every rerun against the first with
``--max-regression 1%`` (the rules of ``edgekit gate``: ``edgekit.gates.instructions``): every failure
would be a false alarm. Side by side, in the same run, the host's own timing of the same program (the
p50 of ``edgekit bench``, one process each) shows the spread a timed gate has to fight. With
``--slower``, a second program (e.g. the same model with one more op) is counted and gated too.

    python benchmarks/icount_determinism.py [PROGRAM.pte] [--slower OTHER.pte] [--reruns 20] [--target rpi4]

Without PROGRAM, the default pipeline's model (digits-mobilenet, untrained: counts do not depend on
the weights' values) is exported to a temporary .pte first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def export_default(folder: Path) -> Path:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from edgekit.models import build_model

    torch.manual_seed(0)
    model = build_model("digits-mobilenet")
    example = torch.rand(1, 1, 32, 32)
    program = torch.export.export(model.eval(), (example,))
    path = folder / "model.pte"
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    return path


def result_of(counts: dict):
    """A bench result stand-in for the gate: what ``bench --emulate`` writes (its ``emulated`` section)."""
    from types import SimpleNamespace

    from edgekit.records.instructions import section

    return SimpleNamespace(emulated=section(counts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program", nargs="?", type=Path)
    parser.add_argument("--slower", type=Path, help="a program that should fail the gate")
    parser.add_argument("--reruns", type=int, default=20)
    parser.add_argument("--runs", type=int, default=20, help="inferences counted per rerun")
    parser.add_argument("--target", default="rpi4")
    args = parser.parse_args()

    from edgekit.bench.api import bench
    from edgekit.bench.emulated import _cpu
    from edgekit.emulate.icount import count_per_run
    from edgekit.gates.instructions import check_instructions

    cpu, _ = _cpu(args.target)
    with tempfile.TemporaryDirectory() as tmp:
        program = args.program or export_default(Path(tmp))
        started = time.monotonic()
        base = count_per_run(program, "executorch", cpu, runs=args.runs)
        counts, p50s, alarms = [base["per_run"]], [], 0
        for i in range(args.reruns):
            rerun = count_per_run(program, "executorch", cpu, runs=args.runs)
            counts.append(rerun["per_run"])
            check = check_instructions("model", result_of(rerun), result_of(base), 0.01)
            alarms += check.status == "fail"
            p50s.append(bench([program], threads=1, warmup=5, min_runs=50, min_time_s=0.2)[0].timing.p50)
            print(f"rerun {i + 1:2d}: {rerun['per_run']:,} instructions/inference ({check.status}); "
                  f"host p50 {p50s[-1]:.4f} ms", flush=True)
        seconds = time.monotonic() - started
        print(f"\n{program.name} on {cpu}, {args.reruns} reruns + the baseline, {args.runs} inferences counted each:")
        print(f"  instruction counts: min {min(counts):,}  max {max(counts):,}  spread max-min {max(counts) - min(counts):,} "
              f"= {max(counts) / min(counts) - 1:.2e} of the count")
        print(f"  host p50 (ms), same reruns: min {min(p50s):.4f}  max {max(p50s):.4f}  spread "
              f"{max(p50s) / min(p50s) - 1:.2e} (median {statistics.median(p50s):.4f})")
        print(f"  spread ratio, timed / counted: {(max(p50s) / min(p50s) - 1) / max(max(counts) / min(counts) - 1, 1e-12):,.0f}x")
        print(f"  gate --max-regression 1% on counts: {alarms} false alarm(s) in {args.reruns} reruns")
        if args.slower:
            slower = count_per_run(args.slower, "executorch", cpu, runs=args.runs)
            check = check_instructions("model", result_of(slower), result_of(base), 0.01)
            print(f"  {args.slower.name}: {slower['per_run']:,} instructions/inference "
                  f"({slower['per_run'] / base['per_run'] - 1:+.2%}): gate {check.status}")
        print(f"  wall time: {seconds:.0f} s")
    return 0 if alarms == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
