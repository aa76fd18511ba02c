"""SmoothQuant-style scale migration for static int8: activation outliers moved into the weights.

A trained transformer's MatMul inputs (LayerNorm outputs, GELU outputs) have a few channels 10-100x
larger than the rest; one 8-bit step sized for them leaves the others a handful of levels. For
``y = x @ W`` with a per-channel factor ``s``, ``y = (x / s) @ (diag(s) W)``: dividing channel j of
``x`` by ``s_j = a_j^alpha / w_j^(1 - alpha)`` (``a_j``: channel j's calibrated abs-max, ``w_j``:
row j's weight abs-max) flattens the activation and hands the spread to the weights, which are
quantized per output channel and take it well (Xiao et al., SmoothQuant, 2023).

Only inputs with outlier channels are touched (channel abs-max above ``OUTLIER_FACTOR`` x the
median), each gets one ``Mul`` by the constant ``1 / s`` read by its MatMuls (other readers, e.g.
the residual Add, still read the unscaled tensor), and ``alpha`` is searched on calibration data by
the int8 model's fidelity (the ONNX static route, ``quantize/routes/onnx.py``). One calibration-style pass measures every
channel abs-max.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from edgekit.quantize.search.report import OUTLIER_FACTOR, augmented_session
from edgekit.core import onnx_files
from edgekit.quantize.calibration.calibrators import make_calibration, make_calibrator
from edgekit.quantize.calibration.onnx_ranges import collect_ranges
from edgekit.fidelity.compare import real_positions
from edgekit.quantize.toolkits import onnx_graphs, ort_backend

ALPHAS = (0.5, 0.65, 0.8, 0.9)


def smoothable(model) -> dict[str, list]:
    """Activation -> the MatMul nodes that read it with a constant 2-D weight (input 1)."""
    inits = {i.name: i for i in model.graph.initializer}
    out: dict[str, list] = {}
    for node in model.graph.node:
        if (node.op_type == "MatMul" and len(node.input) == 2 and node.input[1] in inits
                and len(inits[node.input[1]].dims) == 2 and node.input[0] not in inits):
            out.setdefault(node.input[0], []).append(node)
    return out


def channel_absmax(model_path: Path, batches: Iterable[Mapping[str, np.ndarray]], names: list[str],
                   threads: int | None = None) -> dict[str, np.ndarray]:
    """Running per-channel (last axis) abs-max of ``names`` over the batches."""
    session, names = augmented_session(onnx_files.load(model_path), names, threads)
    feeds = {i.name for i in session.get_inputs()}
    maxima: dict[str, np.ndarray] = {}
    for batch in batches:
        values = session.run(names, {k: v for k, v in batch.items() if k in feeds})
        for name, x in zip(names, values):
            m = np.abs(x.reshape(-1, x.shape[-1])).max(axis=0)
            maxima[name] = m if name not in maxima else np.maximum(maxima[name], m)
    return maxima


def outlier_tensors(maxima: Mapping[str, np.ndarray]) -> list[str]:
    out = []
    for name, m in maxima.items():
        median = float(np.median(m))
        if median > 0 and float(m.max()) > OUTLIER_FACTOR * median:
            out.append(name)
    return out


def smooth(src: Path, dst: Path, maxima: Mapping[str, np.ndarray], alpha: float) -> dict:
    """Write ``src`` with every tensor in ``maxima`` smoothed at ``alpha`` to ``dst``."""
    import onnx
    from onnx import numpy_helper


    model = onnx_files.load(src)
    inits = {i.name: i for i in model.graph.initializer}
    readers = smoothable(model)
    new_nodes: dict[str, onnx.NodeProto] = {}
    done = []
    for name, a in maxima.items():
        nodes = readers.get(name, [])
        weights = [numpy_helper.to_array(inits[n.input[1]]).astype(np.float32) for n in nodes]
        if not nodes or any(w.shape[0] != a.shape[0] for w in weights):
            continue
        w_max = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
        s = np.power(np.maximum(a, 1e-5), alpha) / np.power(np.maximum(w_max, 1e-5), 1 - alpha)
        s = np.clip(s / np.exp(np.log(s).mean()), 1e-3, 1e3).astype(np.float32)  # geometric mean 1
        scaled = f"{name}/smoothed"
        inv = f"{name}/smooth_inv_scale"
        model.graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), inv))
        new_nodes[name] = onnx.helper.make_node("Mul", [name, inv], [scaled], name=f"{name}/smooth")
        for node, w in zip(nodes, weights):
            shared = sum(1 for n in model.graph.node for i in n.input if i == node.input[1])
            if shared > 1:  # a weight read twice gets its own scaled copy
                copy_name = f"{node.input[1]}/smoothed/{node.name}"
                model.graph.initializer.append(numpy_helper.from_array(w * s[:, None], copy_name))
                node.input[1] = copy_name
            else:
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(w * s[:, None], node.input[1]))
            node.input[0] = scaled
        done.append(name)
    # each Mul goes right after the node that makes its input (the graph stays topologically sorted)
    ordered = []
    produced = {o for n in model.graph.node for o in n.output}
    for name in done:
        if name not in produced:  # a graph input
            ordered.append(new_nodes[name])
    for node in model.graph.node:
        ordered.append(node)
        for out in node.output:
            if out in new_nodes and out in done:
                ordered.append(new_nodes[out])
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    onnx_files.save(model, dst, bool(onnx_files.data_files(src)) or None)
    return {"alpha": alpha, "smoothed": done}


def _fidelity(float_path: Path, int8_path: Path, batches: list) -> float:
    """Mean over batches of the output cosine (real token positions only, see accuracy.py)."""
    import onnxruntime as ort


    options = ort.SessionOptions()
    options.log_severity_level = 3
    sessions = [ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"]) for p in (float_path, int8_path)]
    feeds = {i.name for i in sessions[0].get_inputs()}
    scores = []
    for batch in batches:
        feed = {k: v for k, v in batch.items() if k in feeds}
        ref, got = (s.run(None, feed)[0].astype(np.float64) for s in sessions)
        keep = real_positions(feed, ref.shape)
        if keep is not None:
            ref, got = ref[keep], got[keep]
        denom = np.linalg.norm(ref) * np.linalg.norm(got)
        scores.append(float((ref * got).sum() / denom) if denom > 0 else 1.0)
    return float(np.mean(scores))


def search(job, config, graph: Path, recipe, exclude, extra: dict | None, out: Path) -> dict:
    """Smooth ``graph`` at each alpha in ALPHAS, calibrate and quantize it, keep the alpha whose int8
    model is closest to the float one on the calibration data; write that model to ``out``."""
    import shutil


    calib = job.calibration(config)
    model = onnx_files.load(graph, load_data=False)
    maxima = channel_absmax(graph, calib.feeds(), list(smoothable(model)))
    targets = {name: maxima[name] for name in outlier_tensors(maxima)}
    held = list(calib.feeds())[:4]
    settings = make_calibration(config.calibrate_method, **config.calibration_settings())
    tried, best = [], None
    for alpha in ALPHAS if targets else (None,):
        source = graph
        info = {"alpha": None, "smoothed": []}
        if alpha is not None:
            source = job.scratch / f"smooth-{alpha}.onnx"
            info = smooth(graph, source, targets, alpha)
        ranges, _ = collect_ranges(source, calib.feeds(), make_calibrator(config.calibrate_method, settings))
        candidate = job.scratch / f"smooth-{alpha}-int8.onnx"
        details = ort_backend.static_int8_qdq(source, candidate, ranges, recipe, exclude, config.op_types, extra)
        score = _fidelity(onnx_graphs.prepared_onnx(job), candidate, held)
        tried.append({"alpha": alpha, "calibration_cosine": round(score, 6)})
        if best is None or score > best[0]:
            best = (score, candidate, details, info)
    onnx_files.copy(best[1], out) if onnx_files.data_files(best[1]) else shutil.copyfile(best[1], out)
    return {**best[2], "smoothquant": {**best[3], "smoothed": len(best[3]["smoothed"]), "tried": tried}}
