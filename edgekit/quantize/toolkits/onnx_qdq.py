"""Post-processing of QDQ ONNX graphs exported from fake-quant PyTorch models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from edgekit.core import onnx_files


def fold_weight_quantizers(path: Path, out: Path) -> int:
    """Replace ``QuantizeLinear(constant float weight)`` by the int8/uint8 constant it computes.

    The exported fake-quant graph keeps float weights and quantizes them at run time; folding
    stores 8-bit weights (4x smaller) and leaves the DequantizeLinear that ONNX Runtime's QDQ
    fusion expects. Returns how many weights were folded.
    """
    from onnx import numpy_helper


    model = onnx_files.load(path)
    graph = model.graph
    consts: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute:
            attr = node.attribute[0]
            if attr.name == "value":
                consts[node.output[0]] = numpy_helper.to_array(attr.t)
        elif node.op_type == "Identity" and node.input[0] in consts:  # the exporter shares equal constants
            consts[node.output[0]] = consts[node.input[0]]

    folded, keep = 0, []
    new_inits = []
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and all(name in consts for name in node.input[:3]) and len(node.input) >= 3:
            weight, scale, zero = (consts[n] for n in node.input[:3])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            q = _quantize(weight.astype(np.float32), scale.astype(np.float32), zero, axis)
            tensor = numpy_helper.from_array(q, name=node.output[0])
            new_inits.append(tensor)
            folded += 1
            continue
        keep.append(node)
    if not folded:
        onnx_files.save(model, out)
        return 0
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.extend(new_inits)
    # Drop float weights (and Constant nodes) nothing reads any more.
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    alive = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(alive)
    nodes = [n for n in graph.node if not (n.op_type in ("Constant", "Identity") and n.output[0] not in used)]
    del graph.node[:]
    graph.node.extend(nodes)
    onnx_files.save(model, out)
    return folded


def _quantize(weight: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int) -> np.ndarray:
    dtype = zero.dtype
    info = np.iinfo(dtype)
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * weight.ndim
        shape[axis] = -1
        scale = scale.reshape(shape)
        zero = zero.reshape(shape)
    # QuantizeLinear rounds half to even, like np.rint.
    q = np.rint(weight / scale) + zero.astype(np.int32)
    return np.clip(q, info.min, info.max).astype(dtype)
