"""Shared CLI plumbing: error mapping, warning hygiene, rendering helpers."""

from __future__ import annotations

import contextvars
import errno
import functools
import json
import logging
import os
import sys
import warnings
from typing import Any, Callable

import typer

from edgekit.core.errors import EXIT_TOOL_ERROR, EXIT_USAGE, STORAGE_ERRNOS, EdgekitError, GateFailed, UsageError, first_line
from edgekit.core.outputs import safe_text


def debug_enabled() -> bool:
    return bool(os.environ.get("EDGEKIT_DEBUG"))


_COMMAND: "contextvars.ContextVar[str | None]" = contextvars.ContextVar("edgekit_command", default=None)


def debug_hint() -> str:
    """How to rerun the running command with tracebacks: ``--debug`` is an option of ``edgekit``
    itself, so it goes before the command's name (``edgekit quantize ... --debug`` is refused)."""
    command = _COMMAND.get()
    return f"rerun as `edgekit --debug {command} ...`" if command else "rerun as `edgekit --debug ...`"


def report_error(exc: BaseException, code: int, unexpected: bool = False) -> typer.Exit:
    """Print ``Error: <one line>`` on stderr (traceback only in debug) and return the Exit to raise."""
    if debug_enabled():
        import traceback

        traceback.print_exception(exc)

    text = str(exc).strip()
    message = safe_text(text.splitlines()[0] if text else type(exc).__name__)
    if unexpected:
        message = f"internal error ({type(exc).__name__}): {message} ({debug_hint()} for the traceback)"
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(code)


def handles_errors(func: Callable) -> Callable:
    """Wrap a command so edgekit errors become one line on stderr and their exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        _COMMAND.set(func.__name__.removesuffix("_command"))  # the name the hint for --debug gives
        quiet_logs = not debug_enabled()
        previous_disable = logging.root.manager.disable
        try:
            with warnings.catch_warnings():
                if quiet_logs:
                    # torch.ao / torch.jit / exporter deprecation chatter is ours to handle, not the user's.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", FutureWarning)
                    warnings.filterwarnings("ignore", module=r"torch\..*")
                    # ... and so are the warnings third-party libraries log (torch's pytree and
                    # kernel notices, transformers, ONNX Runtime's quantizer, torchao): errors
                    # still pass, and --debug shows everything.
                    logging.disable(logging.WARNING)
                # JAX (litert-torch's) warns at every fork once imported; edgekit forks only to start
                # programs (the child execs at once), and a pipeline starts dozens after a tflite export
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
                return func(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except GateFailed as exc:
            # A broken budget is a verdict, not a malfunction: one plain line, exit code 3.
            typer.echo(first_line(exc), err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            typer.echo("Error: interrupted", err=True)
            raise typer.Exit(130) from None
        except Exception as exc:  # noqa: BLE001 - last line of defence for a CLI command
            raise _report(exc) from None
        finally:
            if quiet_logs:
                logging.disable(previous_disable)

    return wrapper


# Storage errors (edgekit.core.errors.STORAGE_ERRNOS) are tool errors (exit 1) wherever they surface, even
# wrapped by a library or an exporter into another error.
# A path the user gave that cannot be one (a name of 300 characters, a loop of links): exit 2.
_PATH_ERRNOS = {errno.ENAMETOOLONG, errno.ELOOP}
# Permission problems and a few more OS refusals: one line, exit 1, never "internal error".
_OS_TOOL_ERRNOS = {errno.EACCES, errno.EPERM, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ETXTBSY, errno.EBUSY}


def _report(exc: BaseException) -> typer.Exit:
    """The one line and exit code for an exception a command let out."""
    storage = _in_chain(exc, lambda e: isinstance(e, OSError) and e.errno in STORAGE_ERRNOS)
    if storage is not None and getattr(exc, "exit_code", None) != EXIT_TOOL_ERROR:  # tool errors say it already
        return report_error(EdgekitError(_storage_message(storage)), EXIT_TOOL_ERROR)
    if isinstance(exc, EdgekitError):
        return report_error(exc, exc.exit_code)
    if isinstance(exc, OSError) and exc.errno in _PATH_ERRNOS:
        return report_error(UsageError(_os_message(exc)), EXIT_USAGE)
    if isinstance(exc, OSError) and exc.errno in _OS_TOOL_ERRNOS:
        return report_error(EdgekitError(_os_message(exc)), EXIT_TOOL_ERROR)
    return report_error(exc, EXIT_TOOL_ERROR, unexpected=True)


def _in_chain(exc: BaseException, match: Callable[[BaseException], bool]) -> BaseException | None:
    """The first exception in ``exc``'s cause/context chain that ``match``es (``exc`` included).

    A library that turns ENOSPC into its own error (``raise ... from None`` still keeps the
    original as ``__context__``) does not hide what happened."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if match(exc):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _short_path(name) -> str:
    text = os.fsdecode(name) if isinstance(name, (str, bytes, os.PathLike)) else str(name)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


def _os_message(exc: OSError) -> str:
    where = f": {_short_path(exc.filename)}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _storage_message(exc: OSError) -> str:
    where = f" while writing {_short_path(exc.filename)}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}; nothing was left half-written: free space (or choose another --out) and run again"


def echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=True))


def console(stderr: bool = False):
    """A rich console; wide enough for our tables when output goes to a file or a CI log."""
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = Console(stderr=stderr, highlight=False, width=140)
    return out


def progress_enabled() -> bool:
    return sys.stderr.isatty() and not os.environ.get("EDGEKIT_NO_PROGRESS")


def split_csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def progress_line(message: str) -> None:
    """A progress line on stderr (the long steps: downloads, compiling); quiet with EDGEKIT_NO_PROGRESS."""
    if not os.environ.get("EDGEKIT_NO_PROGRESS"):
        typer.echo(message, err=True)
