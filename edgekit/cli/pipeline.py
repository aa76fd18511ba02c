"""``edgekit pipeline``: the whole journey on one model, one command."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, handles_errors, split_csv
from edgekit.errors import GateFailed


@handles_errors
def pipeline_command(
    target: str = typer.Option("rpi4", "--target", "-t", help="Target profile name or .toml path."),
    model: str = typer.Option("digits-cnn", "--model", "-m", help="Zoo model to train."),
    out: Path = typer.Option(Path("runs/pipeline"), "--out", "-o", help="Output folder."),
    epochs: int = typer.Option(20, help="Training epochs."),
    seed: int = typer.Option(0, help="Random seed."),
    calib: Path = typer.Option(Path("calib_data/digits"), "--calib", help="Calibration data for static int8."),
    methods: str = typer.Option("dynamic,static", "--methods", help="Comma-separated int8 methods."),
    formats: str = typer.Option("torchscript,onnx", "--format", help="Comma-separated formats."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Benchmark threads (default: the target's, capped at this host's cores)."),
    min_runs: int = typer.Option(50, "--min-runs", help="Minimum timed runs per variant."),
    min_time: float = typer.Option(0.5, "--min-time", help="Minimum timed seconds per variant."),
    max_size_mb: Optional[str] = typer.Option(None, "--max-size-mb", help="Override the size budget (e.g. 4, 512KiB)."),
    max_p50_ms: Optional[str] = typer.Option(None, "--max-p50-ms", help="Override the p50 latency budget (e.g. 5, 5ms)."),
    max_p99_ms: Optional[str] = typer.Option(None, "--max-p99-ms", help="Override the p99 latency budget (e.g. 20, 0.02s)."),
    max_peak_rss_mb: Optional[str] = typer.Option(None, "--max-peak-rss-mb", help="Override the peak RSS budget."),
    max_accuracy_drop: Optional[str] = typer.Option(None, "--max-accuracy-drop", help="Override the accuracy-drop budget: points (1, 1pt) or relative (0.5%)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Project budget file (edgekit.toml / pyproject.toml)."),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="Start from this checkpoint artifact (from `edgekit train`) instead of training."),
    force: bool = typer.Option(False, "--force", help="Go on when the model is estimated not to fit the target's RAM (a warning instead of an error)."),
) -> None:
    """Train, quantize (dynamic + static int8), export, benchmark every variant and gate on budgets.

    Exit codes: 0 all budgets met, 3 a budget failed, 2 usage error, 1 tool error.
    """
    from rich.markup import escape
    from rich.table import Table

    from edgekit.pipeline import PipelineConfig, ratio, run_pipeline

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
        formats=tuple(split_csv(formats)),
        threads=threads,
        min_runs=min_runs,
        min_time_s=min_time,
        budget_overrides={k: v for k, v in overrides.items() if v is not None},
        config_path=config,
        checkpoint=checkpoint,
        force=force,
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
    for warning in result.warnings:
        out_console.print(f"[yellow]Warning:[/yellow] {escape(warning)}")
    for check in result.gate_report.failures:
        out_console.print(f"[red]FAIL[/red] {escape(check.model)}: {escape(check.message)}")
    out_console.print(f"Results: {out / 'pipeline.md'}, {out / 'pipeline.json'}, {out / 'gate.md'}, {out / 'junit.xml'}")
    if not result.passed:
        raise GateFailed(f"{len(result.gate_report.failures)} budget check(s) failed for target {target}")


def register(app: typer.Typer) -> None:
    app.command("pipeline")(pipeline_command)
