"""What a quantization handler returns: a handler is ``(QuantJob, config) -> list[Produced]``.

Light on purpose (no numpy, no torch): ``methods.py`` (the registry), ``handlers.py`` and every
format's quantizer name it, and the registry is imported by ``edgekit.api``.
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
