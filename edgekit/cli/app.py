"""The ``edgekit`` command. Each command lives in its own module; heavy imports stay inside them."""

from __future__ import annotations

import os
import sys

import typer
from typer.core import TyperGroup

from edgekit._version import __version__
from edgekit.cli import (bench, bundle, cache, export, gate, generate, import_, info, loadtest, pipeline, quantize, serve,
                         targets, train, verify)


# click's base exception, wherever this typer gets click from (it may vendor its own copy).
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class _Group(TyperGroup):
    """Usage errors (a missing argument, a value that is not a number) end, like every other
    edgekit error, in one plain ``Error: ...`` line on stderr with exit code 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _ClickException as exc:
            if type(exc).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
                ctx = getattr(exc, "ctx", None)
                if ctx is not None:
                    typer.echo(ctx.get_usage(), err=True)
                    typer.echo(f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.", err=True)
                typer.echo(f"Error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Error: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_Group,
    name="edgekit",
    help="Take a PyTorch model to an ARM edge device: train, quantize, export, benchmark, gate.",
    no_args_is_help=True,
    # Shell completion: `edgekit --install-completion` (bash, zsh, fish, PowerShell).
    add_completion=True,
    # Plain click help: option names are never cut, and it reads well at 80 columns
    # (rich's option table truncated long names such as --calibrate-method).
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"edgekit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors (or set EDGEKIT_DEBUG=1)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    if debug:
        # For this invocation only: an app called in-process (tests, scripts) must not stay in debug.
        saved = {key: os.environ.get(key) for key in ("EDGEKIT_DEBUG", "TORCH_CPP_LOG_LEVEL")}
        os.environ["EDGEKIT_DEBUG"] = "1"
        os.environ["TORCH_CPP_LOG_LEVEL"] = "WARNING"
        ctx.call_on_close(lambda: _restore_env(saved))


def _restore_env(saved: dict) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# torch's C++ deprecation warnings (quantized tensors, qnnpack reduce_range) bypass Python's
# warnings module; keep them out of users' faces unless they ask for debug output.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

for module in (pipeline, train, import_, generate, quantize, export, bundle, verify, bench, serve, loadtest, gate, info, targets,
               cache):
    module.register(app)


def main() -> None:
    """Console entry point. Every command maps its own errors (see ``handles_errors``).

    SIGTERM (a cancelled CI job, ``kill``) is handled like Ctrl-C: the command unwinds, so
    temporaries are removed and a benchmark running on a board is stopped, then exits 130.
    """
    import signal

    def terminate(signum, frame):
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread of the main interpreter: leave the default
        pass
    app()
