"""Run calibration batches through an ONNX model and stream every activation into a calibrator.

The model is augmented so each float activation that a quantizer may need a range for is also a
graph output (the tensors ORT's own calibrators select: inputs and outputs of nodes, never
initializers). Each batch's activations go to the calibrator and are dropped at once, so memory
depends on one batch, not on the number of batches.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np

from edgekit.quantize.calibration.calibrators import Calibrator, TensorRange
from edgekit.core import onnx_files
from edgekit.core.errors import InputFileError, UsageError


@dataclass(frozen=True)
class CalibrationProgress:
    samples: int
    total: int | None
    elapsed_s: float

    @property
    def eta_s(self) -> float | None:
        if not self.total or self.samples <= 0:
            return None
        return max(0.0, self.elapsed_s * (self.total - self.samples) / self.samples)


Progress = Callable[[CalibrationProgress], None]
FLOAT_TYPES = (1, 10)  # onnx.TensorProto.FLOAT, FLOAT16


def calibration_tensors(model) -> list:
    """ValueInfos of the float, non-initializer tensors that nodes read or write."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    infos = {vi.name: vi for vi in inferred.graph.value_info}
    infos.update({vi.name: vi for vi in inferred.graph.input})
    infos.update({vi.name: vi for vi in inferred.graph.output})
    initializers = {init.name for init in model.graph.initializer}
    seen, selected = set(), []
    for node in model.graph.node:
        for name in (*node.input, *node.output):
            if not name or name in seen or name in initializers or name not in infos:
                continue
            seen.add(name)
            vi = infos[name]
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in FLOAT_TYPES:
                selected.append(vi)
    return selected


def unoptimised_session(model, threads: int | None = None):
    """An ONNX Runtime session of an in-memory ``model`` with graph optimizations off, so every
    tensor it names (the extra outputs a calibration or error report adds) is still there."""
    import onnxruntime as ort


    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    with tempfile.TemporaryDirectory(prefix="edgekit-augmented-") as tmp:
        path = Path(tmp) / "augmented.onnx"
        onnx_files.save(model, path)
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def collect_ranges(
    model_path: Path,
    batches: Iterable[Mapping[str, np.ndarray]],
    calibrator: Calibrator,
    total: int | None = None,
    progress: Progress | None = None,
    threads: int | None = None,
    streams: tuple[tuple[str, str], ...] = (),
    axes: dict[str, int] | None = None,
) -> tuple[dict[str, TensorRange], int]:
    """(ranges by tensor name, samples seen). Raises InputFileError when no batch arrives.

    ``streams``: (state input, output) pairs: a batch that lacks a state input gets the output the
    previous call returned (the batches of one stream come in order; a stream starts with its state).
    ``axes``: each input's sample axis where not 0 (samples are counted along it)."""
    model = onnx_files.load(model_path, load_data=False)  # shape inference cannot take a > 2 GB message
    tensors = calibration_tensors(model)
    onnx_files.attach_data(model, model_path)
    outputs = {o.name for o in model.graph.output}
    for vi in tensors:
        if vi.name not in outputs:
            model.graph.output.append(vi)
    names = [vi.name for vi in tensors]
    calibrator.prepare(names)

    session = unoptimised_session(model, threads)
    feeds = {i.name for i in session.get_inputs()}

    fed_back = [out for _, out in streams if out not in names]
    states = {name for name, _ in streams}
    carried: dict[str, np.ndarray] = {}
    started = time.perf_counter()
    samples = 0
    padding = PaddingCheck()
    for batch in batches:
        batch = {**{name: carried[out] for name, out in streams if name not in batch and out in carried}, **batch}
        missing = feeds - set(batch)
        if missing:
            raise UsageError(f"calibration batch lacks model input(s): {', '.join(sorted(missing))}")
        padding.add(batch)
        try:
            values = session.run(names + fed_back, {k: v for k, v in batch.items() if k in feeds})
        except Exception as exc:  # onnxruntime raises its own exception types (Fail, InvalidArgument)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputFileError(f"the model rejects a calibration batch: {first}") from None
        produced = dict(zip(names + fed_back, values))
        carried = {out: produced[out] for _, out in streams}
        calibrator.collect({name: produced[name] for name in names})
        del values, produced
        counted = next(k for k in batch if k not in states)
        samples += batch[counted].shape[(axes or {}).get(counted, 0)]
        if progress:
            progress(CalibrationProgress(samples, total, time.perf_counter() - started))
    if samples == 0:
        raise InputFileError("calibration produced no batches")
    padding.check()
    return calibrator.compute(), samples


class PaddingCheck:
    """Raises when the calibration set is padding only: every mask input (an integer ``*mask*``
    input) is 0 everywhere, or every integer input is 0 everywhere. Ranges from such a set describe
    no real input, and the int8 model built from them would be silently useless."""

    def __init__(self):
        self.nonzero: dict[str, bool] = {}

    def add(self, batch: Mapping[str, np.ndarray]) -> None:
        for name, value in batch.items():
            value = np.asarray(value)
            if value.dtype.kind in "iub":
                self.nonzero[name] = self.nonzero.get(name, False) or bool(value.any())

    def check(self) -> None:
        if not self.nonzero:
            return
        masks = [n for n in self.nonzero if "mask" in n.lower()]
        empty_masks = [n for n in masks if not self.nonzero[n]]
        if empty_masks:
            raise InputFileError(f"calibration data is padding only: {', '.join(empty_masks)} is 0 in every sample")
        if not any(self.nonzero.values()):
            raise InputFileError(f"calibration data is padding only: {', '.join(self.nonzero)} "
                                 f"{'is' if len(self.nonzero) == 1 else 'are'} 0 in every sample")
