"""What a quantization route returns: a route is ``(QuantJob, config) -> list[Produced]``.

Light on purpose (no numpy, no torch): every route names it, and ``edgekit.api`` exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Produced:
    """A model file a handler wrote into the job's work folder."""

    path: str
    format: str
    details: dict[str, Any] = field(default_factory=dict)
