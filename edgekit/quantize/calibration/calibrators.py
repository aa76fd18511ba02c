"""Calibrators: streaming statistics of activations -> one (low, high) range per tensor.

The lifecycle follows ONNX Runtime's calibrators: ``prepare(names)``, then ``collect(batch)`` for
every calibration batch (a dict of tensor name -> array, any batch size, any sequence length),
then ``compute()``. Unlike ORT's histogram calibrators, nothing is kept per batch: min/max are
running values and histograms have a fixed number of bins (see ``histogram.py``), so memory does
not grow with the number of calibration samples.

A method is a config dataclass plus a calibrator class, registered by name (one verb, many
configs): ``make_calibrator("percentile", percentile=99.9)``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from edgekit.core.errors import UsageError, unknown_name
from edgekit.quantize.calibration.histogram import StreamingHistogram

# A tensor whose values reach this magnitude holds sentinels (attention-mask constants such as
# -3.4e38 or -1e4, +-inf), not activations: quantizing it would collapse its real values.
MASK_LIMIT = 1e4


@dataclass(frozen=True)
class TensorRange:
    low: float
    high: float
    mask_like: bool = False  # saw sentinel-sized values: keep this tensor in float

    def to_json(self) -> list:
        return [_finite(self.low), _finite(self.high), self.mask_like]

    @classmethod
    def from_json(cls, value) -> "TensorRange":
        low, high, mask = value
        return cls(float(low), float(high), bool(mask))


def _finite(x: float) -> float:
    big = float(np.finfo(np.float32).max)
    return float(min(max(x, -big), big)) if not math.isnan(x) else 0.0


# ---------------------------------------------------------------------------------------------
# configs


def _check_bins(bins: int) -> None:
    if not isinstance(bins, int) or isinstance(bins, bool) or not 128 <= bins <= 65536:
        raise UsageError(f"calibration histogram bins must be an integer in 128..65536, got {bins!r}")


@dataclass(frozen=True)
class MinMaxCalibration:
    """The full observed range: nothing clipped, outliers widen the step."""


@dataclass(frozen=True)
class PercentileCalibration:
    """Clip each tail beyond ``percentile`` (e.g. 99.99: the top and bottom 0.01% of values)."""

    percentile: float = 99.99
    bins: int = 2048

    def __post_init__(self) -> None:
        if not isinstance(self.percentile, (int, float)) or not 90.0 <= self.percentile <= 100.0:
            raise UsageError(f"percentile must be between 90 and 100, got {self.percentile!r}")
        _check_bins(self.bins)


@dataclass(frozen=True)
class EntropyCalibration:
    """The clipping threshold that minimises KL(float histogram || its 8-bit version) (TensorRT)."""

    bins: int = 2048

    def __post_init__(self) -> None:
        _check_bins(self.bins)


@dataclass(frozen=True)
class MseCalibration:
    """The clipping range that minimises the expected squared quantization error."""

    bins: int = 2048

    def __post_init__(self) -> None:
        _check_bins(self.bins)


# ---------------------------------------------------------------------------------------------
# calibrators


class Calibrator:
    """Base: tracks which tensors to watch and their running min/max (with mask detection)."""

    def __init__(self, config) -> None:
        self.config = config
        self.names: tuple[str, ...] = ()
        self._low: dict[str, float] = {}
        self._high: dict[str, float] = {}
        self._mask: dict[str, bool] = {}

    def prepare(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._low = {n: math.inf for n in self.names}
        self._high = {n: -math.inf for n in self.names}
        self._mask = {n: False for n in self.names}

    def collect(self, batch: Mapping[str, np.ndarray]) -> None:
        for name, value in batch.items():
            if name not in self._low:
                continue
            arr = np.asarray(value)
            if arr.size == 0 or arr.dtype.kind != "f":
                continue
            big = ~(np.abs(arr) < MASK_LIMIT)
            if big.any():
                self._mask[name] = True
            finite = arr if not big.any() else arr[np.isfinite(arr)]
            if finite.size:
                self._low[name] = min(self._low[name], float(finite.min()))
                self._high[name] = max(self._high[name], float(finite.max()))
            self._observe(name, arr)

    def compute(self) -> dict[str, TensorRange]:
        out = {}
        for name in self.names:
            low, high = self._low[name], self._high[name]
            if not math.isfinite(low) or not math.isfinite(high):
                continue  # never saw a finite value (or never ran): leave it to the quantizer
            if self._mask[name]:
                out[name] = TensorRange(low, high, True)
                continue
            low, high = self._range(name, low, high)
            out[name] = TensorRange(float(low), float(high))
        return out

    def _observe(self, name: str, arr: np.ndarray) -> None:
        pass

    def _range(self, name: str, low: float, high: float) -> tuple[float, float]:
        return low, high


class MinMaxCalibrator(Calibrator):
    pass


class HistogramCalibrator(Calibrator):
    def prepare(self, names: Sequence[str]) -> None:
        super().prepare(names)
        self._hist = {n: StreamingHistogram(self.config.bins) for n in self.names}

    def _observe(self, name: str, arr: np.ndarray) -> None:
        self._hist[name].add(arr)

    def _range(self, name: str, low: float, high: float) -> tuple[float, float]:
        hist = self._hist[name]
        if hist.width == 0.0 or low == high:
            return low, high
        a, b = self._clip(hist)
        return max(low, a), min(high, b)

    def _clip(self, hist: StreamingHistogram) -> tuple[float, float]:
        raise NotImplementedError


class PercentileCalibrator(HistogramCalibrator):
    def _clip(self, hist):
        counts, edges = hist.occupied()
        cdf = np.cumsum(counts) / max(counts.sum(), 1)
        q = self.config.percentile / 100.0
        hi_idx = int(np.searchsorted(cdf, q, side="left"))
        lo_idx = int(np.searchsorted(cdf, 1.0 - q, side="left"))
        return float(edges[lo_idx]), float(edges[min(hi_idx + 1, len(edges) - 1)])


class EntropyCalibrator(HistogramCalibrator):
    """KL-divergence threshold search on the histogram of |x| (one side when x keeps one sign)."""

    def _clip(self, hist):
        folded, width = _fold(hist)
        signed = hist.min < 0 < hist.max
        levels = 128 if signed else 256  # signed: each side gets half of the 8-bit codes
        t = _kl_threshold(folded, levels) * width
        return -t, t


class MseCalibrator(HistogramCalibrator):
    """Coordinate descent over the two clipping ends (each on a 100-point grid toward zero)."""

    def _clip(self, hist):
        counts, edges = hist.occupied()
        centres = 0.5 * (edges[:-1] + edges[1:])
        lo, hi = min(float(edges[0]), 0.0), max(float(edges[-1]), 0.0)
        grid = np.linspace(0.01, 1.0, 100)
        a, b = lo, hi
        for _ in range(3):
            b = float(hi * grid[int(np.argmin(_mse(counts, centres, np.full(100, a), hi * grid)))]) if hi > 0 else b
            a = float(lo * grid[int(np.argmin(_mse(counts, centres, lo * grid, np.full(100, b))))]) if lo < 0 else a
        return a, b


def _mse(counts, centres, lows, highs) -> np.ndarray:
    """Expected squared error of 8-bit quantization with each [low, high] (clipping + rounding)."""
    lows, highs = lows[:, None], highs[:, None]
    step = (highs - lows) / 255.0
    clipped = np.clip(centres[None, :], lows, highs)
    inside = (centres[None, :] >= lows) & (centres[None, :] <= highs)
    return (counts[None, :] * ((clipped - centres[None, :]) ** 2 + inside * step**2 / 12.0)).sum(axis=1)


def _fold(hist: StreamingHistogram) -> tuple[np.ndarray, float]:
    """Counts of |x| in bins [k w, (k+1) w), k >= 0 (exact: edges sit on multiples of w)."""
    units = hist.offset + np.arange(hist.bins)
    counts = hist.counts
    pos = units >= 0
    size = int(max(units.max() + 1, -units.min(), 1))
    folded = np.zeros(size, np.int64)
    np.add.at(folded, units[pos], counts[pos])
    np.add.at(folded, -units[~pos] - 1, counts[~pos])
    nz = np.flatnonzero(folded)
    folded = folded[: int(nz[-1]) + 1] if nz.size else folded[:1]
    # Exact zeros (half of every ReLU output) are represented exactly by the zero point; left in,
    # their spike makes clipping the tail look free and the threshold far too small.
    folded[0] = max(0, folded[0] - hist.exact_zeros)
    return folded, hist.width


def _kl_threshold(counts: np.ndarray, levels: int) -> int:
    """The number of leading bins whose clipped, re-quantized histogram is closest in KL."""
    total_bins = len(counts)
    if total_bins <= 16:
        return total_bins
    # Geometric spacing: after the histogram grew around outliers the bulk may sit in a few bins,
    # so small thresholds need as much attention as large ones.
    candidates = np.unique(np.geomspace(16, total_bins, num=160).astype(int))
    best_i, best_kl = total_bins, math.inf
    for i in candidates:
        p = counts[:i].astype(np.float64).copy()
        p[-1] += counts[i:].sum()
        nonzero = p > 0
        # merge the i bins into `levels` chunks, spread each chunk's mass over its non-empty bins
        chunk = np.minimum((np.arange(i) * levels) // i, levels - 1) if i > levels else np.arange(i)
        sums = np.bincount(chunk, weights=counts[:i].astype(np.float64), minlength=levels)
        nz_per_chunk = np.bincount(chunk, weights=nonzero.astype(np.float64), minlength=levels)
        q = np.where(nonzero, sums[chunk] / np.maximum(nz_per_chunk[chunk], 1), 0.0)
        p_sum, q_sum = p.sum(), q.sum()
        if p_sum == 0 or q_sum == 0:
            continue
        pn, qn = p / p_sum, q / q_sum
        mask = pn > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = float(np.sum(pn[mask] * np.log(pn[mask] / np.maximum(qn[mask], 1e-12))))
        if kl < best_kl:
            best_i, best_kl = int(i), kl
    return best_i


# ---------------------------------------------------------------------------------------------
# registry

@dataclass(frozen=True)
class CalibrationMethod:
    name: str
    config_type: type
    calibrator_type: type
    summary: str


_METHODS: dict[str, CalibrationMethod] = {}


def register_calibration(method: CalibrationMethod) -> CalibrationMethod:
    _METHODS[method.name] = method
    return method


register_calibration(CalibrationMethod("minmax", MinMaxCalibration, MinMaxCalibrator, "full observed range"))
register_calibration(CalibrationMethod("percentile", PercentileCalibration, PercentileCalibrator, "clip the tails"))
register_calibration(CalibrationMethod("entropy", EntropyCalibration, EntropyCalibrator, "KL-optimal clipping"))
register_calibration(CalibrationMethod("mse", MseCalibration, MseCalibrator, "MSE-optimal clipping"))

def make_calibration(method: str, **settings: Any):
    """The method's config from the settings it takes (``None`` values mean "default")."""
    if method not in _METHODS:
        raise unknown_name("calibration method", method, _METHODS)
    spec = _METHODS[method]
    known = {f.name for f in dataclasses.fields(spec.config_type)}
    given = {k: v for k, v in settings.items() if v is not None}
    extra = sorted(set(given) - known)
    if extra:
        names = ", ".join(sorted(known)) or "none"
        raise UsageError(f"calibration method {method!r} does not take: {', '.join(extra)} (it takes: {names})")
    return spec.config_type(**given)


def make_calibrator(method: str, config=None) -> Calibrator:
    config = config if config is not None else make_calibration(method)
    return _METHODS[method].calibrator_type(config)


def describe(method: str, config) -> dict:
    return {"method": method, **dataclasses.asdict(config)}
