"""``edgekit generate``: continue a prompt with a trained language model."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, echo_json, handles_errors


@handles_errors
def generate_command(
    checkpoint: Path = typer.Argument(..., metavar="ARTIFACT", help="Artifact folder of a language model: a checkpoint, or its quantized/exported artifact."),
    prompt: str = typer.Option(..., "--prompt", "-p", help="Text to continue."),
    max_tokens: int = typer.Option(100, "--max-tokens", help="Tokens to generate."),
    temperature: float = typer.Option(0.8, help="Sampling temperature (0: greedy)."),
    top_k: int = typer.Option(20, "--top-k", help="Sample among the k most likely tokens (0: all)."),
    seed: Optional[int] = typer.Option(None, help="Random seed for reproducible samples."),
    device: str = typer.Option("cpu", help="cpu, cuda, cuda:N, mps or auto."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Model file to run: checkpoint, onnx, executorch or torchscript (default: the first of these the artifact has)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads (default: as edgekit bench: the artifact's target's count, else all cores, at most this host's cores minus one)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Generate text from a transformer-lm or lstm-lm artifact (checkpoint, or int8/exported ONNX, .pte or TorchScript)."""
    from edgekit.models.generation import generate_text

    result = generate_text(checkpoint, prompt, max_tokens, temperature, top_k, seed, device, fmt, threads)
    if as_json:
        echo_json({"prompt": result.prompt, "text": result.text, "tokens": result.tokens,
                   "tokens_per_s": result.tokens_per_s, "threads": result.threads, "notes": list(result.notes)})
        return
    console().print(result.prompt + result.text, markup=False)
    err = console(stderr=True)
    err.print(f"{result.tokens} tokens, {result.tokens_per_s:,.0f} tokens/s on {result.threads} "
              f"thread{'s' if result.threads != 1 else ''}", style="dim", markup=False)
    for note in result.notes:
        err.print(f"note: {note}", style="dim", markup=False)


def register(app: typer.Typer) -> None:
    app.command("generate")(generate_command)
