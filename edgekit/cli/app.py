"""The ``edgekit`` command. Each command lives in its own module; heavy imports stay inside them."""

from __future__ import annotations

import os

import typer

from edgekit import __version__
from edgekit.cli import bench, bundle, export, gate, generate, pipeline, quantize, targets, train, verify

app = typer.Typer(
    name="edgekit",
    help="Take a PyTorch model to an ARM edge device: train, quantize, export, benchmark, gate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"edgekit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors (or set EDGEKIT_DEBUG=1)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    if debug:
        os.environ["EDGEKIT_DEBUG"] = "1"
        os.environ["TORCH_CPP_LOG_LEVEL"] = "WARNING"


# torch's C++ deprecation warnings (quantized tensors, qnnpack reduce_range) bypass Python's
# warnings module; keep them out of users' faces unless they ask for debug output.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

for module in (pipeline, train, generate, quantize, export, bundle, verify, bench, gate, targets):
    module.register(app)


def main() -> None:
    """Console entry point. Every command maps its own errors (see ``handles_errors``)."""
    app()
