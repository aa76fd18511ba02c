"""``edgekit pipeline``: the whole journey on one model, one command."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli import registry_help
from edgekit.cli.common import console, handles_errors, split_csv
from edgekit.cli.options import (
    ConfigOpt,
    DynamicAxesOpt,
    InputDtypeOpt,
    InputRangeOpt,
    InputShapeOpt,
    MaxDropOpt,
    MaxP50Opt,
    MaxP99Opt,
    MaxRssOpt,
    MaxSizeOpt,
    RandomInitOpt,
    SeedOpt,
    StateDictOpt,
    TargetOpt,
    source_options as collect_source_options,
)
from edgekit.core.errors import GateFailed, UsageError
from edgekit.pipeline.run import DEFAULT_MODEL, PipelineConfig, run_pipeline
from edgekit.pipeline.summary import cells, headers, skipped_lines, target_cell, title, target_line
from edgekit.pipeline.verdict import recommendation_line
from edgekit.sources.state_pairs import parse_sample_axes


@handles_errors
def pipeline_command(
    target: TargetOpt = "rpi4",
    model: Optional[str] = typer.Option(
        None, "--model", "-m", metavar="NAME",
        help="Zoo model to train (see `edgekit models`; default digits-mobilenet). Or start from --checkpoint / --source.",
    ),
    source: Optional[str] = typer.Option(
        None, "--source", metavar="SOURCE",
        help="Start from any model: model.onnx, package.module:factory, hf:CONFIG(.json|folder) or a checkpoint "
             "folder (with --input-shape ... as `edgekit quantize` takes them). Judged by fidelity to the float "
             "model when it has no labelled data.",
    ),
    out: Path = typer.Option(Path("runs/pipeline"), "--out", "-o", help="Output folder."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Training epochs of a --model (default: the model's; 6 for digits-mobilenet)."),
    seed: SeedOpt = 0,
    calib: Optional[Path] = typer.Option(None, "--calib", help="Calibration data for static int8, what `edgekit quantize --calib` takes: .npy/.npz samples of the inputs, a folder of images (with --calib-preprocess) or a .txt file, one text per line (default: the set edgekit ships for the model's dataset; without one, static is skipped)."),
    calib_preprocess: Optional[str] = typer.Option(
        None, "--calib-preprocess", metavar="KEY=VALUE,...|TOML",
        help="How --calib images become model inputs, as `edgekit quantize --calib-preprocess` takes it "
             "(e.g. resize=256,crop=224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225)."),
    tokenizer: Optional[Path] = typer.Option(
        None, "--tokenizer", metavar="FILE|FOLDER",
        help="Text --calib: the model's tokenizer.json (or its folder), as `edgekit quantize --tokenizer`."),
    eval_data: Optional[Path] = typer.Option(
        None, "--eval-data", metavar="PATH",
        help="Data every int8 variant is judged on (what --calib takes; docs/fidelity.md). Default: --calib "
             "(dynamic never sees it; static keeps a fifth of it out), else synthetic inputs, labelled as such."),
    require_eval_data: bool = typer.Option(False, "--require-eval-data", help="Refuse (exit 2, before training) to judge a model without labelled data on synthetic inputs."),
    sample_axis: Optional[list[str]] = typer.Option(
        None, "--sample-axis", metavar="INPUT=AXIS",
        help="The axis of INPUT that counts samples in --calib/--eval-data, as `edgekit quantize --sample-axis` "
             "takes it (repeatable)."),
    methods: Optional[str] = typer.Option(
        None, "--methods",
        help="Comma-separated int8 methods: dynamic, static, qat, or a plug-in's (default: dynamic,static; static is skipped, "
             "and said, when there is no calibration data; asked for, it needs --calib).",
    ),
    formats: Optional[str] = typer.Option(
        None, "--format",
        help="Comma-separated formats (default: torchscript, onnx, and executorch when edgekit-ml[executorch] is installed).",
    ),
    threads: Optional[int] = typer.Option(None, "--threads", help="Benchmark threads (default: the target's, capped at this host's cores)."),
    min_runs: int = typer.Option(50, "--min-runs", help="Minimum timed runs per variant."),
    min_time: float = typer.Option(0.5, "--min-time", help="Minimum timed seconds per variant."),
    processes: int = typer.Option(4, "--processes", help="Benchmark worker processes per variant (confidence intervals across them)."),
    reference: bool = typer.Option(True, "--reference/--no-reference", help="Time a reference workload in every bench round (regression gates normalise by it)."),
    emulate: bool = typer.Option(True, "--emulate/--no-emulate", help="Count each .pte variant on the target's core under QEMU and take the recommendation, the int8 warning and the target's latency budgets from that estimate, not this host's timings (skipped, with the reason, where QEMU cannot count)."),
    max_size_mb: MaxSizeOpt = None,
    max_p50_ms: MaxP50Opt = None,
    max_p99_ms: MaxP99Opt = None,
    max_peak_rss_mb: MaxRssOpt = None,
    max_accuracy_drop: MaxDropOpt = None,
    config: ConfigOpt = None,
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="Start from this checkpoint artifact (from `edgekit train`) instead of training."),
    input_shape: InputShapeOpt = None,
    input_dtype: InputDtypeOpt = None,
    dynamic_axes: DynamicAxesOpt = None,
    input_range: InputRangeOpt = None,
    state_dict: StateDictOpt = None,
    random_init: RandomInitOpt = False,
    force: bool = typer.Option(False, "--force", help="Go on when the model is estimated not to fit the target's RAM; replace --out even when it holds files edgekit did not write."),
) -> None:
    """Train (or take --checkpoint / --source), quantize (dynamic + static int8), export, benchmark every
    variant and gate on budgets: one table, with pipeline.json/md and report.html.

    Exit codes: 0 all budgets met, 3 a budget failed, 4 some variants failed (their rows say why),
    2 usage error, 1 tool error.
    """
    from rich.markup import escape
    from rich.table import Table


    given = [flag for flag, value in (("--model", model), ("--checkpoint", checkpoint), ("--source", source))
             if value is not None]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} both name the model; give one")

    overrides = {
        "max_size_mb": max_size_mb,
        "max_p50_ms": max_p50_ms,
        "max_p99_ms": max_p99_ms,
        "max_peak_rss_mb": max_peak_rss_mb,
        "max_accuracy_drop": max_accuracy_drop,
    }
    cfg = PipelineConfig(
        target=target,
        model=model or DEFAULT_MODEL,
        out=out,
        epochs=epochs,
        seed=seed,
        calib=calib,
        calib_preprocess=calib_preprocess,
        tokenizer=tokenizer,
        methods=tuple(split_csv(methods)) if methods is not None else None,
        formats=tuple(split_csv(formats)) if formats is not None else None,
        threads=threads,
        min_runs=min_runs,
        min_time_s=min_time,
        budget_overrides={k: v for k, v in overrides.items() if v is not None},
        config_path=config,
        checkpoint=checkpoint,
        source=source,
        source_options=collect_source_options(input_shape, input_dtype, dynamic_axes, input_range, state_dict,
                                                random_init),
        force=force,
        processes=processes,
        reference=reference,
        emulate=emulate,
        eval_data=eval_data,
        require_eval_data=require_eval_data,
        sample_axes=parse_sample_axes(sample_axis),
    )
    err = console(stderr=True)
    result = run_pipeline(cfg, progress=lambda message: err.print(f"[dim]>[/dim] {message}"))

    table = Table(*headers(result, target_column=False),
                  title=f"{title(result, target)} (ratios vs fp32 of the same format, same run)")
    for row in cells(result, target_column=False):
        gate = {"pass": "[green]pass[/green]", "fail": "[red]FAIL[/red]"}.get(row[-1], escape(row[-1]))
        table.add_row(*(escape(cell) for cell in row[:-1]), gate)
    out_console = console()
    out_console.print(table)

    basis = target_line(result)
    if basis:
        on_board = [(row.variant, target_cell(row)) for row in result.rows if target_cell(row) != "-"]
        if on_board:
            board = Table("variant", f"on {result.target_name}", title=f"{result.target_name}: per inference on the board")
            for variant, cell in on_board:
                board.add_row(escape(variant), escape(cell))
            out_console.print(board)
        out_console.print(basis, markup=False, highlight=False)
    out_console.print(recommendation_line(result.recommended), markup=False, highlight=False)
    if result.runtime_choice is not None:  # every counted variant ranked on the target's core, and the choice
        from edgekit.pipeline import choice as runtime

        ranked = Table(*runtime.COLUMNS, title=runtime.heading(result.runtime_choice))
        for row in runtime.cells(result.runtime_choice):
            ranked.add_row(*(escape(cell) for cell in row))
        out_console.print(ranked)
        for line in [*runtime.not_counted_lines(result.runtime_choice), runtime.choice_line(result.runtime_choice)]:
            out_console.print(line, markup=False, highlight=False)
    for warning in result.warnings:
        out_console.print(f"[yellow]Warning:[/yellow] {escape(warning)}")
    for line in skipped_lines(result):
        out_console.print(line, markup=False, highlight=False)
    for check in result.gate_report.failures:
        out_console.print(f"[red]FAIL[/red] {escape(check.model)}: {escape(check.message)}")
    files = ("report.html", "pipeline.md", "pipeline.json", "bench.json", "gate.md", "gate.json", "junit.xml")
    out_console.print("Results: " + ", ".join(str(out / name) for name in files), markup=False, highlight=False)
    if result.failed:  # variants that could not be made: their rows say why (exit 4)
        from edgekit.quantize.each_format import SomeFormatsFailed

        names = [variant for skip in result.failed for variant in skip.variants]
        raise SomeFormatsFailed(f"{len(names)} variant(s) failed ({', '.join(names)}); the others were measured")
    if not result.passed:
        raise GateFailed(f"{len(result.gate_report.failures)} budget check(s) failed for target {target}")


def register(app: typer.Typer) -> None:
    app.command("pipeline", cls=registry_help.PIPELINE)(pipeline_command)
