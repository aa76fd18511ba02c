"""Several worker processes per model (what pyperf does): merge their runs into one result.

One process can settle at a speed another would not (memory layout, the core it landed on, the
frequency state it found); one long-lived process per model therefore shifts a whole model by
up to tens of percent. ``edgekit.bench.api.bench(processes=N)`` times every model in N rounds;
each round starts a fresh runner per model and interleaves them. This module runs the rounds
(with the reference workload of ``bench(reference=True)`` when asked) and merges them:
the timing figures come from all calls pooled, the ``spread`` from the per-process medians
(``edgekit.records.stats``), whose confidence interval holds the between-process variance.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from typing import Sequence

from edgekit.bench.launch import RUNNER_COMMAND, BenchModel, document, run_interleaved, to_result
from edgekit.board.stats import summarize_ns
from edgekit.records.stats import spread_of
from edgekit.bench.reference import REFERENCE_NAME, write_reference_model


def merge_processes(raws: Sequence[dict], samples: Sequence[Sequence[int]]) -> dict:
    """One raw result (the runner's JSON shape) from the same model's worker processes.

    ``raws[i]`` is process i's own result and ``samples[i]`` its timed calls (ns). Timing is
    recomputed from every call; load and first-run times are the median over processes; peak
    memory the largest; everything else (model, runtime, host) comes from the first process.
    """
    if not raws or len(raws) != len(samples) or any(not s for s in samples):
        raise ValueError("every worker process needs a result and timed calls")
    first = raws[0]
    pooled = [ns for block in samples for ns in block]
    timing = {
        "load": statistics.median(r["timing"]["load"] for r in raws),
        "first_run": statistics.median(r["timing"]["first_run"] for r in raws),
        **summarize_ns(pooled),
    }
    memory = dict(first["memory"])
    memory["peak_rss"] = max(r["memory"]["peak_rss"] for r in raws)
    batch = first.get("settings", {}).get("batch", 1)
    spread = spread_of([statistics.median(s) / 1e6 for s in samples])
    return {
        **first,
        "timing": timing,
        "memory": memory,
        "throughput_per_s": batch * timing["runs"] / timing["total_s"] if timing["total_s"] > 0 else 0.0,
        "settings": {**first.get("settings", {}), "processes": len(raws)},
        "spread": spread.to_dict(),
    }


def run_processes(models, argvs, env, *, processes, min_runs, min_time_s, max_runs, block_size, timeout_s,
                  progress, with_samples: bool = False):
    """``processes`` rounds; each starts a fresh runner per model (in a rotated order) and interleaves
    them for its share of the runs. The rounds merge into one result per model."""
    deadline = time.monotonic() + timeout_s
    share_runs = max(1, math.ceil(min_runs / processes))
    share_max = max(share_runs, max_runs // processes)
    raws: list[list] = [[] for _ in models]
    samples: list[list] = [[] for _ in models]
    done_before = [0] * len(models)
    for round_ in range(processes):
        order = [(i + round_) % len(models) for i in range(len(models))]

        def round_progress(index: int, runs: int, order=order) -> None:
            progress(order[index], done_before[order[index]] + runs)

        left = max(deadline - time.monotonic(), 1e-3)
        round_raws, round_samples = run_interleaved(
            [models[i] for i in order], [argvs[i] for i in order], env, min_runs=share_runs,
            min_time_s=min_time_s / processes, max_runs=share_max, block_size=block_size, timeout_s=left,
            progress=round_progress)
        for position, index in enumerate(order):
            raws[index].append(round_raws[position])
            samples[index].append(round_samples[position])
            done_before[index] += len(round_samples[position])
    results = [to_result(m, document(merge_processes(r, s))) for m, r, s in zip(models, raws, samples)]
    return (results, samples) if with_samples else results


def with_reference(models, argvs, timing_args, env, *, processes, progress, **settings):
    """Time ``models`` and the reference workload in the same rounds; attach its per-round medians."""
    import shutil
    import tempfile


    folder = tempfile.mkdtemp(prefix="edgekit-reference-")
    try:
        ref = BenchModel(write_reference_model(folder), "onnx")
        ref_argv = [*RUNNER_COMMAND, str(ref.path), "--format", "onnx", *timing_args]

        def user_progress(index: int, runs: int) -> None:
            if index < len(models):
                progress(index, runs)

        results, samples = run_processes([*models, ref], [*argvs, ref_argv], env, processes=processes,
                                         progress=user_progress, with_samples=True, **settings)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    medians = [statistics.median(s) / 1e6 for s in samples[-1]]
    attached = {"name": REFERENCE_NAME, "process_p50": medians}
    return [replace(r, reference=attached) for r in results[:-1]]
