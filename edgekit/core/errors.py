"""One exception family. The CLI maps each class to an exit code and a one-line message."""

from __future__ import annotations

import errno

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_GATE_FAILED = 3

# OSErrors of the machine's storage (disk full, quota, read-only, file too large, I/O error): the
# user's to fix, never a bug and never one format's failure; they end a run wherever they surface
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO})


class EdgekitError(Exception):
    """Base class: something went wrong that the user can act on."""

    exit_code = EXIT_TOOL_ERROR


class UsageError(EdgekitError, ValueError):
    """Bad option, unknown name, malformed value given by the user."""

    exit_code = EXIT_USAGE


class InputFileError(EdgekitError):
    """A file the user handed us is missing, truncated, malformed or hostile."""

    exit_code = EXIT_USAGE


class ParityError(EdgekitError):
    """An exported artifact does not reproduce the float model within tolerance."""


class BenchError(EdgekitError):
    """A benchmark run failed (runtime missing, runner crashed, timeout)."""


class RemoteError(EdgekitError):
    """A remote (SSH) operation failed."""


class GateFailed(EdgekitError):
    """At least one budget was broken."""

    exit_code = EXIT_GATE_FAILED


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """The first line of an exception's message (its type name when empty), cut at ``limit`` chars."""
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else type(exc).__name__
    return line if limit is None or len(line) <= limit else line[:limit - 3] + "..."


def unknown_name(kind: str, value: str, allowed) -> UsageError:
    """The standard error for a name that is not in a registry."""
    choices = ", ".join(sorted(allowed))
    return UsageError(f"unknown {kind} {value!r}; choose one of: {choices}")
