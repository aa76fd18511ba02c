"""A fixed reference workload timed beside the models, to normalise away the machine's state.

A shared CI runner or a loaded laptop slows every model timed at the same moment by about the
same factor. ``bench(reference=True)`` times this small ONNX model (a chain of 512x512 MatMul +
Relu, seeded weights, the same bytes every time) in every round, interleaved with the models, and
records its per-round medians beside each result. A regression gate can then compare
``model / reference`` round by round instead of raw milliseconds (``edgekit.gates.regression``).
"""

from __future__ import annotations

from pathlib import Path

REFERENCE_NAME = "edgekit-ref-matmul512x4-v1"  # change the name whenever the workload changes
WIDTH, LAYERS, SEED = 512, 4, 20240607


def write_reference_model(folder: str | Path) -> Path:
    """Write the reference ONNX model into ``folder``; returns its path."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    nodes, inits, last = [], [], "input"
    for i in range(LAYERS):
        weight = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        inits.append(numpy_helper.from_array(weight, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [last, f"w{i}"], [f"m{i}"]))
        out = "output" if i == LAYERS - 1 else f"r{i}"
        nodes.append(helper.make_node("Relu", [f"m{i}"], [out]))
        last = out
    graph = helper.make_graph(
        nodes, REFERENCE_NAME, [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, WIDTH])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="edgekit")
    model.ir_version = 8
    path = Path(folder) / f"{REFERENCE_NAME}.onnx"
    onnx.save(model, str(path))
    return path
