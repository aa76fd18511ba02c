"""Summary statistics of timed runs.

The math lives in the standalone runner (it travels alone to devices and must compute the same
figures there); this module is the library's import location for it.
"""

from __future__ import annotations

from edgekit.bench.runner import parse_shape, percentile, summarize_ns

__all__ = ["parse_shape", "percentile", "summarize_ns"]
