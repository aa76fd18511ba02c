"""CI gates: bench results + budgets (+ a baseline) -> a GateReport -> exit code, JUnit, Markdown, JSON.

Pure functions, no heavy imports: ``edgekit gate`` must start instantly on a CI runner.

    from edgekit.records.result import load_results
    from edgekit.gates import gate_results, to_markdown

    report = gate_results(load_results("bench.json"), target="rpi4", overrides={"max_p99_ms": "25ms"})
    if not report.passed: ...
"""

from __future__ import annotations

from edgekit.gates.budgets import (
    METRICS,
    Budget,
    Budgets,
    find_project_file,
    load_project_budgets,
    parse_limit,
    parse_regression,
    resolve_budgets,
)
from edgekit.gates.evaluate import evaluate, gate_results, raise_for_status
from edgekit.gates.results import FAIL, PASS, SKIP, Check, GateReport, ModelRef
from edgekit.gates.report import (
    GATE_SCHEMA,
    GATE_SCHEMA_VERSION,
    table_rows,
    to_json,
    to_junit_xml,
    to_markdown,
    verdict,
)

__all__ = [
    "FAIL",
    "GATE_SCHEMA",
    "GATE_SCHEMA_VERSION",
    "METRICS",
    "PASS",
    "SKIP",
    "Budget",
    "Budgets",
    "Check",
    "GateReport",
    "ModelRef",
    "evaluate",
    "find_project_file",
    "gate_results",
    "load_project_budgets",
    "parse_limit",
    "parse_regression",
    "raise_for_status",
    "resolve_budgets",
    "table_rows",
    "to_json",
    "to_junit_xml",
    "to_markdown",
    "verdict",
]
