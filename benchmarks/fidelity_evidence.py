"""Per model shape: the fidelity edgekit printed before (the first output's cosine on synthetic
inputs), the binding metric on synthetic inputs, the binding metric on representative data, and the
time the judgement adds to a quantize run, side by side in one run.

    .venv/bin/python benchmarks/fidelity_evidence.py

The models are the small ones the fidelity tests use (tests/fidelity/fidelity_models.py): a CTC-style
sequence output, one probability per sample, a classifier whose int8 weights lose their small
values to one outlier (per-tensor), and a GRU with its state as an input and an output, run as
streams. All are quantized with --method dynamic (ONNX Runtime)."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fidelity"))
import fidelity_models as fm  # noqa: E402


def outlier_classifier(path: Path) -> Path:
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((fm.FEATURES, fm.CLASSES)) * 0.5).astype(np.float32)
    w[0, 5] = 100.0
    b = np.array([40, -40, 40, -40, 40, -1000], np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "W"], ["xw"]), helper.make_node("Add", ["xw", "B"], ["logits"])],
        "outlier", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", fm.FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", fm.CLASSES])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))
    return path


def cases(work: Path):
    rng = np.random.default_rng(7)
    np.save(work / "seq.npy", (2.5 * rng.standard_normal((64, fm.STEPS, fm.FEATURES))).astype(np.float32))
    np.save(work / "rows.npy", (2.0 * rng.standard_normal((256, fm.FEATURES))).astype(np.float32))
    (work / "streams").mkdir()
    for i, frames in enumerate(fm.frames(8, 32, seed=3)):
        np.savez(work / "streams" / f"take{i}.npz", x=frames)
    yield "CTC sequence (N,T,C)", fm.ctc(work / "ctc.onnx"), work / "seq.npy", {}
    yield "one probability (N,1)", fm.score(work / "score.onnx"), work / "rows.npy", {}
    yield "classifier, outlier weight", outlier_classifier(work / "outlier.onnx"), work / "rows.npy", {"per_channel": False}
    yield "GRU state in/out, streams", fm.vad(work / "vad.onnx"), work / "streams", {}


def quantize_once(model: Path, out: Path, **options):
    from edgekit.core.errors import ParityError
    from edgekit.quantize.api import quantize

    start = time.monotonic()
    try:
        _, manifest = quantize(model, "dynamic", out, "rpi4", force=True, **options)
    except ParityError as exc:
        return None, time.monotonic() - start, str(exc)
    record = manifest.files[0].metrics["fidelity"]
    return record, time.monotonic() - start, ""


def headline(record: dict) -> str:
    head = record.get("headline") or {}
    return f"{head.get('metric')} {head.get('value'):.4g} ({head.get('output')})" if head else "-"


def main() -> None:
    import os

    os.environ.setdefault("EDGEKIT_NO_PROGRESS", "1")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, model, data, options in cases(work):
            synthetic, t_syn, _ = quantize_once(model, work / f"{model.stem}-syn", **options)
            real, t_real, refused = quantize_once(model, work / f"{model.stem}-eval", eval_data=data, **options)
            rows.append({
                "shape": name,
                "before (cosine, synthetic)": synthetic["cosine"],
                "binding, synthetic": headline(synthetic),
                "binding, representative": headline(real) if real else refused.split("diverges from the float model: ")[-1],
                "verdict": real["verdict"] if real else "refused",
                "judge s (synthetic)": synthetic["seconds"],
                "judge s (representative)": real["seconds"] if real else None,
                "quantize s (synthetic)": round(t_syn, 2),
                "quantize s (representative)": round(t_real, 2),
                "judge share of quantize (synthetic)": round(synthetic["seconds"] / t_syn, 3),
            })
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
