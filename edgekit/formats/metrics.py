"""Per-output fidelity of a candidate model to the float model: metrics that can fail for that output.

Every output is compared, over every evaluated sample at once (sums are streamed batch by batch,
so memory does not grow with the number of samples). What an output *is* decides which metric
binds (decides pass/fail); the others are reported beside it:

==========  ==========================================  ====================================
kind        what it looks like                          binding metric (default floor)
==========  ==========================================  ====================================
scalar      one number per sample (probability,         correlation >= 0.95 over the samples
            regression)                                 and max abs error <= 10 % of the
                                                        float output's spread
classes     (N, C) class scores                         argmax agreement >= 0.8
sequence    (N, T, C) or (T, N, C) per-timestep         per-timestep argmax agreement >= 0.9,
            classes (CTC)                               over all timesteps and over those where
                                                        either model emits a symbol (not blank)
                                                        (exact-sequence match after greedy
                                                        decode reported beside it)
tensor      anything else (features, boxes, states)     cosine over the whole batch >= 0.95
==========  ==========================================  ====================================

A cosine is always taken over the whole batch (or stream) of an output, never over one sample's
vector, so one number per sample cannot make it 1 by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

KINDS = ("scalar", "classes", "sequence", "tensor")
# the floor of each binding metric: (metric, floor, "min" | "max")
FLOORS: dict[str, tuple[tuple[str, float, str], ...]] = {
    "scalar": (("correlation", 0.95, "min"), ("max_abs_of_spread", 0.10, "max")),
    "classes": (("top1_agreement", 0.8, "min"),),
    # symbols: a text line is mostly blank timesteps, which any int8 file gets right (PP-OCRv4's
    # recognizer: 91 % of all timesteps agreed, 83 % of those with a symbol, 31 % of lines read the same)
    "sequence": (("timestep_agreement", 0.9, "min"), ("symbol_agreement", 0.9, "min")),
    "tensor": (("cosine", 0.95, "min"),),
}
SQNR_CAP_DB = 300.0  # float32 rounding is ~150 dB: 300 means identical
BLANK = 0  # the CTC blank the greedy decode drops (the usual convention: class 0)
# names that say an output holds class scores, not features
_CLASS_WORDS = ("logit", "prob", "score", "class", "ctc", "softmax", "pred")


def output_kind(name: str, sample: np.ndarray, batch: int, declared: str | None = None,
                labelled: bool = False) -> str:
    """What output ``name`` is, from its float values ``sample`` on a batch of ``batch`` samples.

    Class scores are told apart from features by their values (rows that are probabilities or
    log-probabilities), by the output's name, or by a labelled task; a feature tensor's arg-max is
    not a decision, so it is held to the cosine."""
    if declared is not None:
        return declared
    arr = np.asarray(sample)
    per_sample = arr.size // max(batch, 1)
    if per_sample <= 1:
        return "scalar"
    looks_like_classes = labelled or any(word in name.lower() for word in _CLASS_WORDS) or _distribution_rows(arr)
    if arr.ndim == 2 and arr.shape[-1] > 1 and looks_like_classes:
        return "classes"
    if arr.ndim == 3 and arr.shape[-1] > 1 and looks_like_classes:
        return "sequence"
    return "tensor"


def _distribution_rows(arr: np.ndarray) -> bool:
    """Rows along the last axis that sum to 1 (softmax) or whose exp sums to 1 (log-softmax)."""
    if arr.ndim < 2 or arr.shape[-1] < 2 or not np.isfinite(arr).all():
        return False
    a = arr.astype(np.float64)
    if (a >= 0).all() and np.allclose(a.sum(-1), 1.0, atol=1e-3):
        return True
    return bool((a <= 1e-6).all() and np.allclose(np.exp(a).sum(-1), 1.0, atol=1e-3))


def to_batch_first(arr: np.ndarray, batch: int) -> np.ndarray:
    """A (T, N, C) sequence output as (N, T, C); (N, T, C) as it is."""
    if arr.ndim == 3 and arr.shape[0] != batch and arr.shape[1] == batch:
        return np.swapaxes(arr, 0, 1)
    return arr


def greedy_decode(ids: np.ndarray) -> tuple[int, ...]:
    """CTC greedy decode of one sample's per-timestep arg-max: repeats merged, blanks dropped."""
    out, last = [], None
    for token in ids.tolist():
        if token != last and token != BLANK:
            out.append(token)
        last = token
    return tuple(out)


