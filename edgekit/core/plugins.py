"""Plug-ins: the modules other packages declare under one of edgekit's entry point groups."""

from __future__ import annotations

from edgekit.core.errors import UsageError, first_line


def load_plugins(group: str, what: str) -> None:
    """Import every module declared under ``group``; one that fails is a one-line UsageError naming it."""
    from importlib.metadata import entry_points

    for point in entry_points(group=group):
        try:
            point.load()
        except KeyboardInterrupt:
            raise  # the user's interrupt, not the plug-in's failure
        # SystemExit and GeneratorExit too: a plug-in must not end edgekit (exit 0 having done nothing)
        except BaseException as exc:  # noqa: BLE001 - a plug-in's import error is the user's to read, in one line
            detail = first_line(exc, 200) if str(exc).strip() else ""
            if isinstance(exc, SystemExit):
                detail = f"it called exit({exc.code!r})"[:200]
            raise UsageError(f"the {what} plug-in {point.name!r} ({point.value}) does not load: "
                             f"{type(exc).__name__}{': ' + detail if detail else ''}") from None
