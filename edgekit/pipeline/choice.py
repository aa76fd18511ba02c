"""Which runtime to deploy on the target: every variant counted on the target's emulated core, across
formats and precisions, ranked by executed instructions per inference; the cheapest one that keeps
the quality budget and passed its gate is the choice.

The counts come from ``edgekit.pipeline.target`` (one thread, deterministic): ``edgekit-run``'s for
the formats it runs natively (no Python on the board), the runtime's own wheel in a Python bundle for
the formats that only run in one (``edgekit.pipeline.python_counts``: those counts include Python's
per-call work, as on the board). Every variant is counted on the same inputs, its artifact's reference
inputs (``edgekit.emulate.count_inputs``), so no ranking follows what a runner happened to be fed.
Instructions are not time (no cache or pipeline model), so the
choice says it is from emulated counts, and this host's timings stay beside it as host figures.
A format edgekit-run runs and a Python bundle can too (ONNX) is ranked both ways, each its own row.
A file counted twice by one runtime (the native row runs the static ``.pte`` again) is ranked once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

COUNTED_BASES = ("estimated", "counted")  # TargetCost bases that carry an emulated instruction count


def runtime_choice(rows: Sequence, float_accuracy: float | None, max_drop_points: float | None,
                   target) -> dict | None:
    """The ranking and the choice (a JSON-able dict for pipeline.json), or None when nothing was counted
    on the target's core (emulation off, not an aarch64 board, measured on the board itself)."""
    from edgekit.estimate.on_target import counted_formats
    from edgekit.pipeline.verdict import DEFAULT_MAX_DROP_POINTS, drop_points

    budget = DEFAULT_MAX_DROP_POINTS if max_drop_points is None else max_drop_points
    native = counted_formats()
    ranked, not_counted, seen = [], [], set()
    for row, cost, python in _counts(rows, native):
        runtime = _runtime(row.format, python)
        if cost.get("basis") not in COUNTED_BASES or not cost.get("instructions"):
            name = f"{row.variant} in {runtime}" if python and row.format in native else row.variant
            not_counted.append({"variant": name, "reason": cost.get("note") or "no emulated count"})
            continue
        key = (row.format, python, _digest(row.path))
        if key in seen:
            continue
        seen.add(key)
        drop = drop_points(row, float_accuracy)
        over = drop is not None and drop > budget + 1e-9
        why_not = ("gate failed" if row.gate == "fail"
                   else f"quality drop {drop:.2f} pt over the {budget:g} pt budget" if over else None)
        ranked.append({"variant": row.variant, "format": row.format, "runtime": runtime, "python": python,
                       "instructions": int(cost["instructions"]), "host_p50_ms": row.p50_ms, "path": row.path,
                       "why_not": why_not})
    if not ranked:
        return None
    ranked.sort(key=lambda item: (item["instructions"], item["python"]))
    cheapest = ranked[0]["instructions"]
    for item in ranked:
        item["ratio"] = item["instructions"] / cheapest
    eligible = [item for item in ranked if item["why_not"] is None]
    best = eligible[0] if eligible else None
    recommended = None
    if best is not None:
        following = ranked[ranked.index(best) + 1:]
        after = None if not following else {"variant": following[0]["variant"], "runtime": following[0]["runtime"],
                                            "ratio": following[0]["instructions"] / best["instructions"]}
        recommended = {**{k: best[k] for k in ("variant", "format", "runtime", "python", "instructions", "ratio")},
                       "next": after, "bundle": _bundle_command(best, target.name)}
    return {"target": target.name, "core": target.core or target.arch, "threads": 1, "ranked": ranked,
            "recommended": recommended, "not_counted": not_counted}


def _counts(rows: Sequence, native: Sequence[str]):
    """(row, its cost on the target as a dict, whether Python runs it there): each row's own, then the
    count of its Python bundle where edgekit-run runs the format too (``VariantRow.in_python``)."""
    for row in rows:
        yield row, row.target or {}, row.format not in native
        if getattr(row, "in_python", None):
            yield row, row.in_python, True


def _digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return str(path)


def _runtime(fmt: str, python: bool) -> str:
    from edgekit.pipeline.python_counts import python_runtime

    return f"{python_runtime(fmt)} (Python)" if python else "edgekit-run (no Python)"


def _bundle_command(item: dict, target_name: str) -> str:
    folder = Path(item["path"]).parent
    runtime = "" if item["python"] else " --runtime native"
    return f"edgekit bundle {folder} --format {item['format']} --target {target_name}{runtime}"


def heading(choice: dict) -> str:
    return (f"Runtimes on {choice['target']}, by executed instructions per inference on its emulated {choice['core']} "
            "(one thread, counted under QEMU on the model's reference inputs where it has them; ratio to the cheapest; "
            "Python bundles include Python's per-call work; host p50 is this machine's):")


COLUMNS = ("variant", "format", "runs in", "instructions", "vs cheapest", "host p50 ms", "not chosen")


def cells(choice: dict) -> list[tuple[str, ...]]:
    return [(item["variant"], item["format"], item["runtime"], f"{item['instructions']:,}", f"{item['ratio']:.2f}x",
             f"{item['host_p50_ms']:.3f}", item["why_not"] or "") for item in choice["ranked"]]


def not_counted_lines(choice: dict) -> list[str]:
    """One line per reason: the variants that have no count on the core, and why."""
    reasons: dict[str, list[str]] = {}
    for item in choice["not_counted"]:
        reasons.setdefault(item["reason"], []).append(item["variant"])
    return [f"Not counted on {choice['core']}: {', '.join(variants)}: {reason.removeprefix('not counted: ')}"
            for reason, variants in reasons.items()]


def choice_line(choice: dict) -> str:
    best = choice["recommended"]
    if best is None:
        return (f"No runtime to recommend for {choice['target']}: every counted variant failed its gate or its "
                "quality budget.")
    where = "no Python on the board" if not best["python"] else "Python's per-call work included"
    after = best["next"]
    # the same file in its other runtime is named by the runtime
    named = after and (after["variant"] if after["variant"] != best["variant"] else
                       f"{after['variant']} in {after['runtime'].split(' (')[0]}")
    following = "" if after is None else f" (next: {named}, {after['ratio']:.2f}x)"
    if best["ratio"] == 1.0:
        fewest = f"the fewest of {len(choice['ranked'])} counted"
    else:
        cheapest = choice["ranked"][0]
        fewest = (f"{best['ratio']:.2f}x the cheapest ({cheapest['variant']}: {cheapest['why_not']}), the fewest "
                  "within budget")
    return (f"Fastest runtime for {choice['target']}: {best['variant']} in {best['runtime'].split(' (')[0]} ({where}): "
            f"{best['instructions']:,} instructions per inference, {fewest}{following}; from emulated counts on "
            f"{choice['core']}, not timed on a board. "
            f"Bundle it: {best['bundle']}")
