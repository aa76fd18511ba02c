"""What a quantized file is worth: its task metric on held-out data, or its fidelity to the float model.

Labelled models (a classification task with a dataset) are measured by accuracy on the held-out
``test`` split. Models from outside the zoo have no labels: their metric is the cosine similarity
of their outputs to the float model's on the fixed reference inputs (the float model scores 1.0),
reported with the SQNR in dB. Either way the drop is in points: ``(float - int8) * 100``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.core.errors import ParityError
from edgekit.fidelity.compare import real_positions
from edgekit.formats.parity import INT8_MIN_COSINE, predictor_for
from edgekit.formats.evaluation import onnx_predictor, torch_predictor
from edgekit.formats.reference import SEED, fixed_inputs, write_predicted_reference


@dataclass(frozen=True)
class Measurement:
    metric: str  # "accuracy" | "cosine"
    value: float
    float_value: float
    fidelity: dict

    @property
    def drop_points(self) -> float:
        return (self.float_value - self.value) * 100.0


def fidelity(predict, cases: dict) -> dict:
    """Worst-case cosine, SQNR (dB) and per-position top-1 agreement over the reference cases."""
    cos, sqnr, top1 = [], [], []
    for _, (inputs, expected) in sorted(cases.items()):
        got = np.asarray(predict(inputs), dtype=np.float64)
        ref = np.asarray(expected, dtype=np.float64)
        if got.shape != ref.shape:
            raise ParityError(f"output shape {got.shape} != float model's {ref.shape}")
        keep = real_positions(inputs, ref.shape)
        if keep is not None:
            got, ref = got[keep], ref[keep]
        denom = np.linalg.norm(ref) * np.linalg.norm(got)
        # both all-zero agree; an all-zero output against a non-zero one (a collapsed int8 file) does not
        cos.append(float((ref * got).sum() / denom) if denom > 0 else float(not ref.any() and not got.any()))
        noise = float(((ref - got) ** 2).sum())
        sqnr.append(float(10 * np.log10((ref**2).sum() / noise)) if noise > 0 else float("inf"))
        top1.append(float((ref.argmax(-1) == got.argmax(-1)).mean()))
    return {"cosine": round(min(cos), 6), "sqnr_db": round(min(sqnr), 3), "top1_agreement": round(min(top1), 6)}


def predictor(path: Path, fmt, details: dict | None = None):
    """``fmt``: the format's entry, or its name."""
    return predictor_for(path, fmt, details)


def measure(source, predict, cases: dict, split: str = "test", float_value: float | None = None) -> Measurement:
    """Task accuracy on ``split`` when the source is labelled, else fidelity cosine on ``cases``."""
    fid = fidelity(predict, cases)
    if source.labelled:
        from edgekit.formats.evaluation import task_accuracy

        value = task_accuracy(source.task, predict, split)
        reference = float_value if float_value is not None else source.float_accuracy
        return Measurement("accuracy", float(value), float(reference if reference is not None else value), fid)
    return Measurement("cosine", fid["cosine"], 1.0, fid)


def check(source, predict, cases: dict, label: str) -> dict:
    """The parity record of an int8 file; raises ParityError when it diverges from the float model.

    Labelled models keep ``check_parity``'s rule (cosine and top-1 agreement of the class
    logits); other outputs (hidden states, sequences) are held to the cosine alone, since the
    arg-max of a hidden state is not a decision.
    """
    fid = fidelity(predict, cases)
    if source.labelled:
        from edgekit.formats.parity import check_parity

        parity = check_parity(predict, cases, "int8", label)
    else:
        if fid["cosine"] < INT8_MIN_COSINE:
            raise ParityError(
                f"{label}: int8 output diverges from the float model (cosine {fid['cosine']:.3f}; need >= {INT8_MIN_COSINE})"
            )
        parity = {"cosine": fid["cosine"], "top1_agreement": fid["top1_agreement"], "batch_sizes": sorted(cases)}
    return {**parity, "sqnr_db": fid["sqnr_db"]}


def float_predictor(job):
    """The float model as a numpy predictor (torch when there is one, else the float ONNX file)."""
    if job.source.has_torch:
        return torch_predictor(job.float_model())
    return onnx_predictor(job.float_onnx())


def reference_inputs(specs, batch: int, task: dict, input_ranges: dict | None = None) -> dict[str, np.ndarray]:
    """``fixed_inputs``, except that float inputs of unlabelled models are drawn (seeded) inside the
    range calibration observed for them, so fidelity is measured where the model is used."""
    inputs = fixed_inputs(specs, batch, task)
    rng = np.random.default_rng(SEED + 100 + batch)
    for spec in specs:
        seen = (input_ranges or {}).get(spec.name)
        if seen is not None and np.dtype(spec.dtype).kind == "f" and seen.high > seen.low:
            shape = inputs[spec.name].shape
            inputs[spec.name] = rng.uniform(seen.low, seen.high, size=shape).astype(spec.dtype)
    return inputs


def write_reference(path: Path, predict, specs, task: dict, input_ranges: dict | None = None, feed=None) -> None:
    """reference.npz (the layout of ``edgekit.formats.reference``) from any float predictor.

    ``feed(batch)``, when given, makes the inputs (a source that knows its input format, e.g.
    right-padded token rows for a transformers encoder)."""
    write_predicted_reference(path, predict, specs, task,
                              feed=feed or (lambda batch: reference_inputs(specs, batch, task, input_ranges)))
