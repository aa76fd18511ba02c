"""Render a GateReport: Markdown (for ``$GITHUB_STEP_SUMMARY``), JUnit XML, versioned JSON, and
plain rows for a terminal table. Every function returns text or data; none prints or writes.
Markdown and JUnit XML carry edgekit's generator comment (``edgekit.core.outputs.generator_mark``), the
JSON its schema: what lets a later run replace its own report and refuse a user's file."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Iterable

from edgekit.gates.results import (
    FAIL,
    PASS,
    Check,
    GateReport,
    fmt_limit,
    is_floor,
    fmt_measured,
    fmt_value,
)
from edgekit.core.outputs import generator_mark, safe_text

GATE_SCHEMA = "edgekit.gate"
GATE_SCHEMA_VERSION = 1

COLUMNS = ("model", "check", "measured", "limit", "source", "status")
_EMOJI = {PASS: "✅", FAIL: "❌"}
_SKIP_EMOJI = "⚪"


def status_text(check: Check, emoji: bool = False) -> str:
    """``pass``, ``FAIL``, ``skipped (no accuracy recorded)``, ``pass (within noise)``; with a mark."""
    word = {PASS: "pass", FAIL: "FAIL"}.get(check.status, "skipped")
    text = f"{word} ({check.detail})" if check.detail else word
    if emoji:
        text = f"{_EMOJI.get(check.status, _SKIP_EMOJI)} {text}"
    return text


def verdict(report: GateReport) -> str:
    """One line: ``gate passed: 9 of 10 checks passed, 1 skipped for 2 models`` or
    ``gate failed: 2 of 10 checks failed for 2 models (a: size 4.20 MB > 4.00 MB; ...)``."""
    counts = report.counts
    skipped = f", {counts['skipped']} skipped" if counts["skipped"] else ""
    models = len(report.models)
    scope = f" for {models} model{'s' if models != 1 else ''}"
    if report.passed:
        return f"gate passed: {counts['passed']} of {counts['checks']} checks passed{skipped}{scope}"
    first = "; ".join(f"{c.model}: {_brief(c)}" for c in report.failures[:3])
    more = f"; and {counts['failed'] - 3} more" if counts["failed"] > 3 else ""
    return safe_text(f"gate failed: {counts['failed']} of {counts['checks']} checks failed{skipped}{scope} ({first}{more})")


def _brief(check: Check) -> str:
    if check.measured is None or check.limit is None:
        return f"{check.label} {check.detail or 'failed'}"
    limit = fmt_value(check.limit, check.unit, signed=check.metric.endswith("_regression"))
    return f"{check.label} {fmt_measured(check)} {'<' if is_floor(check.metric) else '>'} {limit}"


# -- terminal ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One table row: the cells under ``COLUMNS`` and the check's status (for colouring)."""

    cells: tuple[str, ...]
    status: str


def table_rows(report: GateReport) -> list[Row]:
    """Cells as text a terminal shows and never obeys: names and sources come from result and
    budget files, so control characters (ESC, OSC) in them are escaped."""
    return [
        Row(tuple(safe_text(cell) for cell in (c.model, c.label, fmt_measured(c), fmt_limit(c), c.source, status_text(c))),
            c.status)
        for c in report.checks
    ]


# -- Markdown ---------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    text = safe_text(" ".join(str(text).split()))  # no newlines inside a row; ESC/OSC shown, never sent
    for char, escaped in (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), (">", "&gt;"), ("`", "\\`")):
        text = text.replace(char, escaped)
    return text or " "


def to_markdown(report: GateReport, title: str = "edgekit gate") -> str:
    """A GitHub-flavoured Markdown summary: verdict, one table row per check, failures, notes."""
    mark = "✅" if report.passed else "❌"
    lines = [f"## {mark} {title}: {'passed' if report.passed else 'failed'}", "", _md_cell(verdict(report)), ""]
    if report.checks:
        lines += ["| Model | Check | Measured | Limit | Source | Status |", "|---|---|--:|--:|---|---|"]
        for row, check in zip(table_rows(report), report.checks):
            cells = [_md_cell(cell) for cell in row.cells[:-1]]
            status = _md_cell(status_text(check, emoji=True))
            if check.failed:
                status = f"**{status}**"
            lines.append("| " + " | ".join([*cells, status]) + " |")
        lines.append("")
    if report.failures:
        lines += ["**Failures**", ""]
        lines += [f"- {_md_cell(c.model)}: {_md_cell(c.message)}" for c in report.failures]
        lines.append("")
    if report.notes:
        lines += ["**Notes**", ""]
        lines += [f"- {_md_cell(note)}" for note in report.notes]
        lines.append("")
    lines += [_mark("markdown"), ""]  # hidden when rendered; proves the file is edgekit's (edgekit.core.outputs)
    return "\n".join(lines)


