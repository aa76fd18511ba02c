"""Models with several outputs, as a detector (class scores + boxes + an objectness probability) or a
recurrent model (output + new state) has them.

``heads`` is a ``package.module:factory`` source (tests/fidelity is on the path); ``heads_onnx``
writes the same kind of network as an ONNX graph with seeded weights, optionally damaged in one
output, and ``heads_numpy`` computes its outputs by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FEATURES = 16
HIDDEN = 32
OUTPUT_NAMES = ("scores", "boxes", "prob")


def heads():
    """A torch module: one trunk, three heads (scores (N, 4), boxes (N, 4), prob (N, 1))."""
    import torch
    from torch import nn

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.trunk = nn.Linear(FEATURES, HIDDEN)
            self.scores = nn.Linear(HIDDEN, 4)
            self.boxes = nn.Linear(HIDDEN, 4)
            self.prob = nn.Linear(HIDDEN, 1)

        def forward(self, x):
            h = torch.relu(self.trunk(x))
            return self.scores(h), self.boxes(h), torch.sigmoid(self.prob(h))

    return Heads().eval()


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"w1": (FEATURES, HIDDEN), "b1": (HIDDEN,), "w2": (HIDDEN, 4), "b2": (4,),
              "w3": (HIDDEN, 4), "b3": (4,), "w4": (HIDDEN, 1), "b4": (1,)}
    return {name: (rng.standard_normal(shape) * 0.3).astype(np.float32) for name, shape in shapes.items()}


def heads_numpy(x: np.ndarray, w: dict) -> list[np.ndarray]:
    """The three outputs, by hand (float64, then float32)."""
    x = x.astype(np.float64)
    h = np.maximum(x @ w["w1"] + w["b1"], 0.0)
    prob = 1.0 / (1.0 + np.exp(-(h @ w["w4"] + w["b4"])))
    return [a.astype(np.float32) for a in (h @ w["w2"] + w["b2"], h @ w["w3"] + w["b3"], prob)]


def heads_onnx(path: Path, w: dict, damage: str | None = None) -> Path:
    """The network as ONNX (input ``input`` (N, 16)); ``damage``: "negate_boxes" (output 1 negated)
    or "flip_prob" (output 2 becomes 1 - prob: still in 0..1, still positive)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("MatMul", ["input", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["scores"]),
        helper.make_node("MatMul", ["h", "w3"], ["m3"]),
        helper.make_node("Add", ["m3", "b3"], ["boxes_raw" if damage == "negate_boxes" else "boxes"]),
        helper.make_node("MatMul", ["h", "w4"], ["m4"]), helper.make_node("Add", ["m4", "b4"], ["a4"]),
        helper.make_node("Sigmoid", ["a4"], ["prob_raw" if damage == "flip_prob" else "prob"]),
    ]
    inits = [numpy_helper.from_array(value, name) for name, value in w.items()]
    if damage == "negate_boxes":
        nodes.append(helper.make_node("Neg", ["boxes_raw"], ["boxes"]))
    elif damage == "flip_prob":
        inits.append(numpy_helper.from_array(np.ones((1,), np.float32), "one"))
        nodes.append(helper.make_node("Sub", ["one", "prob_raw"], ["prob"]))
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", width])
               for name, width in zip(OUTPUT_NAMES, (4, 4, 1))]
    graph = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", FEATURES])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def write_reference(path: Path, cases: dict[int, tuple[np.ndarray, list[np.ndarray]]], keep: int | None = None) -> Path:
    """A reference.npz in the documented layout, written with numpy alone: ``bN/input/input``,
    ``bN/output`` (output 0) and ``bN/outputs/{k}``; ``keep`` outputs only (1: the old layout)."""
    arrays = {}
    for batch, (x, outputs) in cases.items():
        arrays[f"b{batch}/input/input"] = x
        for k, out in enumerate(outputs[:keep]):
            arrays[f"b{batch}/output" if k == 0 else f"b{batch}/outputs/{k}"] = out
    np.savez(path, **arrays)
    return path
