"""Why an int8 model diverges: the quantization error of every quantized tensor, in one pass.

For each activation that the quantized model quantizes (the inputs of its QuantizeLinear /
DynamicQuantizeLinear nodes) the calibration batches run once through the float model and once
through the int8 model, both with every such tensor as an extra output, and three errors stream
into running sums (memory does not grow with the number of batches):

* ``sqnr_db``: the tensor's own rounding error, ``10 log10(sum x^2 / sum (x - qdq(x))^2)`` with the
  range the int8 model uses (static: the calibrated range; dynamic: each batch's min/max);
* ``rel_error``: the same noise as a share of the signal (RMS), the one-number answer to "how many
  significant bits survive here";
* ``accumulated_sqnr_db``: the tensor in the int8 model vs the float model, i.e. everything
  upstream included; where it drops between layers is where the model breaks.

Each row also holds the observed range, the crest factor (max |x| / RMS: 10+ means a few outlier
values set the step for everything else) and the number of outlier channels (last axis: channel
abs-max above ``OUTLIER_FACTOR`` x the median channel abs-max, the activation outliers of trained
transformers). Weights get the per-channel (or per-tensor) int8 SQNR of their stored values.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from edgekit.quantize.calibration.calibrators import TensorRange
from edgekit.core import onnx_files
from edgekit.core.errors import InputFileError
from edgekit.quantize.calibration.onnx_ranges import unoptimised_session

OUTLIER_FACTOR = 8.0
WEIGHT_OPS = {"MatMul": 1, "Gemm": 1, "Conv": 0, "ConvTranspose": 1}  # op -> output-channel axis of the weight


@dataclass(frozen=True)
class TensorError:
    tensor: str
    kind: str  # "activation" | "weight"
    consumers: tuple[str, ...]  # float-model nodes that read it
    op: str  # op type of the first consumer
    low: float
    high: float
    sqnr_db: float
    rel_error: float
    crest: float  # max |x| / RMS
    outlier_channels: int
    channels: int
    accumulated_sqnr_db: float | None = None

    def to_dict(self) -> dict:
        out = asdict(self)
        out["consumers"] = list(self.consumers)
        return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v) for k, v in out.items()}


class _Stats:
    """Running sums for one tensor."""

    def __init__(self):
        self.signal = 0.0
        self.noise = 0.0
        self.accum_noise = 0.0
        self.accum_seen = False
        self.count = 0
        self.low = math.inf
        self.high = -math.inf
        self.absmax = 0.0
        self.channel_max: np.ndarray | None = None

    def add(self, x: np.ndarray, low: float, high: float, levels: int, quantized: np.ndarray | None) -> None:
        x = x.astype(np.float64, copy=False)
        if x.size == 0:
            return
        self.signal += float((x * x).sum())
        self.noise += float(((x - fake_quant(x, low, high, levels)) ** 2).sum())
        if quantized is not None and quantized.shape == x.shape:
            self.accum_noise += float(((x - quantized.astype(np.float64)) ** 2).sum())
            self.accum_seen = True
        self.count += x.size
        self.low, self.high = min(self.low, float(x.min())), max(self.high, float(x.max()))
        self.absmax = max(self.absmax, float(np.abs(x).max()))
        per_channel = np.abs(x).reshape(-1, x.shape[-1]).max(axis=0) if x.ndim >= 1 else np.abs(x).reshape(1)
        self.channel_max = per_channel if self.channel_max is None or self.channel_max.shape != per_channel.shape \
            else np.maximum(self.channel_max, per_channel)


def fake_quant(x: np.ndarray, low: float, high: float, levels: int = 255) -> np.ndarray:
    """Quantize-dequantize with an asymmetric range widened to hold 0 (as ONNX Runtime does)."""
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    if high - low <= 0:
        return np.zeros_like(x)
    scale = (high - low) / levels
    zero = np.round(-low / scale)
    return (np.clip(np.round(x / scale) + zero, 0, levels) - zero) * scale


def _db(signal: float, noise: float) -> float:
    if noise <= 0:
        return float("inf")
    if signal <= 0:
        return float("-inf")
    return 10.0 * math.log10(signal / noise)


def quantized_inputs(quantized_model) -> tuple[list[str], str]:
    """(names of the float tensors the int8 model quantizes, "static" | "dynamic")."""
    static = [n.input[0] for n in quantized_model.graph.node if n.op_type == "QuantizeLinear"]
    dynamic = [n.input[0] for n in quantized_model.graph.node if n.op_type == "DynamicQuantizeLinear"]
    names = list(dict.fromkeys(static + dynamic))
    return names, "dynamic" if dynamic and not static else "static"


def augmented_session(model, names: list[str], threads: int | None):
    """An ONNX Runtime session of ``model`` that also outputs ``names`` (graph optimizations off, so
    every tensor is still there)."""
    import onnx


    present = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    outputs = {o.name for o in model.graph.output}
    kept = [n for n in names if n in present]
    for name in kept:
        if name not in outputs:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return unoptimised_session(model, threads), kept


def tensor_report(
    float_path: Path,
    quantized_path: Path,
    batches: Iterable[Mapping[str, np.ndarray]],
    ranges: Mapping[str, TensorRange] | None = None,
    activation_type: str = "uint8",
    threads: int | None = None,
) -> list[TensorError]:
    """Every quantized tensor's error, worst (lowest SQNR) first. ``ranges``: the calibrated ranges of
    a static model (absent ones, and dynamic models, use each batch's own min/max)."""
    float_model = onnx_files.load(float_path)
    quantized = onnx_files.load(quantized_path)
    names, mode = quantized_inputs(quantized)
    consumers: dict[str, list] = {}
    for node in float_model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    float_names = [n for n in names if n in consumers]
    # tensors only the int8 graph has (e.g. SmoothQuant's scaled inputs): their own rounding error is
    # measured on the int8 graph's float value of them; there is nothing to accumulate against
    readers = {n.input[0]: n for n in quantized.graph.node if n.op_type in ("QuantizeLinear", "DynamicQuantizeLinear")}
    for node in quantized.graph.node:
        for name in node.input:
            if name in readers and name not in consumers and node.op_type not in ("QuantizeLinear", "DynamicQuantizeLinear"):
                consumers.setdefault(name, []).append(node)
    f_session, f_names = augmented_session(float_model, float_names, threads)
    q_session, q_names = augmented_session(quantized, names, threads)
    feeds = {i.name for i in f_session.get_inputs()}
    levels = 255
    stats = {name: _Stats() for name in names if name in f_names or name in q_names}
    seen = 0
    for batch in batches:
        feed = {k: v for k, v in batch.items() if k in feeds}
        f_values = dict(zip(f_names, f_session.run(f_names, feed)))
        q_values = dict(zip(q_names, q_session.run(q_names, feed))) if q_names else {}
        for name in stats:
            x = f_values.get(name)
            accumulated = q_values.get(name) if x is not None else None
            x = x if x is not None else q_values.get(name)
            if x is None or x.dtype.kind != "f":
                continue
            r = (ranges or {}).get(name) if mode == "static" else None
            low, high = (r.low, r.high) if r is not None and not r.mask_like else (float(x.min()), float(x.max()))
            stats[name].add(x, low, high, levels, accumulated)
        seen += 1
    if not seen:
        raise InputFileError("the error report got no batches")
    rows = []
    for name, s in stats.items():
        if not s.count:
            continue
        rms = math.sqrt(s.signal / s.count) if s.count else 0.0
        cm = s.channel_max if s.channel_max is not None else np.zeros(1)
        median = float(np.median(cm)) if cm.size else 0.0
        outliers = int((cm > OUTLIER_FACTOR * median).sum()) if median > 0 else 0
        r = (ranges or {}).get(name) if mode == "static" else None
        low, high = (r.low, r.high) if r is not None and not r.mask_like else (s.low, s.high)
        nodes = consumers.get(name, [])
        rows.append(TensorError(
            tensor=name, kind="activation", consumers=tuple(n.name for n in nodes), op=nodes[0].op_type if nodes else "",
            low=float(low), high=float(high), sqnr_db=_db(s.signal, s.noise),
            rel_error=math.sqrt(s.noise / s.signal) if s.signal > 0 else 0.0,
            crest=s.absmax / rms if rms > 0 else 0.0, outlier_channels=outliers, channels=int(cm.size),
            accumulated_sqnr_db=_db(s.signal, s.accum_noise) if s.accum_seen else None,
        ))
    rows.extend(weight_errors(float_model, {n.name for n in quantized.graph.node}, per_channel=True))
    return sorted(rows, key=lambda r: r.sqnr_db)


def weight_errors(model, quantized_nodes: set[str] | None = None, per_channel: bool = True) -> list[TensorError]:
    """int8 (symmetric, per output channel) rounding error of each weighted node's constant weight."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    rows = []
    for node in model.graph.node:
        axis = WEIGHT_OPS.get(node.op_type)
        if axis is None or len(node.input) < 2 or node.input[1] not in inits:
            continue
        w = numpy_helper.to_array(inits[node.input[1]]).astype(np.float64)
        if w.ndim < 2:
            continue
        if node.op_type == "Gemm":
            axis = 0 if any(a.name == "transB" and a.i for a in node.attribute) else 1
        moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        scale = np.abs(moved).max(axis=1, keepdims=True) if per_channel else np.abs(moved).max(keepdims=True)
        scale = np.where(scale > 0, scale / 127.0, 1.0)
        deq = np.clip(np.round(moved / scale), -127, 127) * scale
        signal, noise = float((moved ** 2).sum()), float(((moved - deq) ** 2).sum())
        rms = math.sqrt(signal / moved.size) if moved.size else 0.0
        cm = np.abs(moved).max(axis=1)
        median = float(np.median(cm))
        rows.append(TensorError(
            tensor=node.input[1], kind="weight", consumers=(node.name,), op=node.op_type,
            low=float(w.min()), high=float(w.max()), sqnr_db=_db(signal, noise),
            rel_error=math.sqrt(noise / signal) if signal > 0 else 0.0,
            crest=float(np.abs(moved).max()) / rms if rms > 0 else 0.0,
            outlier_channels=int((cm > OUTLIER_FACTOR * median).sum()) if median > 0 else 0, channels=int(cm.size),
        ))
    return rows


def summarize(rows: list[TensorError], worst: int = 20) -> dict:
    """What goes into the manifest: counts, the worst rows, and the tensors to look at first."""
    activations = [r for r in rows if r.kind == "activation"]
    return {
        "tensors": len(activations),
        "weights": len(rows) - len(activations),
        "median_sqnr_db": round(float(np.median([r.sqnr_db for r in activations])), 3) if activations else None,
        "below_20db": [r.tensor for r in activations if r.sqnr_db < 20.0],
        "worst": [r.to_dict() for r in rows[:worst]],
    }
