"""Plug-ins: the modules other packages declare under one of edgekit's entry point groups."""

from __future__ import annotations

from edgekit.errors import UsageError


def load_plugins(group: str, what: str) -> None:
    """Import every module declared under ``group``; one that fails is a one-line UsageError naming it."""
    from importlib.metadata import entry_points

    for point in entry_points(group=group):
        try:
            point.load()
        except Exception as exc:  # noqa: BLE001 - a plug-in's import error is the user's to read, in one line
            detail = str(exc).splitlines()[0] if str(exc) else ""
            raise UsageError(f"the {what} plug-in {point.name!r} ({point.value}) does not load: "
                             f"{type(exc).__name__}: {detail}") from None
