"""``edgekit export``: verified TorchScript / ONNX files with provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import handles_errors, split_csv


@handles_errors
def export_command(
    source: Path = typer.Argument(..., help="Checkpoint or quantized artifact folder."),
    out: Path = typer.Option(Path("dist"), "--out", "-o", help="Output folder."),
    formats: str = typer.Option("torchscript,onnx", "--format", help="Comma-separated: torchscript, onnx."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target profile (default: the artifact's, else rpi4)."),
    opset: Optional[int] = typer.Option(None, "--opset", help="ONNX opset (default: the target's)."),
    onnx_exporter: str = typer.Option("torchscript", "--onnx-exporter", help="torchscript | dynamo (torch.export)."),
) -> None:
    """Export and verify: each file is reloaded and compared with the float model at two batch sizes."""
    from edgekit.cli.quantize import render_files
    from edgekit.export.api import export

    folder, manifest = export(source, out, tuple(split_csv(formats)), target, opset, onnx_exporter)
    render_files(manifest, f"Exported for {manifest.target} -> {folder}")


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
