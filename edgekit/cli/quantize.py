"""``edgekit quantize``: int8 for a target, accuracy (or fidelity) measured for every file."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, handles_errors, progress_enabled, split_csv


@handles_errors
def quantize_command(
    source: str = typer.Argument(
        ..., help="Float checkpoint artifact folder, model.onnx, package.module:factory, or hf:CONFIG(.json|folder)."
    ),
    method: str = typer.Option("static", "--method", help="dynamic | static | qat."),
    out: Path = typer.Option(..., "--out", "-o", help="Output artifact folder."),
    target: str = typer.Option("rpi4", "--target", "-t", help="Target profile name or .toml path."),
    calib: Optional[Path] = typer.Option(None, "--calib", help="Calibration data folder/file (.npy/.npz); static only."),
    formats: Optional[str] = typer.Option(None, "--format", help="Comma-separated: torchscript, onnx (default: both; onnx for .onnx and hf: sources)."),
    calibrate_method: Optional[str] = typer.Option(None, "--calibrate-method", help="minmax | percentile | entropy | mse (ONNX path)."),
    percentile: Optional[float] = typer.Option(None, "--percentile", help="Percentile calibration: share of values kept (default 99.99)."),
    calib_bins: Optional[int] = typer.Option(None, "--calib-bins", help="Histogram calibrations: bins per tensor (default 2048)."),
    calib_batch_size: Optional[int] = typer.Option(None, "--calib-batch-size", help="Samples per calibration batch."),
    calib_max_samples: Optional[int] = typer.Option(None, "--calib-max-samples", help="Use at most this many samples."),
    no_calib_cache: bool = typer.Option(False, "--no-calib-cache", help="Recalibrate even when cached ranges match."),
    activation_type: Optional[str] = typer.Option(None, "--activation-type", help="ONNX: uint8 | int8 (default: the target's recipe)."),
    weight_type: Optional[str] = typer.Option(None, "--weight-type", help="ONNX: int8 | uint8 (default: the target's recipe)."),
    per_channel: Optional[bool] = typer.Option(None, "--per-channel/--per-tensor", help="Weight scales per output channel (default: the target's recipe)."),
    reduce_range: Optional[bool] = typer.Option(None, "--reduce-range/--no-reduce-range", help="ONNX: 7-bit weights (default: from the host/target ISA)."),
    op_types: Optional[str] = typer.Option(None, "--op-types", help="ONNX static: quantize only these op types, e.g. MatMul,Gemm (default: all)."),
    exclude: Optional[list[str]] = typer.Option(None, "--exclude", help="Keep this layer in float (ONNX node or torch module name; repeatable)."),
    max_drop: Optional[float] = typer.Option(None, "--max-drop", help="Accuracy budget in points: sensitive layers fall back to float until met."),
    auto: bool = typer.Option(False, "--auto", help="Try the target's candidate recipes; keep the fastest within the budget."),
    epochs: Optional[int] = typer.Option(None, "--qat-epochs", help="QAT: fine-tuning epochs (default 3)."),
    lr: Optional[float] = typer.Option(None, "--qat-lr", help="QAT: Adam learning rate (default 5e-4)."),
    input_shape: Optional[list[str]] = typer.Option(None, "--input-shape", help="Outside-zoo models: 1x3x224x224 or NAME=1x128 (N for a dynamic axis; repeatable)."),
    input_dtype: Optional[list[str]] = typer.Option(None, "--input-dtype", help="Outside-zoo models: float32 | int64 ... or NAME=int64."),
    dynamic_axes: Optional[list[str]] = typer.Option(None, "--dynamic-axes", help="Outside-zoo models: 0 or NAME=0:batch,1:sequence."),
    input_range: Optional[list[str]] = typer.Option(None, "--input-range", help="Integer inputs: NAME=LOW:HIGH (e.g. input_ids=0:30522)."),
    state_dict: Optional[Path] = typer.Option(None, "--state-dict", help="Weights for a package.module:factory or hf: model (loaded with weights_only=True)."),
) -> None:
    """Quantize to int8 for a target (torch path -> TorchScript, ONNX Runtime path -> ONNX)."""
    from edgekit.errors import UsageError

    source_options = {
        "input_shapes": input_shape or None, "input_dtypes": input_dtype or None,
        "dynamic_axes": dynamic_axes or None, "input_ranges": input_range or None, "state_dict": state_dict,
    }
    fmt = tuple(split_csv(formats)) if formats is not None else None
    err = console(stderr=True)
    if auto:
        chosen_by_auto = (
            ("--method", method != "static" or None), ("--calibrate-method", calibrate_method),
            ("--percentile", percentile), ("--calib-bins", calib_bins), ("--calib-batch-size", calib_batch_size),
            ("--calib-max-samples", calib_max_samples), ("--no-calib-cache", no_calib_cache),
            ("--activation-type", activation_type), ("--weight-type", weight_type),
            ("--per-channel/--per-tensor", per_channel is not None or None),
            ("--reduce-range/--no-reduce-range", reduce_range is not None or None), ("--op-types", op_types),
            ("--exclude", exclude), ("--qat-epochs", epochs), ("--qat-lr", lr),
        )
        tuned = [name for name, value in chosen_by_auto if value]
        if tuned:
            raise UsageError(f"--auto chooses the recipe itself; drop {', '.join(tuned)}")
        from edgekit.quantize.auto import NoCandidateError, quantize_auto

        with _calibration_progress(err) as report:
            try:
                folder, manifest, candidates = quantize_auto(
                    source, out, target, calib=calib, formats=fmt, max_drop=max_drop, progress=report, **source_options
                )
            except NoCandidateError as exc:
                console().print(render_candidates(exc.candidates, "Candidates (none within budget)"))
                raise
        _warn(err, manifest)
        console().print(render_candidates(candidates, f"Candidates for {manifest.target}"))
        render_files(manifest, f"Quantized (auto) for {manifest.target} -> {folder}")
        return

    from edgekit.quantize.api import quantize
    from edgekit.quantize.budget import AccuracyBudgetError

    options = {
        "calib": calib, "formats": fmt, "calibrate_method": calibrate_method, "percentile": percentile,
        "calib_bins": calib_bins, "calib_batch_size": calib_batch_size, "calib_max_samples": calib_max_samples,
        "calib_cache": False if no_calib_cache else None, "activation_type": activation_type,
        "weight_type": weight_type, "per_channel": per_channel, "reduce_range": reduce_range,
        "exclude": tuple(exclude) if exclude else None, "epochs": epochs, "lr": lr,
        "op_types": tuple(split_csv(op_types)) if op_types else None,
    }
    with _calibration_progress(err) as report:
        try:
            folder, manifest = quantize(source, method, out, target, max_drop=max_drop, progress=report,
                                        **source_options, **options)
        except AccuracyBudgetError as exc:
            console().print(render_budget(exc.report.to_dict(), "Accuracy budget NOT met"))
            raise
    _warn(err, manifest)
    render_files(manifest, f"Quantized ({method}) for {manifest.target} -> {folder}")
    for report in (manifest.quantization or {}).get("budget", {}).get("files", []):
        console().print(render_budget(report, f"Accuracy budget met ({report['format']})"))


def _warn(err, manifest) -> None:
    for line in (manifest.quantization or {}).get("warnings", []):
        err.print(f"Warning: {line}", style="yellow", markup=False)


@contextlib.contextmanager
def _calibration_progress(err):
    """A progress line with samples and ETA while calibration runs (only on a terminal)."""
    if not progress_enabled():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(), TextColumn("samples"),
                  TimeRemainingColumn(), console=err, transient=True) as bar:
        task = bar.add_task("calibrate", total=None)

        def report(state) -> None:
            bar.update(task, completed=state.samples, total=state.total)

        yield report


def render_files(manifest, title: str) -> None:
    from rich.table import Table

    table = Table("file", "format", "precision", "size KB", "accuracy", "float acc", "drop pts", "cosine vs float",
                  "SQNR dB", title=title)
    for entry in manifest.files:
        acc, ref = entry.metrics.get("accuracy"), entry.metrics.get("float_accuracy")
        parity = entry.metrics.get("parity") or {}
        drop = entry.metrics.get("accuracy_drop_points")
        table.add_row(
            " + ".join(entry.paths()),
            entry.format,
            entry.precision,
            f"{entry.total_bytes / 1024:.1f}",
            "-" if acc is None else f"{acc:.4f}",
            "-" if ref is None else f"{ref:.4f}",
            "-" if drop is None else f"{drop:.2f}",
            "-" if "cosine" not in parity else f"{parity['cosine']:.5f}",
            "-" if "sqnr_db" not in parity else f"{parity['sqnr_db']:.1f}",
        )
    console().print(table)


def render_budget(report: dict, title: str):
    from rich.table import Table

    table = Table("layer", "op", "drop if kept float", "kept float", title=title)
    fallback = set(report.get("float_layers", []))
    for entry in report.get("sensitivity", []):
        table.add_row(entry["layer"], entry["op"], f"{entry['drop_points']:.2f}", "yes" if entry["layer"] in fallback else "")
    lat = report.get("latency_ms") or {}
    cost = (f"size {report['bytes_int8'] / 1024:.1f} KB -> {report['bytes_final'] / 1024:.1f} KB"
            + (f"; p50 {lat['int8']:.3f} ms -> {lat['final']:.3f} ms" if "int8" in lat else ""))
    table.caption = (f"{report['format']}: drop {report['int8_drop_points']:.2f} -> {report['final_drop_points']:.2f} "
                     f"points (budget {report['budget_points']:g}); {cost}")
    return table


def render_candidates(candidates, title: str):
    from rich.table import Table

    table = Table("recipe", "format", "size KB", "metric", "value", "drop pts", "p50 ms", "in budget", "chosen", title=title)
    for c in candidates:
        table.add_row(
            c.name, c.format, f"{c.bytes / 1024:.1f}" if c.bytes else "-", c.metric or "-",
            "-" if c.value is None else f"{c.value:.4f}",
            "-" if c.drop_points is None else f"{c.drop_points:.2f}",
            "-" if c.p50_ms is None else f"{c.p50_ms:.3f}",
            ("error: " + c.error) if c.error else ("yes" if c.meets_budget else ("-" if c.method == "fp32" else "no")),
            "*" if c.chosen else "",
        )
    return table


def register(app: typer.Typer) -> None:
    app.command("quantize")(quantize_command)
