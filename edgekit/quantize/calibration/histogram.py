"""A fixed-size histogram that streams: memory stays the same however many values it sees.

Bin edges sit on integer multiples of the bin width ``w`` (zero is always an edge). When a batch
falls outside the covered range the width doubles until it fits, and every two old bins merge
exactly into one new bin, so re-binning loses no counts and adds no error beyond the wider bins.
"""

from __future__ import annotations

import math

import numpy as np

# Values beyond this are not activations but sentinels (attention-mask constants near -3.4e38,
# +-inf): they are counted apart, never binned, so they cannot blow the bin width up.
SENTINEL = 1e30


class StreamingHistogram:
    def __init__(self, bins: int = 2048):
        if bins < 8:
            raise ValueError(f"a histogram needs at least 8 bins, got {bins}")
        self.bins = int(bins)
        self.counts = np.zeros(self.bins, dtype=np.int64)
        self.width = 0.0  # 0 until the first finite non-constant value arrives
        self.offset = 0  # index of the first bin's left edge, in units of width
        self.min = math.inf
        self.max = -math.inf
        self.total = 0
        self.zeros = 0  # exact zeros seen before any width existed
        self.exact_zeros = 0  # all exact zeros seen (they are also binned)
        self.sentinels = 0

    # -- collection ---------------------------------------------------------------------------
    def add(self, values: np.ndarray) -> None:
        flat = np.asarray(values, dtype=np.float32).reshape(-1)
        if flat.size == 0:
            return
        huge = ~(np.abs(flat) < SENTINEL)  # also catches NaN and inf
        if huge.any():
            self.sentinels += int(huge.sum())
            finite = flat[np.isfinite(flat)]
            if finite.size:
                self.min = min(self.min, float(finite.min()))
                self.max = max(self.max, float(finite.max()))
            flat = flat[~huge]
            if flat.size == 0:
                return
        self.exact_zeros += int(np.count_nonzero(flat == 0))
        lo, hi = float(flat.min()), float(flat.max())
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        self.total += flat.size
        if self.width == 0.0:
            span = max(abs(self.min if math.isfinite(self.min) else 0.0), abs(lo), abs(hi))
            if span == 0.0:
                self.zeros += flat.size
                return
            # Start with room for twice the first batch's reach on both sides of zero.
            self.width = 4.0 * span / self.bins
            self.offset = -self.bins // 2
            if self.zeros:
                self.counts[self._index(np.zeros(1, np.float32))] += self.zeros
                self.zeros = 0
        self._grow_to(lo, hi)
        idx = self._index(flat)
        self.counts += np.bincount(idx, minlength=self.bins)[: self.bins]

    # -- views --------------------------------------------------------------------------------
    def edges(self) -> np.ndarray:
        return (self.offset + np.arange(self.bins + 1, dtype=np.float64)) * self.width

    def occupied(self) -> tuple[np.ndarray, np.ndarray]:
        """(counts, edges) trimmed to the bins between the first and last non-empty one."""
        if self.width == 0.0:
            return np.array([self.total], np.int64), np.array([0.0, 0.0])
        nz = np.flatnonzero(self.counts)
        first, last = int(nz[0]), int(nz[-1])
        return self.counts[first : last + 1], self.edges()[first : last + 2]

    # -- internals ----------------------------------------------------------------------------
    def _index(self, flat: np.ndarray) -> np.ndarray:
        idx = np.floor(flat.astype(np.float64) / self.width).astype(np.int64) - self.offset
        return np.clip(idx, 0, self.bins - 1)

    def _grow_to(self, lo: float, hi: float) -> None:
        need_lo = math.floor(lo / self.width)
        need_hi = math.floor(hi / self.width)
        while need_lo < self.offset or need_hi >= self.offset + self.bins:
            self._double()
            need_lo = math.floor(lo / self.width)
            need_hi = math.floor(hi / self.width)

    def _double(self) -> None:
        """Double the bin width, merging bin pairs; re-centre the window around the data."""
        old_first = self.offset
        new_width = self.width * 2.0
        # old bin k covers [(old_first + k) w, ...); in new units it lands in floor((old_first + k) / 2)
        lo_keep = self.min if math.isfinite(self.min) else 0.0
        hi_keep = self.max if math.isfinite(self.max) else 0.0
        centre = 0.5 * (math.floor(lo_keep / new_width) + math.floor(hi_keep / new_width))
        new_first = int(math.floor(centre)) - self.bins // 2
        old_units = old_first + np.arange(self.bins)
        new_idx = np.floor_divide(old_units, 2) - new_first
        counts = np.zeros(self.bins, dtype=np.int64)
        np.add.at(counts, np.clip(new_idx, 0, self.bins - 1), self.counts)
        self.counts, self.width, self.offset = counts, new_width, new_first
