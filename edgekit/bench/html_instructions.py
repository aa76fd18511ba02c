"""The HTML report's section for emulated instruction counts (results of ``edgekit bench --emulate``)."""

from __future__ import annotations

import html

from edgekit.records.instructions import CLASS_LABELS, CLASSES, millions


def instructions_section(results, labels: list[str]) -> str:
    """A table of executed instructions per inference on the target's core; "" when no result has counts."""
    counted = [(r, label) for r, label in zip(results, labels) if r.emulated is not None]
    if not counted:
        return ""
    first = counted[0][0].emulated["instructions"]["per_run"]
    rows = []
    for r, label in counted:
        counts = r.emulated["instructions"]
        per_run = counts["per_run"]
        shares = "".join(f"<td>{100 * counts['classes'][c] / per_run:.1f}%</td>" if per_run else "<td>–</td>"
                         for c in CLASSES)
        ratio = f"{per_run / first:.2f}×" if first else "–"
        rows.append(f'<tr data-variant="{_e(label)}"><td>{_e(label)}</td><td>{_e(r.emulated["cpu"])}</td>'
                    f'<td class="instructions" data-count="{per_run}">{_e(millions(per_run))}</td>'
                    f"<td>{ratio}</td>{shares}<td>{_e(millions(counts['startup']))}</td></tr>")
    head = ("<tr><th>variant</th><th>core</th><th>instructions / inference</th><th>× first</th>"
            + "".join(f"<th>{_e(CLASS_LABELS[c])}</th>" for c in CLASSES) + "<th>start-up</th></tr>")
    facts = counted[0][0].emulated
    note = (f"Executed aarch64 instructions per inference on the target's core, counted under QEMU {facts['qemu']} "
            f"with edgekit's plugin ({facts['threads']} thread(s), {facts['runs']} inferences counted): deterministic, "
            "so a regression gate on them cannot flake. They are not the board's latency; start-up (process start, "
            "loading, the first call's extra work) is counted apart. The timings below are QEMU's on this host.")
    return (f'<h2>Executed instructions on the target\'s core (emulated)</h2>\n<table class="instructions">\n{head}\n'
            + "\n".join(rows) + f'\n</table>\n<p class="note">{_e(note)}</p>\n')


def _e(text) -> str:
    return html.escape(str(text), quote=True)
