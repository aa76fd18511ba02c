"""``edgekit cache``: show what edgekit keeps in its cache folder, and clear it."""

from __future__ import annotations

from typing import Optional

import typer

from edgekit.cli.common import console, echo_json, handles_errors
from edgekit.cli.options import JsonFlag
from edgekit.core.cache import PARTS, cache_root, clear as clear_parts, rootfs_venvs, usage
from edgekit.core.errors import UsageError


@handles_errors
def cache_command(
    parts: Optional[list[str]] = typer.Argument(None, metavar="PART",
                                                help="Only these parts: calibration, text, rootfs, native (default: all)."),
    clear: bool = typer.Option(
        False, "--clear",
        help="Remove what edgekit wrote in the parts: only part folders carrying edgekit's CACHEDIR.TAG, and in them "
             "only entries edgekit recognises; anything else is left alone and listed. Refused when the cache folder "
             "is /, your home folder or above it, or the current folder or above it."),
    as_json: JsonFlag = False,
) -> None:
    """Show the cache folder ($EDGEKIT_CACHE_DIR, else ~/.cache/edgekit) and its size; --clear empties it."""
    for name in parts or ():
        if name not in PARTS:
            raise UsageError(f"unknown cache part {name!r}; choose from: {', '.join(PARTS)}")
    root = cache_root()
    if clear:
        removed = clear_parts(parts or None, root)
        freed = sum(p.bytes for p in removed)
        left = [p for p in usage(root) if not p.ours and (not parts or p.name.split("/")[0] in parts)]
        if as_json:
            echo_json({"root": str(root), "removed": [p.to_dict() for p in removed], "freed_bytes": freed,
                       "left_alone": [p.to_dict() for p in left]})
        else:
            from edgekit.core.outputs import safe_text

            names = ", ".join(p.name for p in removed) or "nothing (already empty)"
            out = console()
            out.print(f"Cleared {names} in {safe_text(root)}: {_size(freed)} freed", markup=False, highlight=False)
            for p in left:
                out.print(f"left alone (not edgekit's): {safe_text(p.path)}", markup=False, highlight=False)
        return
    listed = [p for p in usage(root) if not parts or p.name.split("/")[0] in parts]
    venvs = rootfs_venvs(root) if not parts or "rootfs" in parts else []
    if as_json:
        echo_json({"root": str(root), "parts": [p.to_dict() for p in listed],
                   "total_bytes": sum(p.bytes for p in listed if p.ours), "rootfs_venvs": [v.to_dict() for v in venvs]})
        return
    from rich.table import Table
    from rich.text import Text

    from edgekit.core.outputs import safe_text

    table = Table("part", "size", "files", "holds", title=Text(f"edgekit cache: {safe_text(root)}"), title_justify="left")
    for p in listed:
        table.add_row(Text(safe_text(p.name)), _size(p.bytes) if p.exists and p.ours else "-", str(p.files) if p.exists and p.ours else "-",
                      Text(p.description))
    table.caption = f"{_size(sum(p.bytes for p in listed if p.ours))} in edgekit's parts; `edgekit cache --clear` removes them"
    console().print(table)
    if venvs:
        from edgekit.core.venv_cache import MAX_GB_ENV, MAX_VENVS_ENV, limits

        count, most = limits()
        inner = Table("venv", "size", "last used", "from", "holds", title_justify="left",
                      title=Text(f"venvs in the rootfs (counted in it above): the {count} most recently used, "
                                 f"{_size(most)} at most, are kept ({MAX_VENVS_ENV}, {MAX_GB_ENV})"))
        for v in venvs:
            inner.add_row(Text(f"{safe_text(v.rootfs)}/{v.key}"), _size(v.bytes),
                          safe_text(v.used[:16].replace("T", " ")) or "-", safe_text(v.source) or "-",
                          Text(safe_text(v.packages)))
        console().print(inner)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def register(app: typer.Typer) -> None:
    app.command("cache")(cache_command)