def _mark(fmt: str) -> str:
    return generator_mark(fmt)


# -- JUnit XML --------------------------------------------------------------------------------------

# Characters XML 1.0 cannot carry at all (C0 controls other than tab/newline/CR, surrogates, FFFE/FFFF).
_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(text: Any) -> str:
    return _XML_ILLEGAL.sub("\ufffd", str(text))


def _counts(checks: Iterable[Check]) -> dict[str, str]:
    checks = list(checks)
    return {
        "tests": str(len(checks)),
        "failures": str(sum(c.failed for c in checks)),
        "errors": "0",
        "skipped": str(sum(c.skipped for c in checks)),
        "time": "0",
    }


def to_junit_xml(report: GateReport, name: str = "edgekit gate") -> str:
    """JUnit XML: one ``<testsuite>`` per model, one ``<testcase>`` per budget check.

    A broken budget is a ``<failure message=... type="BudgetExceeded">``; a check that could not
    be measured is ``<skipped message=...>``. Text is escaped by ElementTree; characters XML 1.0
    cannot hold at all are replaced with U+FFFD, so the output always parses.
    """
    root = ET.Element("testsuites", {"name": _x(name), **_counts(report.checks)})
    for model in report.models:
        checks = report.checks_for(model.name)
        suite = ET.SubElement(root, "testsuite", {"name": _x(model.name), **_counts(checks)})
        props = ET.SubElement(suite, "properties")
        for key in ("path", "variant", "format", "precision", "target", "mode"):
            value = getattr(model, key)
            if value:
                ET.SubElement(props, "property", {"name": key, "value": _x(value)})
        for check in checks:
            case = ET.SubElement(
                suite, "testcase", {"classname": _x(f"edgekit.gate.{model.name}"), "name": _x(check.label), "time": "0"}
            )
            if check.failed:
                failure = ET.SubElement(case, "failure", {"message": _x(check.message), "type": "BudgetExceeded"})
                failure.text = _x(
                    f"{check.label}: measured {fmt_measured(check)}, limit {fmt_limit(check)} (source: {check.source})"
                )
            elif check.skipped:
                ET.SubElement(case, "skipped", {"message": _x(check.message)})
            ET.SubElement(case, "system-out").text = _x(f"{check.message} [source: {check.source}]")
    ET.indent(root)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n' + _mark("junit") + "\n"
            + ET.tostring(root, encoding="unicode") + "\n")


# -- JSON -------------------------------------------------------------------------------------------


def _num(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def to_json(report: GateReport, inputs: Iterable[str] = (), baseline: str | None = None) -> dict:
    """The versioned gate document: ``{"schema": "edgekit.gate", "schema_version": 1, ...}``.

    Non-finite numbers become ``null`` so the document is strict JSON.
    """
    return {
        "schema": GATE_SCHEMA,
        "schema_version": GATE_SCHEMA_VERSION,
        "passed": report.passed,
        "verdict": verdict(report),
        "summary": report.counts,
        "inputs": list(inputs),
        "baseline": baseline,
        "models": [
            {
                "name": m.name,
                "path": m.path,
                "variant": m.variant,
                "format": m.format,
                "precision": m.precision,
                "target": m.target,
                "mode": m.mode,
                "passed": not any(c.failed for c in report.checks_for(m.name)),
            }
            for m in report.models
        ],
        "checks": [
            {
                "model": c.model,
                "metric": c.metric,
                "label": c.label,
                "measured": _num(c.measured),
                "limit": _num(c.limit),
                "unit": c.unit,
                "status": c.status,
                "detail": c.detail,
                "source": c.source,
                "message": c.message,
            }
            for c in report.checks
        ],
        "notes": list(report.notes),
    }
