"""``edgekit quantize``: int8 from a float checkpoint, accuracy measured for every file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, handles_errors, split_csv


@handles_errors
def quantize_command(
    source: Path = typer.Argument(..., help="Float checkpoint artifact folder (from `edgekit train`)."),
    method: str = typer.Option("static", "--method", help="dynamic | static."),
    out: Path = typer.Option(..., "--out", "-o", help="Output artifact folder."),
    target: str = typer.Option("rpi4", "--target", "-t", help="Target profile name or .toml path."),
    calib: Optional[Path] = typer.Option(None, "--calib", help="Calibration data folder/file (.npy/.npz); static only."),
    formats: str = typer.Option("torchscript,onnx", "--format", help="Comma-separated: torchscript, onnx."),
    calibrate_method: Optional[str] = typer.Option(None, "--calibrate-method", help="minmax | entropy | percentile (ONNX path)."),
    calib_batch_size: Optional[int] = typer.Option(None, "--calib-batch-size", help="Samples per calibration batch."),
    calib_max_samples: Optional[int] = typer.Option(None, "--calib-max-samples", help="Use at most this many samples."),
) -> None:
    """Quantize to int8 for a target (torch path -> TorchScript, ONNX Runtime path -> ONNX)."""
    from edgekit.quantize.api import quantize

    folder, manifest = quantize(
        source,
        method,
        out,
        target,
        calib=calib,
        formats=tuple(split_csv(formats)),
        calibrate_method=calibrate_method,
        calib_batch_size=calib_batch_size,
        calib_max_samples=calib_max_samples,
    )
    render_files(manifest, f"Quantized ({method}) for {manifest.target} -> {folder}")


def render_files(manifest, title: str) -> None:
    from rich.table import Table

    table = Table("file", "format", "precision", "size KB", "accuracy", "float acc", "cosine vs float", title=title)
    for entry in manifest.files:
        acc, ref = entry.metrics.get("accuracy"), entry.metrics.get("float_accuracy")
        parity = entry.metrics.get("parity") or {}
        table.add_row(
            entry.path,
            entry.format,
            entry.precision,
            f"{entry.bytes / 1024:.1f}",
            "-" if acc is None else f"{acc:.4f}",
            "-" if ref is None else f"{ref:.4f}",
            "-" if "cosine" not in parity else f"{parity['cosine']:.5f}",
        )
    console().print(table)


def register(app: typer.Typer) -> None:
    app.command("quantize")(quantize_command)
