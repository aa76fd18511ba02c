"""How many CPU threads a model runs on here: one rule for ``bench``, ``generate`` and ``serve``.

Explicit wins; otherwise the target's count (or all cores), but never every core of this host:
one is left for the system. Why: spin-waiting runtime threads (OpenMP in torch) on a fully busy
small host -- a 2-vCPU VM or CI runner -- were seen to stall for ~60 ms per call (p99 1,500x
p50), and ``edgekit generate`` of a transformer-lm ran at 12-14 tokens/s on torch's default of
both cores against 456 with one. The cap applies to runs on this host; on the board the runner
gets the target's threads.

    from edgekit.core.threads import resolve_threads
    threads, notes = resolve_threads(user_threads, target)   # target: a Target, or None

Light: no torch import (``edgekit --help`` and the bench parent stay free of it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgekit.board.facts import usable_cores
from edgekit.core.errors import EdgekitError
from edgekit.core.targets import available_targets, load_target

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.core.targets import Target


def resolve_threads(threads: int | None, target: "Target | None") -> tuple[int, list[str]]:
    """(threads to use, notes). Explicit ``threads`` wins (a note when it exceeds this host's
    usable cores); else the target's count, else all cores, capped at the usable cores minus one."""
    host = usable_cores()
    if threads is not None:
        if threads > host:
            return threads, [f"{threads} threads asked for on a host with {host} usable cores"]
        return threads, []
    wanted = target.threads if target is not None else host
    limit = max(1, host - 1)
    if wanted <= limit:
        return wanted, []
    asked = f"target {target.name} uses {target.threads}" if target is not None else "default: all cores"
    return limit, [
        f"threads capped at {limit} of this host's {host} usable cores, one left for the system ({asked}); "
        "pass --threads to override"
    ]


def target_of(manifest) -> "Target | None":
    """The target an artifact was made for (its manifest's ``target``), when it is one known here."""
    name = getattr(manifest, "target", None)
    if not isinstance(name, str) or name not in available_targets():  # a name, never a path from a file
        return None
    try:
        return load_target(name)
    except EdgekitError:
        return None
