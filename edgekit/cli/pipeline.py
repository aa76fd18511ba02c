"""``edgekit pipeline``: the whole journey on one model, one command."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, handles_errors, split_csv
from edgekit.cli.options import (
    ConfigOpt,
    MaxDropOpt,
    MaxP50Opt,
    MaxP99Opt,
    MaxRssOpt,
    MaxSizeOpt,
    ModelOpt,
    SeedOpt,
    TargetOpt,
)
from edgekit.errors import GateFailed


@handles_errors
def pipeline_command(
    target: TargetOpt = "rpi4",
    model: ModelOpt = "digits-mobilenet",
    out: Path = typer.Option(Path("runs/pipeline"), "--out", "-o", help="Output folder."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Training epochs (default: the model's; 6 for digits-mobilenet)."),
    seed: SeedOpt = 0,
    calib: Optional[Path] = typer.Option(None, "--calib", help="Calibration data for static int8 (default: the set edgekit ships for the model's dataset)."),
    methods: str = typer.Option("dynamic,static", "--methods", help="Comma-separated int8 methods."),
    formats: Optional[str] = typer.Option(
        None, "--format",
        help="Comma-separated formats (default: torchscript, onnx, and executorch when edgekit-ml[executorch] is installed).",
    ),
    threads: Optional[int] = typer.Option(None, "--threads", help="Benchmark threads (default: the target's, capped at this host's cores)."),
    min_runs: int = typer.Option(50, "--min-runs", help="Minimum timed runs per variant."),
    min_time: float = typer.Option(0.5, "--min-time", help="Minimum timed seconds per variant."),
    processes: int = typer.Option(4, "--processes", help="Benchmark worker processes per variant (confidence intervals across them)."),
    reference: bool = typer.Option(True, "--reference/--no-reference", help="Time a reference workload in every bench round (regression gates normalise by it)."),
    max_size_mb: MaxSizeOpt = None,
    max_p50_ms: MaxP50Opt = None,
    max_p99_ms: MaxP99Opt = None,
    max_peak_rss_mb: MaxRssOpt = None,
    max_accuracy_drop: MaxDropOpt = None,
    config: ConfigOpt = None,
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="Start from this checkpoint artifact (from `edgekit train`) instead of training."),
    force: bool = typer.Option(False, "--force", help="Go on when the model is estimated not to fit the target's RAM; replace --out even when it holds files edgekit did not write."),
) -> None:
    """Train, quantize (dynamic + static int8), export, benchmark every variant and gate on budgets.

    Exit codes: 0 all budgets met, 3 a budget failed, 2 usage error, 1 tool error.
    """
    from rich.markup import escape
    from rich.table import Table

    from edgekit.pipeline import PipelineConfig, ratio, recommendation_line, run_pipeline

    overrides = {
        "max_size_mb": max_size_mb,
        "max_p50_ms": max_p50_ms,
        "max_p99_ms": max_p99_ms,
        "max_peak_rss_mb": max_peak_rss_mb,
        "max_accuracy_drop": max_accuracy_drop,
    }
    cfg = PipelineConfig(
        target=target,
        model=model,
        out=out,
        epochs=epochs,
        seed=seed,
        calib=calib,
        methods=tuple(split_csv(methods)),
        formats=tuple(split_csv(formats)) if formats is not None else None,
        threads=threads,
        min_runs=min_runs,
        min_time_s=min_time,
        budget_overrides={k: v for k, v in overrides.items() if v is not None},
        config_path=config,
        checkpoint=checkpoint,
        force=force,
        processes=processes,
        reference=reference,
    )
    err = console(stderr=True)
    result = run_pipeline(cfg, progress=lambda message: err.print(f"[dim]>[/dim] {message}"))

    table = Table(
        "variant", "format", "size", "accuracy", "p50 ms", "p99 ms", "peak RSS", "gate",
        title=f"edgekit pipeline: {model} for {target} (ratios vs fp32 of the same format, same run)",
    )
    for row in result.rows:
        table.add_row(
            row.variant,
            row.format,
            f"{row.size_bytes / 1024:.1f} KB{ratio(row.size_ratio)}",
            "-" if row.accuracy is None else f"{100 * row.accuracy:.2f}%",
            f"{row.p50_ms:.3f}{ratio(row.p50_ratio)}",
            f"{row.p99_ms:.3f}",
            f"{row.peak_rss_mb:.0f} MB",
            {"pass": "[green]pass[/green]", "fail": "[red]FAIL[/red]"}.get(row.gate, row.gate),
        )
    out_console = console()
    out_console.print(table)
    out_console.print(recommendation_line(result.recommended), markup=False, highlight=False)
    for warning in result.warnings:
        out_console.print(f"[yellow]Warning:[/yellow] {escape(warning)}")
    for check in result.gate_report.failures:
        out_console.print(f"[red]FAIL[/red] {escape(check.model)}: {escape(check.message)}")
    files = ("report.html", "pipeline.md", "pipeline.json", "bench.json", "gate.md", "gate.json", "junit.xml")
    out_console.print("Results: " + ", ".join(str(out / name) for name in files), markup=False, highlight=False)
    if not result.passed:
        raise GateFailed(f"{len(result.gate_report.failures)} budget check(s) failed for target {target}")


def register(app: typer.Typer) -> None:
    app.command("pipeline")(pipeline_command)
