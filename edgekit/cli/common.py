"""Shared CLI plumbing: error mapping, warning hygiene, rendering helpers."""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
import warnings
from typing import Any, Callable

import typer

from edgekit.errors import EXIT_TOOL_ERROR, EdgekitError, GateFailed, first_line


def debug_enabled() -> bool:
    return bool(os.environ.get("EDGEKIT_DEBUG"))


def report_error(exc: BaseException, code: int, unexpected: bool = False) -> typer.Exit:
    """Print ``Error: <one line>`` on stderr (traceback only in debug) and return the Exit to raise."""
    if debug_enabled():
        import traceback

        traceback.print_exception(exc)
    from edgekit.outputs import safe_text

    text = str(exc).strip()
    message = safe_text(text.splitlines()[0] if text else type(exc).__name__)
    if unexpected:
        message = f"internal error ({type(exc).__name__}): {message} (rerun with --debug for the traceback)"
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(code)


def handles_errors(func: Callable) -> Callable:
    """Wrap a command so edgekit errors become one line on stderr and their exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            with warnings.catch_warnings():
                if not debug_enabled():
                    # torch.ao / torch.jit / exporter deprecation chatter is ours to handle, not the user's.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", FutureWarning)
                    warnings.filterwarnings("ignore", module=r"torch\..*")
                return func(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except GateFailed as exc:
            # A broken budget is a verdict, not a malfunction: one plain line, exit code 3.
            typer.echo(first_line(exc), err=True)
            raise typer.Exit(exc.exit_code) from None
        except EdgekitError as exc:
            raise report_error(exc, exc.exit_code) from None
        except KeyboardInterrupt:
            typer.echo("Error: interrupted", err=True)
            raise typer.Exit(130) from None
        except OSError as exc:
            if exc.errno in _STORAGE_ERRNOS:  # disk full, quota, read-only: the user's to fix, not a bug
                raise report_error(EdgekitError(_storage_message(exc)), EXIT_TOOL_ERROR) from None
            raise report_error(exc, EXIT_TOOL_ERROR, unexpected=True) from None
        except Exception as exc:  # noqa: BLE001 - last line of defence for a CLI command
            raise report_error(exc, EXIT_TOOL_ERROR, unexpected=True) from None

    return wrapper


_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def _storage_message(exc: OSError) -> str:
    where = f" while writing {exc.filename}" if exc.filename else ""
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
