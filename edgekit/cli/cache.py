"""``edgekit cache``: show what edgekit keeps in its cache folder, and clear it."""

from __future__ import annotations

from typing import Optional

import typer

from edgekit.cli.common import console, echo_json, handles_errors
from edgekit.cli.options import JsonFlag


@handles_errors
def cache_command(
    parts: Optional[list[str]] = typer.Argument(None, metavar="PART",
                                                help="Only these parts: calibration, text, rootfs (default: all)."),
    clear: bool = typer.Option(False, "--clear", help="Remove the parts (only edgekit's own sub-folders)."),
    as_json: JsonFlag = False,
) -> None:
    """Show the cache folder ($EDGEKIT_CACHE_DIR, else ~/.cache/edgekit) and its size; --clear empties it."""
    from edgekit.cache import PARTS, cache_root, clear as clear_parts, usage
    from edgekit.errors import UsageError

    for name in parts or ():
        if name not in PARTS:
            raise UsageError(f"unknown cache part {name!r}; choose from: {', '.join(PARTS)}")
    root = cache_root()
    if clear:
        removed = clear_parts(parts or None, root)
        freed = sum(p.bytes for p in removed)
        if as_json:
            echo_json({"root": str(root), "removed": [p.to_dict() for p in removed], "freed_bytes": freed})
        else:
            names = ", ".join(p.name for p in removed) or "nothing (already empty)"
            console().print(f"Cleared {names} in {root}: {_size(freed)} freed", markup=False, highlight=False)
        return
    listed = [p for p in usage(root) if not parts or p.name in parts]
    if as_json:
        echo_json({"root": str(root), "parts": [p.to_dict() for p in listed],
                   "total_bytes": sum(p.bytes for p in listed if p.ours)})
        return
    from rich.table import Table

    table = Table("part", "size", "files", "holds", title=f"edgekit cache: {root}", title_justify="left")
    for p in listed:
        table.add_row(p.name, _size(p.bytes) if p.exists else "-", str(p.files) if p.exists else "-", p.description)
    table.caption = f"{_size(sum(p.bytes for p in listed if p.ours))} in edgekit's parts; `edgekit cache --clear` removes them"
    console().print(table)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def register(app: typer.Typer) -> None:
    app.command("cache")(cache_command)
