"""The two ONNX exporters side by side, per model family: which one ``--onnx-exporter auto`` picks.

    .venv/bin/python benchmarks/onnx_exporters.py

For each zoo family and a BERT-style transformers encoder (built from a config, random
weights), the model is exported with torch's TorchScript-based exporter and its torch.export
(dynamo) one, at the same opset. Printed per exporter: export time, node count, max abs error vs
torch at both reference shapes (batch 1 / seq 16 and batch 7 / seq 11), the size of ONNX
Runtime's dynamic int8 model as a ratio of its fp32 one (can the quantizer reach the weights?),
and the fp32 and int8 latency of the dynamo graph as a ratio of the TorchScript one, timed
interleaved on one thread at batch 1. The choices recorded in the model registry
(``edgekit/models/*.py``, ``onnx_exporter=``) come from this table.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ROUNDS, CALLS = 30, 20
BERT = {"model_type": "bert", "vocab_size": 8000, "hidden_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "intermediate_size": 1024, "max_position_embeddings": 128}


def families():
    from edgekit.models.registry import get_spec, model_names

    for name in model_names():
        spec = get_spec(name)
        config = spec.config()
        yield name, (lambda spec=spec, config=config: spec.factory(**config).eval()), spec.input_spec(config), spec.outputs


def bert_family(folder: Path):
    import json

    from edgekit.sources.model_source import resolve_source

    (folder / "config.json").write_text(json.dumps(BERT))
    src = resolve_source(f"hf:{folder / 'config.json'}", random_init=True)  # exporter timing: weights do not matter
    return "hf:bert (4 x 256)", src.load_torch, src.inputs, src.outputs


def run(name, build, inputs, outputs, work: Path) -> None:
    import onnx
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from edgekit.formats.onnx_export import export_onnx, quiet
    from edgekit.formats.reference import BATCH_SIZES, example_tensors, fixed_inputs

    model = build()
    sessions, row = {}, {}
    for route in ("torchscript", "dynamo"):
        path = work / f"{route}.onnx"
        started = time.perf_counter()
        try:
            export_onnx(model, example_tensors(inputs), inputs, outputs, path, 17, route)
        except Exception as exc:  # noqa: BLE001 - a failed export is a result here
            row[route] = f"export failed: {str(exc)[:100]}"
            continue
        seconds = time.perf_counter() - started
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.log_severity_level = 1, 3
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        errors = []
        for batch in BATCH_SIZES:
            feed = fixed_inputs(inputs, batch, {})
            with torch.no_grad():
                ref = model(*(torch.from_numpy(a) for a in feed.values()))
            ref = (ref[0] if isinstance(ref, (tuple, list)) else ref).numpy()
            errors.append(float(np.abs(session.run(None, feed)[0] - ref).max()))
        int8 = work / f"{route}-int8.onnx"
        with quiet():
            quantize_dynamic(str(path), str(int8), weight_type=QuantType.QInt8)
        sessions[route] = session
        sessions[f"{route}-int8"] = ort.InferenceSession(str(int8), options, providers=["CPUExecutionProvider"])
        row[route] = (f"export {seconds:5.2f} s, {len(onnx.load(str(path)).graph.node):4d} nodes, "
                      f"max abs err {max(errors):.1e}, int8/fp32 size {int8.stat().st_size / path.stat().st_size:.3f}")
    for route, text in row.items():
        print(f"{name:28s} {route:12s} {text}")
    if len(sessions) == 4:
        feed = fixed_inputs(inputs, 1, {})
        times = {key: [] for key in sessions}
        for _ in range(ROUNDS):
            for key, session in sessions.items():
                started = time.perf_counter()
                for _ in range(CALLS):
                    session.run(None, feed)
                times[key].append((time.perf_counter() - started) / CALLS)
        med = {key: statistics.median(values) for key, values in times.items()}
        print(f"{name:28s} dynamo/torchscript latency: fp32 {med['dynamo'] / med['torchscript']:.2f}x, "
              f"int8 {med['dynamo-int8'] / med['torchscript-int8']:.2f}x")


def main() -> None:
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # ORT's quantizer suggests pre-processing on every call
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cases = list(families())
        try:
            cases.append(bert_family(tmp))
        except Exception as exc:  # noqa: BLE001 - transformers is a dev extra
            print(f"(skipping the transformers encoder: {exc})")
        for index, case in enumerate(cases):
            work = tmp / str(index)
            work.mkdir()
            run(*case, work)


if __name__ == "__main__":
    main()
