"""Several worker processes per model (what pyperf does): merge their runs into one result.

One process can settle at a speed another would not (memory layout, the core it landed on, the
frequency state it found); one long-lived process per model therefore shifts a whole model by
up to tens of percent. ``edgekit.bench.api.bench(processes=N)`` times every model in N rounds;
each round starts a fresh runner per model and interleaves them. This module merges the rounds:
the timing figures come from all calls pooled, the ``spread`` from the per-process medians
(``edgekit.bench.stats``), whose confidence interval holds the between-process variance.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from edgekit.bench.runner import summarize_ns
from edgekit.bench.stats import spread_of


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
