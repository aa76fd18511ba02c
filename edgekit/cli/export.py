"""``edgekit export``: verified TorchScript / ONNX files with provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import handles_errors, split_csv


@handles_errors
def export_command(
    source: str = typer.Argument(..., help="Checkpoint or quantized artifact folder, or package.module:factory / hf:CONFIG."),
    out: Path = typer.Option(Path("dist"), "--out", "-o", help="Output folder."),
    formats: str = typer.Option("torchscript,onnx", "--format", help="Comma-separated: torchscript, onnx."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target profile (default: the artifact's, else rpi4)."),
    opset: Optional[int] = typer.Option(None, "--opset", help="ONNX opset (default: the target's)."),
    onnx_exporter: str = typer.Option(
        "auto", "--onnx-exporter",
        help="auto (each model family's measured choice, falling back to the other exporter) | torchscript | dynamo (torch.export).",
    ),
    torchscript_mode: str = typer.Option("trace", "--torchscript-mode", help="trace | script (for data-dependent control flow)."),
    optimize: bool = typer.Option(False, "--optimize", help="Ship ONNX Runtime's offline-optimised graph (extended level, portable across CPUs)."),
    external_data: bool = typer.Option(
        False, "--external-data",
        help="Write ONNX weights to model.onnx.data beside the graph (always done for models over 2 GB).",
    ),
    input_shape: Optional[list[str]] = typer.Option(None, "--input-shape", help="Outside-zoo models: 1x3x224x224 or NAME=Nx128 (N: dynamic axis; repeatable)."),
    input_dtype: Optional[list[str]] = typer.Option(None, "--input-dtype", help="Outside-zoo models: float32, int64, ... or NAME=DTYPE."),
    dynamic_axes: Optional[list[str]] = typer.Option(None, "--dynamic-axes", help="Outside-zoo models: NAME=0:batch,1:sequence."),
    input_range: Optional[list[str]] = typer.Option(None, "--input-range", help="Outside-zoo models: valid values LOW:HIGH (e.g. token ids)."),
    state_dict: Optional[Path] = typer.Option(None, "--state-dict", help="Outside-zoo models: weights (plain tensors, loaded with weights_only=True)."),
) -> None:
    """Export and verify: each file is reloaded and compared with the float model at two batch sizes."""
    from edgekit.cli.quantize import render_files
    from edgekit.export.api import export

    source_options = {
        "input_shapes": input_shape or None, "input_dtypes": input_dtype or None, "dynamic_axes": dynamic_axes or None,
        "input_ranges": input_range or None, "state_dict": state_dict,
    }
    folder, manifest = export(
        source, out, tuple(split_csv(formats)), target, opset, onnx_exporter, torchscript_mode, optimize,
        external_data=True if external_data else None,
        **{k: v for k, v in source_options.items() if v is not None},
    )
    render_files(manifest, f"Exported for {manifest.target} -> {folder}")


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
