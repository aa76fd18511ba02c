"""``edgekit bench --emulate``: the options' checks, the run and the instruction-count table."""

from __future__ import annotations

from pathlib import Path

from edgekit.bench.display import plain
from edgekit.bench.emulated import bench_emulated
from edgekit.records.instructions import CLASS_LABELS, CLASSES, millions
from edgekit.core.errors import UsageError


def run_emulated(artifacts: list[Path], *, target, threads, runs: int, conflicting: dict[str, bool], quiet: bool):
    from edgekit.cli.common import console, progress_enabled

    given = [name for name, used in conflicting.items() if used]
    if given:
        raise UsageError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply to --emulate (it counts "
                         "instructions of one process per model under QEMU, on the model's own inputs)")
    err = console(stderr=True)
    say = (lambda line: err.print(f"  {line}", markup=False)) if not quiet and progress_enabled() else None
    return bench_emulated(artifacts, target=target, threads=threads, runs=runs, progress=say)


def render_instructions(results):
    """Per inference: executed instructions on the target's core, their classes, and start-up apart."""
    from rich import box
    from rich.table import Table


    first = results[0].emulated["instructions"]["per_run"]
    table = Table(title="edgekit bench --emulate: executed aarch64 instructions per inference", box=box.SIMPLE_HEAD,
                  collapse_padding=True, pad_edge=False)
    headers = ["model", "precision", "core", "instr\n/run", "× first", *(f"{CLASS_LABELS[c]}\n%" for c in CLASSES),
               "start-up\ninstr"]
    for header in headers:
        table.add_column(header, justify="left" if header in ("model", "precision", "core") else "right", no_wrap=True)
    for r in results:
        emulated = r.emulated
        counts = emulated["instructions"]
        per_run = counts["per_run"]
        shares = [f"{100 * counts['classes'][c] / per_run:.1f}" if per_run else "–" for c in CLASSES]
        row = [r.model.variant or Path(r.model.path).name, r.model.precision, emulated["cpu"], millions(per_run),
               f"{per_run / first:.2f}×" if first else "–", *shares, millions(counts["startup"])]
        table.add_row(*(plain(cell) for cell in row))
    return table


def footer(results) -> list[str]:
    first = results[0].emulated
    lines = [f"counted with qemu {first['qemu']} ({first['plugin']}), {first['threads']} thread(s), "
             f"per run = the count between the runner's marks around {first['runs']} timed runs / {first['runs']}; "
             "start-up = the count before them (loading, the first inference)"]
    notes: list[str] = []
    for r in results:
        for note in r.notes:
            if note not in notes:
                notes.append(note)
    return lines + [f"note: {n}" for n in notes]
