"""Errors of the board scripts: a usage error (exit 2) or a model that failed (exit 1)."""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class BoardUsageError(Exception):
    """The command line or an input file is wrong (exit 2)."""


class BoardError(Exception):
    """The model would not load or run (exit 1)."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
