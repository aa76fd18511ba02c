"""``edgekit gate``: check bench results against budgets; exit 0 (pass), 3 (budget broken), 2 (usage)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, handles_errors

HELP = (
    "Check bench results against size / latency / memory / accuracy budgets (and a baseline).\n\n"
    "Budgets come from flags first, then the project file (the budgets table of edgekit.toml, or "
    "tool.edgekit.budgets in pyproject.toml, or the file given with --config), then the target profile "
    "(--target).\n\n"
    "Exit codes: 0 all budgets met, 3 a budget broken, 2 usage or input error, 1 tool error."
)

_UNITS = {
    "max_size_mb": "Model size budget, e.g. 4, 4MB, 512KiB (bare number: MB).",
    "max_p50_ms": "p50 latency budget, e.g. 15, 15ms, 0.015s (bare number: ms).",
    "max_p99_ms": "p99 latency budget, e.g. 20, 20ms, 0.02s (bare number: ms).",
    "max_peak_rss_mb": "Peak RSS budget, e.g. 768, 768MB, 1GiB (bare number: MB).",
    "max_accuracy_drop": "Accuracy drop budget: 1.0 or 1pt = percentage points; 0.5% = relative to the float accuracy.",
}


def register(app: typer.Typer) -> None:
    app.command("gate", help=HELP, no_args_is_help=True)(gate)


@handles_errors
def gate(
    results: list[Path] = typer.Argument(..., metavar="RESULT.json...", help="Bench result file(s) from `edgekit bench`."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target profile whose budgets apply (e.g. rpi4)."),
    config: Optional[Path] = typer.Option(
        None, "--config", help="Project file with a budgets table (default: ./edgekit.toml, else ./pyproject.toml)."
    ),
    max_size_mb: Optional[str] = typer.Option(None, "--max-size-mb", help=_UNITS["max_size_mb"]),
    max_p50_ms: Optional[str] = typer.Option(None, "--max-p50-ms", help=_UNITS["max_p50_ms"]),
    max_p99_ms: Optional[str] = typer.Option(None, "--max-p99-ms", help=_UNITS["max_p99_ms"]),
    max_peak_rss_mb: Optional[str] = typer.Option(None, "--max-peak-rss-mb", help=_UNITS["max_peak_rss_mb"]),
    max_accuracy_drop: Optional[str] = typer.Option(None, "--max-accuracy-drop", help=_UNITS["max_accuracy_drop"]),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="Bench result of the reference build (e.g. main)."),
    max_regression: Optional[str] = typer.Option(
        None, "--max-regression", help="Allowed p50 slow-down against --baseline: 10% or 0.10."
    ),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report here."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the versioned JSON gate report here."),
) -> None:
    from edgekit.bench.result import load_results
    from edgekit.errors import GateFailed, UsageError
    from edgekit.gates.budgets import NO_BUDGET_HELP, parse_regression, resolve_budgets
    from edgekit.gates.evaluate import evaluate
    from edgekit.gates.report import verdict

    outputs = _check_outputs({"--junit": junit, "--markdown": markdown, "--json": json_out}, [*results, baseline])
    overrides = {
        "max_size_mb": max_size_mb,
        "max_p50_ms": max_p50_ms,
        "max_p99_ms": max_p99_ms,
        "max_peak_rss_mb": max_peak_rss_mb,
        "max_accuracy_drop": max_accuracy_drop,
    }
    if (baseline is None) != (max_regression is None):
        raise UsageError(
            "--baseline and --max-regression go together (e.g. --baseline main.json --max-regression 10%)"
        )
    regression = parse_regression(max_regression, "--max-regression") if max_regression is not None else None
    budgets = resolve_budgets(target, config, overrides)
    loaded = [result for path in results for result in load_results(path)]
    base = load_results(baseline) if baseline is not None else None
    if not budgets and base is None:
        measured_for = sorted({r.target for r in loaded if r.target})
        hint = f"; these results were measured for --target {' / '.join(measured_for)}" if measured_for else ""
        raise UsageError(NO_BUDGET_HELP + hint)

    report = evaluate(
        loaded, budgets, base, regression, baseline_source=f"baseline {baseline.name}" if baseline else "baseline"
    )
    _write_reports(report, outputs, [str(p) for p in results], str(baseline) if baseline else None)
    _render(report)
    line = verdict(report)
    console().print(line, style="bold green" if report.passed else "bold red", markup=False)
    if not report.passed:
        counts = report.counts
        raise GateFailed(f"gate failed: {counts['failed']} of {counts['checks']} checks failed")


def _check_outputs(outputs: dict[str, Optional[Path]], inputs: list[Optional[Path]]) -> dict[str, Path]:
    """Refuse report paths that are folders, repeat each other or would overwrite an input."""
    from edgekit.errors import UsageError

    chosen = {flag: path for flag, path in outputs.items() if path is not None}
    seen: dict[Path, str] = {}
    inputs_resolved = {p.resolve() for p in inputs if p is not None}
    for flag, path in chosen.items():
        resolved = path.resolve()
        if path.is_dir():
            raise UsageError(f"{flag} {path} is a folder; give a file path")
        if resolved in inputs_resolved:
            raise UsageError(f"{flag} {path} would overwrite an input file")
        if resolved in seen:
            raise UsageError(f"{flag} and {seen[resolved]} both write {path}")
        seen[resolved] = flag
    return chosen


def _write_reports(report, outputs: dict[str, Path], inputs: list[str], baseline: Optional[str]) -> None:
    from edgekit.fileio import write_json, write_text
    from edgekit.gates.report import to_json, to_junit_xml, to_markdown

    if "--junit" in outputs:
        write_text(outputs["--junit"], to_junit_xml(report))
    if "--markdown" in outputs:
        write_text(outputs["--markdown"], to_markdown(report))
    if "--json" in outputs:
        write_json(outputs["--json"], to_json(report, inputs=inputs, baseline=baseline))


def _render(report) -> None:
    from rich.table import Table
    from rich.text import Text

    from edgekit.gates.evaluate import FAIL, PASS
    from edgekit.gates.report import COLUMNS, table_rows

    styles = {PASS: "green", FAIL: "bold red"}
    table = Table(title="edgekit gate", title_justify="left")
    for column in COLUMNS:
        table.add_column(column, overflow="fold", justify="right" if column in ("measured", "limit") else "left")
    for row in table_rows(report):
        cells = [Text(cell) for cell in row.cells]
        cells[-1].stylize(styles.get(row.status, "yellow"))
        table.add_row(*cells)
    console().print(table)
    err = console(stderr=True)
    for note in report.notes:
        err.print(Text(f"note: {note}", style="yellow"))
