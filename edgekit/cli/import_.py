"""``edgekit import``: a pretrained model file as an edgekit checkpoint artifact (GGUF today)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, echo_json, handles_errors
from edgekit.cli.options import JsonFlag
from edgekit.cli.describe import manifest_summary
from edgekit.core.errors import UsageError
from edgekit.llm.gguf.importer import PREFIX, import_gguf


@handles_errors
def import_command(
    source: str = typer.Argument(..., metavar="SOURCE",
                                 help="gguf:PATH (a Llama-family .gguf file) or gguf:NAME of a packaged model (smollm2-135m)."),
    out: Path = typer.Option(..., "--out", "-o", help="Artifact folder to write (a checkpoint artifact)."),
    context: Optional[int] = typer.Option(None, "--context", help="KV-cache length in tokens: prompt + reply fit in it "
                                          "(default: 1024, at most the model's own context length)."),
    force: bool = typer.Option(False, "--force", help="Replace --out even when it holds files edgekit did not write (they are deleted)."),
    as_json: JsonFlag = False,
) -> None:
    """Import a pretrained model: weights (dequantized to float32), tokenizer and chat template, validated.

    \b
    edgekit import gguf:smollm2-135m --out runs/smollm2
    edgekit generate runs/smollm2 "What is the capital of France?"
    """
    if not source.startswith(PREFIX):
        raise UsageError(f"edgekit import takes gguf:PATH or gguf:NAME sources, not {source[:80]!r}")
    err = console(stderr=True)
    folder, manifest = import_gguf(source, out, context, force,
                                   progress=None if as_json else lambda text: err.print(text, style="dim", markup=False))
    if as_json:
        echo_json(manifest_summary(folder, manifest))
        return
    src = manifest.model.get("source", {})
    config = manifest.model.get("config", {})
    console().print(f"wrote {folder}: {config.get('family', 'llama')}, {src.get('parameters', 0) / 1e6:.1f} M parameters "
                    f"from {src.get('file')} ({', '.join(src.get('quant_types') or {})}), context {config.get('max_len')} "
                    f"tokens\nint4 program: {src.get('int4_codes')}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("import")(import_command)
