"""``edgekit generate``: continue a prompt, or answer a chat message, with a language model."""

from __future__ import annotations

from typing import List, Optional

import typer

from edgekit.cli.common import console, echo_json, handles_errors
from edgekit.core.errors import UsageError
from edgekit.llm.generation import generate_text
from edgekit.llm.gguf.importer import is_gguf_source


@handles_errors
def generate_command(
    checkpoint: str = typer.Argument(..., metavar="ARTIFACT", help="Artifact folder of a language model (a checkpoint, or its quantized/exported artifact), or gguf:PATH / gguf:NAME (run in memory)."),
    prompt_arg: Optional[str] = typer.Argument(None, metavar="PROMPT", help="Text to continue (a chat model: the user's message)."),
    prompt: Optional[str] = typer.Option(None, "--prompt", "-p", help="The prompt, as an option (instead of PROMPT)."),
    max_tokens: int = typer.Option(100, "--max-tokens", help="Tokens to generate at most (prompt + these must fit the model's context)."),
    temperature: float = typer.Option(0.8, help="Sampling temperature (0: greedy)."),
    top_k: int = typer.Option(20, "--top-k", help="Sample among the k most likely tokens (0: all)."),
    top_p: Optional[float] = typer.Option(None, "--top-p", help="Sample among the most likely tokens that hold this much probability (default: 0.95 for pretrained chat models, 1 = off for edgekit's own)."),
    seed: Optional[int] = typer.Option(None, help="Random seed for reproducible samples."),
    stop: Optional[List[str]] = typer.Option(None, "--stop", help="End the text where this string appears (not printed); repeatable."),
    chat: Optional[bool] = typer.Option(None, "--chat/--raw", help="Chat: the prompt is the user's message in the model's chat template (default when the model has one); raw: the prompt as it is."),
    system: Optional[str] = typer.Option(None, "--system", help="System message for --chat."),
    device: str = typer.Option("cpu", help="cpu, cuda, cuda:N, mps or auto."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Model file to run: checkpoint, onnx, executorch or torchscript (default: the first of these the artifact has)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads (default: as edgekit bench: the artifact's target's count, else all cores, at most this host's cores minus one)."),
    context: Optional[int] = typer.Option(None, "--context", help="KV-cache length for a gguf: source (default 1024)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (no streaming)."),
) -> None:
    """Generate text from a language model: a pretrained one (edgekit import gguf:...; chat, KV cache,
    streaming) or a transformer-lm/lstm-lm (checkpoint, or int8/exported ONNX, .pte or TorchScript).

    \b
    edgekit generate runs/smollm2 "What is the capital of France?"
    edgekit generate runs/smollm2 --raw "The capital of France is" --temperature 0
    """
    if (prompt_arg is None) == (prompt is None):
        raise UsageError("give the prompt once: as PROMPT or with --prompt")
    text = prompt_arg if prompt is None else prompt
    out = console()
    streaming = not as_json and _cached(checkpoint)  # a pretrained model's reply is printed as it comes

    def show(piece: str) -> None:
        out.file.write(piece)
        out.file.flush()

    result = generate_text(checkpoint, text, max_tokens, temperature, top_k, seed, device, fmt, threads, top_p=top_p,
                           stop=tuple(stop or ()), chat=chat, system=system, on_text=show if streaming else None,
                           context=context)
    if streaming:
        show("\n")
    if as_json:
        echo_json({"prompt": result.prompt, "text": result.text, "tokens": result.tokens,
                   "tokens_per_s": result.tokens_per_s, "threads": result.threads, "notes": list(result.notes),
                   "prompt_tokens": result.prompt_tokens, "stop": result.stop, "chat": result.chat,
                   "first_token_s": result.first_token_s})
        return
    if not streaming:
        out.print(result.prompt + result.text, markup=False)
    err = console(stderr=True)
    timing = f"{result.tokens} tokens, {result.tokens_per_s:,.1f} tokens/s"
    if result.first_token_s is not None:
        timing += f" (prompt of {result.prompt_tokens} tokens: first token after {result.first_token_s * 1000:,.0f} ms)"
    err.print(f"{timing} on {result.threads} thread{'s' if result.threads != 1 else ''}; ended by {result.stop}",
              style="dim", markup=False)
    for note in result.notes:
        err.print(f"note: {note}", style="dim", markup=False)


def _cached(source: str) -> bool:
    """A pretrained model with a KV cache (a llama artifact or a gguf: source): its reply streams."""
    if is_gguf_source(source):
        return True
    try:
        from edgekit.formats.artifacts import load_manifest
        from edgekit.formats.artifacts import is_cached_family

        return is_cached_family(load_manifest(source, verify=False)[1])
    except Exception:  # noqa: BLE001 - generate_text reports a bad artifact with its own error
        return False


def register(app: typer.Typer) -> None:
    app.command("generate")(generate_command)
