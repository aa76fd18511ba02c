"""Each requested format stands alone: one that fails (a lowering error, a parity refusal) becomes a
row with its reason, its files are removed, and the other formats are still written.

A run where every format failed raises the first failure, as a one-format run always did. A failure
of the environment (a full disk, a quota, a read-only or failing device: ``ENVIRONMENT_ERRNOS``) is
no format's fault: it ends the whole run, as before.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import STORAGE_ERRNOS, EdgekitError, first_line

# OSErrors of the machine, not of one format: they end the run (exit 1, nothing left), never a row
ENVIRONMENT_ERRNOS = STORAGE_ERRNOS

EXIT_SOME_FAILED = 4  # some formats written, some failed (each failure is a row with its reason)


class SomeFormatsFailed(EdgekitError):
    """Some of the requested formats (or variants) failed; the others were written."""

    exit_code = EXIT_SOME_FAILED


@dataclass
class FormatFailure:
    format: str
    stage: str  # where it failed: quantize (the route, lowering), check (parity, fidelity)
    reason: str
    error: BaseException

    def to_dict(self) -> dict:
        return {"format": self.format, "stage": self.stage, "reason": self.reason}


def environment_failure(exc: BaseException) -> OSError | None:
    """The OSError of the environment (``ENVIRONMENT_ERRNOS``) in ``exc``'s cause/context chain,
    if any: a library that wrapped a full disk into its own error still ends the run."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS:
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def reason(exc: BaseException) -> str:
    """One line: an edgekit error's own message; anything else with its type named."""
    line = first_line(exc, 300)
    return line if isinstance(exc, EdgekitError) else f"{type(exc).__name__}: {line}"


class Attempts:
    """The formats of one run: what each wrote into ``dest``, and which failed."""

    def __init__(self, dest: Path):
        self.dest = Path(dest)
        self.failures: list[FormatFailure] = []
        self.written: dict[str, set[Path]] = {}

    def failed(self, fmt: str) -> bool:
        return any(f.format == fmt for f in self.failures)

    def run(self, fmt: str, stage: str, step):
        """``step()``'s result, or None when it raised (then the format's files are removed and its
        failure recorded). Interruptions (Ctrl-C) and failures of the environment (a full disk:
        ``environment_failure``) pass through: they end the run."""
        before = set(self.dest.iterdir())
        try:
            result = step()
        except Exception as exc:  # noqa: BLE001 - any failure of one format is that format's row
            self._remove(set(self.dest.iterdir()) - before)
            self._remove(self.written.pop(fmt, set()))
            if environment_failure(exc) is not None:
                raise
            self.failures.append(FormatFailure(fmt, stage, reason(exc), exc))
            return None
        self.written.setdefault(fmt, set()).update(set(self.dest.iterdir()) - before)
        return result

    def _remove(self, paths) -> None:
        for path in paths:
            if path.name.startswith("."):  # the job's scratch space is shared by every format
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def raise_if_nothing_written(self, written: int) -> None:
        if not written and self.failures:
            raise self.failures[0].error

    def summary(self) -> list[dict]:
        return [f.to_dict() for f in self.failures]


def failed_rows(manifest) -> list[dict]:
    """The formats a run failed to write: a quantized artifact's (``quantization.failed``) or an
    export's own (``metrics.failed``; an export's quantization block is its parent's)."""
    if manifest.kind == "export":
        found = (manifest.metrics or {}).get("failed")
    else:
        found = (manifest.quantization or {}).get("failed")
    return [row for row in found if isinstance(row, dict)] if isinstance(found, list) else []


def partial_failure(failed: list[dict], total: int) -> SomeFormatsFailed | None:
    """The error a command ends with when ``failed`` (manifest rows) is not empty."""
    if not failed:
        return None
    rows = "; ".join(f"{row['format']}: {row['reason']}" for row in failed)
    return SomeFormatsFailed(f"{len(failed)} of {total} formats failed ({rows}); the others were written")