@dataclass
class OutputFidelity:
    """Streamed comparison of one output: ``add`` each batch (float, candidate), then ``result``."""

    name: str
    kind: str
    samples: int = 0
    values: int = 0
    dot: float = 0.0
    ref_sq: float = 0.0
    got_sq: float = 0.0
    noise_sq: float = 0.0
    abs_sum: float = 0.0
    ref_abs_sum: float = 0.0
    max_abs: float = 0.0
    ref_max_abs: float = 0.0
    ref_min: float = math.inf
    ref_max: float = -math.inf
    agree: int = 0
    positions: int = 0
    symbol_agree: int = 0
    symbol_positions: int = 0
    sequences_equal: int = 0
    # scalar outputs: sums for the correlation
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    syy: float = 0.0
    sxy: float = 0.0
    nonfinite: bool = False
    shapes: set = field(default_factory=set)

    def add(self, reference: np.ndarray, candidate: np.ndarray, batch: int) -> None:
        ref = np.asarray(reference, dtype=np.float64)
        got = np.asarray(candidate, dtype=np.float64)
        if ref.shape != got.shape:
            from edgekit.core.errors import ParityError

            raise ParityError(f"output {self.name!r}: shape {got.shape} != the float model's {ref.shape}")
        if not np.isfinite(got).all():
            self.nonfinite = True
            got = np.nan_to_num(got, nan=0.0, posinf=0.0, neginf=0.0)
        self.shapes.add(tuple(ref.shape))
        self.samples += batch
        self.values += ref.size
        diff = ref - got
        self.dot += float((ref * got).sum())
        self.ref_sq += float((ref * ref).sum())
        self.got_sq += float((got * got).sum())
        self.noise_sq += float((diff * diff).sum())
        self.abs_sum += float(np.abs(diff).sum())
        self.ref_abs_sum += float(np.abs(ref).sum())
        if ref.size:
            self.max_abs = max(self.max_abs, float(np.abs(diff).max()))
            self.ref_max_abs = max(self.ref_max_abs, float(np.abs(ref).max()))
            self.ref_min, self.ref_max = min(self.ref_min, float(ref.min())), max(self.ref_max, float(ref.max()))
        if self.kind == "scalar":
            x, y = ref.reshape(-1), got.reshape(-1)
            self.sx += float(x.sum())
            self.sy += float(y.sum())
            self.sxx += float((x * x).sum())
            self.syy += float((y * y).sum())
            self.sxy += float((x * y).sum())
        elif self.kind == "classes":
            r, g = ref.reshape(len(ref), -1), got.reshape(len(got), -1)
            self.agree += int((r.argmax(-1) == g.argmax(-1)).sum())
            self.positions += len(r)
        elif self.kind == "sequence":
            r, g = to_batch_first(ref, batch), to_batch_first(got, batch)
            r_ids, g_ids = r.argmax(-1), g.argmax(-1)
            self.agree += int((r_ids == g_ids).sum())
            self.positions += r_ids.size
            symbols = (r_ids != BLANK) | (g_ids != BLANK)
            self.symbol_agree += int((r_ids == g_ids)[symbols].sum())
            self.symbol_positions += int(symbols.sum())
            self.sequences_equal += sum(greedy_decode(a) == greedy_decode(b) for a, b in zip(r_ids, g_ids))

    def result(self, floors: dict[str, float] | None = None) -> dict:
        """The metrics, the binding ones with their floors, and ``ok``."""
        metrics = {"cosine": self._cosine(), "sqnr_db": self._sqnr(),
                   "max_abs": self.max_abs,
                   "max_rel_error": self.max_abs / self.ref_max_abs if self.ref_max_abs > 0 else float(self.max_abs > 0),
                   "mean_rel_error": self.abs_sum / self.ref_abs_sum if self.ref_abs_sum > 0 else float(self.abs_sum > 0)}
        if self.kind == "scalar":
            spread = self.ref_max - self.ref_min
            metrics["correlation"] = self._correlation()
            # a constant float output has no spread: any error is as large as it gets
            metrics["max_abs_of_spread"] = self.max_abs / spread if spread > 0 else (0.0 if self.max_abs == 0 else 1e9)
        elif self.kind == "classes":
            metrics["top1_agreement"] = self.agree / self.positions if self.positions else 0.0
        elif self.kind == "sequence":
            metrics["timestep_agreement"] = self.agree / self.positions if self.positions else 0.0
            # no symbol from either model: nothing to disagree on (the all-timestep agreement decides)
            metrics["symbol_agreement"] = self.symbol_agree / self.symbol_positions if self.symbol_positions else None
            metrics["sequence_match"] = self.sequences_equal / self.samples if self.samples else 0.0
        binding = []
        for metric, floor, sense in FLOORS[self.kind]:
            floor = (floors or {}).get(metric, floor)
            value = metrics[metric]
            if value is None:  # e.g. a correlation of a constant float output: the max-abs bound decides
                continue
            ok = (value >= floor) if sense == "min" else (value <= floor)
            binding.append({"metric": metric, "value": _round(value), "floor": floor, "sense": sense, "ok": bool(ok)})
        ok = all(b["ok"] for b in binding) and not self.nonfinite
        return {"output": self.name, "kind": self.kind, "samples": self.samples,
                "metrics": {k: _round(v) for k, v in metrics.items()}, "binding": binding,
                "nonfinite": self.nonfinite, "ok": ok}

    def _cosine(self) -> float:
        denom = math.sqrt(self.ref_sq) * math.sqrt(self.got_sq)
        if denom == 0:  # both all-zero agree; an all-zero output against a non-zero one does not
            return float(self.ref_sq == 0 and self.got_sq == 0)
        return self.dot / denom

    def _sqnr(self) -> float:
        """dB, within +-SQNR_CAP_DB (identical outputs: the cap), so manifests stay plain JSON."""
        if self.noise_sq == 0:
            return SQNR_CAP_DB
        if self.ref_sq == 0:
            return -SQNR_CAP_DB
        return max(-SQNR_CAP_DB, min(SQNR_CAP_DB, 10 * math.log10(self.ref_sq / self.noise_sq)))

    def _correlation(self) -> float | None:
        n = self.values
        if n < 2:
            return None
        vx, vy = self.sxx - self.sx * self.sx / n, self.syy - self.sy * self.sy / n
        if vx <= 1e-18 * max(1.0, self.sxx):  # a constant float output: no correlation to measure
            return None
        if vy <= 1e-18 * max(1.0, self.syy):  # the candidate is constant where the float model varies
            return 0.0
        return (self.sxy - self.sx * self.sy / n) / math.sqrt(vx * vy)


def _round(value):
    if value is None or not math.isfinite(value):
        return value
    return float(f"{value:.6g}")


def headline(outputs: list[dict]) -> dict:
    """The row a table leads with: the worst binding metric over all outputs (the one closest to,
    or furthest past, its floor)."""
    worst, worst_margin = None, math.inf
    for out in outputs:
        for bind in out["binding"]:
            value, floor = bind["value"], bind["floor"]
            if value is None:
                continue
            margin = (value - floor) if bind["sense"] == "min" else (floor - value)
            if not math.isfinite(margin):
                margin = -math.inf if not bind["ok"] else math.inf
            if worst is None or margin < worst_margin:
                worst, worst_margin = {"output": out["output"], **bind}, margin
    return worst or {}
