"""``edgekit export``: verified TorchScript / ONNX files with provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli import registry_help, llm_program
from edgekit.cli.common import echo_json, handles_errors, split_csv, console
from edgekit.cli.options import (
    DynamicAxesOpt,
    InputDtypeOpt,
    InputRangeOpt,
    InputShapeOpt,
    LLMKernelsOpt,
    JsonFlag,
    RandomInitOpt,
    StateDictOpt,
    TargetOpt,
    source_options as collect_source_options,
)
from edgekit.cli.quantize import fail_if_some_failed, render_files
from edgekit.export.api import export
from edgekit.sources.model_source import source_warnings


@handles_errors
def export_command(
    source: str = typer.Argument(..., metavar="SOURCE", help="Checkpoint or quantized artifact folder, or package.module:factory / hf:CONFIG."),
    out: Path = typer.Option(Path("dist"), "--out", "-o", help="Output folder."),
    formats: Optional[str] = typer.Option(
        None, "--format",
        help="Comma-separated: torchscript, onnx, executorch (.pte for XNNPACK; needs edgekit-ml[executorch]). "
             "Default: torchscript,onnx; for a quantized artifact, the formats it holds.",
    ),
    target: TargetOpt = None,
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
    input_shape: InputShapeOpt = None,
    input_dtype: InputDtypeOpt = None,
    dynamic_axes: DynamicAxesOpt = None,
    input_range: InputRangeOpt = None,
    state_dict: StateDictOpt = None,
    random_init: RandomInitOpt = False,
    kernels: LLMKernelsOpt = None,
    force: bool = typer.Option(False, "--force", help="Replace --out even when it holds files edgekit did not write (they are deleted)."),
    as_json: JsonFlag = False,
) -> None:
    """Export and verify: each file is reloaded and compared with the float model at two batch sizes.

    A language model imported from GGUF exports to one ExecuTorch program with its KV cache
    (--format executorch, the default for it), its perplexity measured against the checkpoint's."""
    if llm_program.is_llm_artifact(source):
        from edgekit.core.errors import UsageError

        if formats not in (None, "executorch"):
            raise UsageError("a language model imported from GGUF exports to --format executorch only "
                             "(a .pte program with its KV cache)")
        llm_program.refuse_int8_options({
            "--opset": opset, "--onnx-exporter": onnx_exporter if onnx_exporter != "auto" else None,
            "--torchscript-mode": torchscript_mode if torchscript_mode != "trace" else None, "--optimize": optimize,
            "--external-data": external_data, "--input-shape": input_shape, "--input-dtype": input_dtype,
            "--dynamic-axes": dynamic_axes, "--input-range": input_range, "--state-dict": state_dict,
            "--random-init": random_init}, "a language model's .pte program")
        llm_program.write(source, out, "fp32", "export", group_size=32, eval_tokens=None, eval_text=None, threads=None,
                          force=force, as_json=as_json, target=target, kernels=kernels)
        return
    if kernels is not None:
        from edgekit.core.errors import UsageError

        raise UsageError("--kernels applies to language models imported from GGUF")

    source_options = collect_source_options(input_shape, input_dtype, dynamic_axes, input_range, state_dict, random_init)
    folder, manifest = export(
        source, out, tuple(split_csv(formats)) if formats is not None else None, target, opset, onnx_exporter, torchscript_mode, optimize,
        external_data=True if external_data else None, force=force,
        **source_options,
    )

    for line in source_warnings(manifest.model):  # random weights (--random-init), a task head left out
        console(stderr=True).print(f"Warning: {line}", style="yellow", markup=False, soft_wrap=True)
    if as_json:
        from edgekit.cli.describe import manifest_summary

        echo_json(manifest_summary(folder, manifest))
        fail_if_some_failed(manifest)
        return
    render_files(manifest, f"Exported for {manifest.target} -> {folder}")
    fail_if_some_failed(manifest)  # some formats failed: their rows say why; exit 4


def register(app: typer.Typer) -> None:
    app.command("export", cls=registry_help.EXPORT)(export_command)
