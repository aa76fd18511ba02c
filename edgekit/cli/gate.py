"""``edgekit gate``: check bench results against budgets; exit 0 (pass), 3 (budget broken), 2 (usage)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, handles_errors
from edgekit.cli.options import (ConfigOpt, MaxDropOpt, MaxErrorRateOpt, MaxP50Opt, MaxP99Opt, MaxRssOpt, MaxSizeOpt, MaxTtftOpt, MinDecodeOpt,
                                 TargetOpt)
from edgekit.records.result import load_results
from edgekit.core.errors import EXIT_GATE_FAILED, UsageError
from edgekit.core.fileio import write_json, write_text
from edgekit.core.outputs import check_report_paths, safe_text
from edgekit.gates.budgets import NO_BUDGET_HELP, parse_regression, resolve_budgets
from edgekit.gates.evaluate import evaluate
from edgekit.gates.report import COLUMNS, table_rows, to_json, to_junit_xml, to_markdown, verdict
from edgekit.gates.results import FAIL, PASS

HELP = (
    "Check bench results against size / latency / memory / accuracy budgets (and a baseline); "
    "`edgekit loadtest` results also against an error-rate budget.\n\n"
    "Budgets come from flags first, then the project file (the budgets table of edgekit.toml, or "
    "tool.edgekit.budgets in pyproject.toml, or the file given with --config), then the target profile "
    "(--target).\n\n"
    "A target's latency budgets (p50/p99) describe its board: they hold results measured there "
    "(`edgekit bench BUNDLE --host ...`, or a run on a machine of the target's arch and core) and are "
    "reported as skipped, with what was measured, for results from elsewhere (an x86 CI runner), unless "
    "--local-latency. Latency budgets you give (flags, the project file) hold every result; emulated runs "
    "are never held to a latency budget. Size, memory, accuracy and error-rate budgets apply everywhere.\n\n"
    "Report files (--json, --junit, --markdown) replace only an empty file or a report edgekit wrote "
    "(its schema or generator mark proves it); any other file, a link, a FIFO or a device is refused.\n\n"
    "Exit codes: 0 all budgets met, 3 a budget broken, 2 usage or input error, 1 tool error."
)


def register(app: typer.Typer) -> None:
    app.command("gate", help=HELP, no_args_is_help=True)(gate)


@handles_errors
def gate(
    results: list[Path] = typer.Argument(..., metavar="RESULT.json...", help="Bench result file(s) from `edgekit bench`."),
    target: TargetOpt = None,
    config: ConfigOpt = None,
    max_size_mb: MaxSizeOpt = None,
    max_p50_ms: MaxP50Opt = None,
    max_p99_ms: MaxP99Opt = None,
    max_peak_rss_mb: MaxRssOpt = None,
    max_accuracy_drop: MaxDropOpt = None,
    max_error_rate: MaxErrorRateOpt = None,
    max_ttft_ms: MaxTtftOpt = None,
    min_decode_tps: MinDecodeOpt = None,
    min_cosine: Optional[str] = typer.Option(
        None, "--min-cosine", metavar="X", help="Fidelity floor: cosine to the float model, worst output (0.95 or 95%)."),
    min_agreement: Optional[str] = typer.Option(
        None, "--min-agreement", metavar="X",
        help="Fidelity floor: arg-max agreement of class outputs, per-timestep agreement of sequence outputs (0.9 or 90%)."),
    min_sqnr_db: Optional[str] = typer.Option(
        None, "--min-sqnr-db", metavar="DB", help="Fidelity floor: SQNR of the worst output, in dB (e.g. 20)."),
    min_correlation: Optional[str] = typer.Option(
        None, "--min-correlation", metavar="X",
        help="Fidelity floor: correlation of one-number-per-sample outputs (a probability, a regression) with the float model's."),
    require_eval_data: bool = typer.Option(
        False, "--require-eval-data",
        help="Exit 2 unless every result's fidelity was measured on real data (quantize --eval-data or --calib), not synthetic inputs."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="Bench result of the reference build (e.g. main)."),
    max_regression: Optional[str] = typer.Option(
        None, "--max-regression", help="Allowed p50 slow-down against --baseline: 10% or 0.10 (for bench --emulate results: instructions per inference, e.g. 1%)."
    ),
    min_delta_ms: float = typer.Option(
        0.005, "--min-delta-ms", help="A regression must also add more than this many ms to fail."
    ),
    local_latency: bool = typer.Option(
        False, "--local-latency",
        help="Hold results measured off the target's board (e.g. on this x86 host) to the target's p50/p99 budgets too.",
    ),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report here (an existing file only if empty or an edgekit JUnit report)."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY; an existing file only if empty or an edgekit Markdown report)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the versioned JSON gate report here (an existing file only if empty or an edgekit gate report)."),
) -> None:

    reports = {"--junit": junit, "--markdown": markdown, "--json": json_out}
    outputs = check_report_paths(reports, [*results, baseline, config], REPORT_FORMATS)
    overrides = {
        "max_size_mb": max_size_mb,
        "max_p50_ms": max_p50_ms,
        "max_p99_ms": max_p99_ms,
        "max_peak_rss_mb": max_peak_rss_mb,
        "max_accuracy_drop": max_accuracy_drop,
        "max_error_rate": max_error_rate,
        "max_ttft_ms": max_ttft_ms,
        "min_decode_tps": min_decode_tps,
        "min_cosine": min_cosine,
        "min_agreement": min_agreement,
        "min_sqnr_db": min_sqnr_db,
        "min_correlation": min_correlation,
    }
    if (baseline is None) != (max_regression is None):
        raise UsageError(
            "--baseline and --max-regression go together (e.g. --baseline main.json --max-regression 10%)"
        )
    regression = parse_regression(max_regression, "--max-regression") if max_regression is not None else None
    budgets = resolve_budgets(target, config, overrides)
    loaded = [result for path in results for result in load_results(path)]
    if require_eval_data:
        from edgekit.gates.fidelity import require_evidence

        require_evidence(loaded)
    base = load_results(baseline) if baseline is not None else None
    if not budgets and base is None:
        measured_for = sorted({r.target for r in loaded if r.target})
        hint = f"; these results were measured for --target {' / '.join(measured_for)}" if measured_for else ""
        raise UsageError(NO_BUDGET_HELP + hint)

    report = evaluate(
        loaded, budgets, base, regression, baseline_source=f"baseline {baseline.name}" if baseline else "baseline",
        min_delta_ms=min_delta_ms, local_latency=local_latency,
    )
    check_report_paths(reports, [*results, baseline, config], REPORT_FORMATS)  # still none a user's file
    _write_reports(report, outputs, [str(p) for p in results], str(baseline) if baseline else None)
    _render(report)
    line = verdict(report)
    console().print(line, style="bold green" if report.passed else "bold red", markup=False)
    if not report.passed:  # the verdict line above is the one message: exit 3 without an "Error:"
        raise typer.Exit(EXIT_GATE_FAILED)


#: What an existing report file must be for gate to replace it (edgekit.core.outputs.check_report_paths).
REPORT_FORMATS = {"--junit": "junit", "--markdown": "markdown", "--json": "json:edgekit.gate"}


def _write_reports(report, outputs: dict[str, Path], inputs: list[str], baseline: Optional[str]) -> None:
    if "--junit" in outputs:
        write_text(outputs["--junit"], to_junit_xml(report))
    if "--markdown" in outputs:
        write_text(outputs["--markdown"], to_markdown(report))
    if "--json" in outputs:
        write_json(outputs["--json"], to_json(report, inputs=inputs, baseline=baseline))


def _render(report) -> None:
    from rich.table import Table
    from rich.text import Text


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
        err.print(Text(f"note: {safe_text(note)}", style="yellow"))
