"""How figures read in tables and reports (terminal and HTML alike)."""

from __future__ import annotations

import math
from edgekit.core.outputs import safe_text


def three_digits(value: float | None) -> str:
    """Three significant digits, never scientific: 0.00463, 1.23, 12.3, 1234; "–" when unknown."""
    if value is None or not math.isfinite(value):
        return "–"
    if value == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def plain(value, style: str = ""):
    """A rich ``Text`` of ``value`` for a terminal table or line: never read as markup, and control
    characters (ESC, OSC: a model path or variant from a JSON file may hold them) escaped."""
    from rich.text import Text


    return Text(safe_text(value), style=style)
