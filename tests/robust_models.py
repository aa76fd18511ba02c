"""Small models with the shapes that broke quantization on real pretrained models (issue 32).

``branching``: a classifier whose forward takes a branch on a value it computed (``if h.mean() >
0``), as pre- and post-processing code in real models does. Tracing (TorchScript, ONNX) records
the branch taken; ``torch.export`` (ExecuTorch) refuses a branch on data, so ExecuTorch fails
beside formats that work. A ``package.module:factory`` source (tests/ is on the path)."""

from __future__ import annotations

import torch
from torch import nn


class Branching(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.mean() > 0:  # a branch on data: torch.export cannot trace it
            h = h * 2.0
        return self.b(h)


def branching() -> nn.Module:
    return Branching().eval()


class Mlp(nn.Module):
    """Two linear layers: what a TorchScript file of a small classifier holds."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(16, 64)
        self.b = nn.Linear(64, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def save_scripted_mlp(path) -> None:
    """A TorchScript file (``torch.jit.script``) of ``Mlp``."""
    torch.jit.script(Mlp().eval()).save(str(path))


class Detector(nn.Module):
    """A text-detector-like net with free height/width: two stride-2 convolutions, up-sampling, and a
    skip connection joined by concatenation (which needs the up-sampled map to match the skip's)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(3, 8, 3, 2, 1)
        self.b = nn.Conv2d(8, 16, 3, 2, 1)
        self.c = nn.Conv2d(16, 8, 1)
        self.head = nn.Conv2d(16, 1, 1)

    def forward(self, x):
        f1 = torch.relu(self.a(x))
        f2 = torch.relu(self.b(f1))
        up = nn.functional.interpolate(self.c(f2), scale_factor=2.0, mode="nearest")
        joined = torch.cat([up, f1], 1)
        return torch.sigmoid(self.head(nn.functional.interpolate(joined, scale_factor=2.0, mode="bilinear")))


class Recurrent(nn.Module):
    """A streaming voice-activity-like model: a probability per call and a (layers, batch, hidden)
    state carried from call to call."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.enc = nn.Linear(16, 32)
        self.cells = nn.ModuleList([nn.GRUCell(32, 32), nn.GRUCell(32, 32)])
        self.head = nn.Linear(32, 1)

    def forward(self, x, state):
        h = torch.relu(self.enc(x))
        new = []
        for i, cell in enumerate(self.cells):
            h = cell(h, state[i])
            new.append(h)
        return torch.sigmoid(self.head(h)), torch.stack(new)


def export_detector(path) -> None:
    torch.onnx.export(Detector().eval(), (torch.randn(1, 3, 64, 64),), str(path), input_names=["image"],
                      output_names=["mask"], opset_version=17, dynamo=False,
                      dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"},
                                    "mask": {0: "batch", 2: "height", 3: "width"}})


def export_recurrent(path, state: str = "state", next_state: str = "stateN") -> None:
    """``state``/``next_state``: the names of the state input and output (names that do not pair
    need ``--state``)."""
    torch.onnx.export(Recurrent().eval(), (torch.randn(1, 16), torch.zeros(2, 1, 32)), str(path),
                      input_names=["input", state], output_names=["output", next_state], opset_version=17,
                      dynamo=False, dynamic_axes={"input": {0: "batch"}, state: {1: "batch"},
                                                  "output": {0: "batch"}, next_state: {1: "batch"}})


def concat_of_constants(path, inside_if: bool = False) -> None:
    """An ONNX graph whose Reshape target is Concat([-1], [4, 4], axis=-1) of two constants: valid
    (ONNX Runtime runs it), and ORT's symbolic shape inference asserts on it (axis != 0).
    ``inside_if``: the Concat and Reshape sit in the then-branch of an ``If`` on the data."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    consts = [numpy_helper.from_array(np.array([-1], np.int64), "head"),
              numpy_helper.from_array(np.array([4, 4], np.int64), "tail"),
              numpy_helper.from_array(np.array([-1, 4, 4], np.int64), "flat_shape"),
              numpy_helper.from_array(np.array(0, np.float32), "zero")]
    reshape = [helper.make_node("Concat", ["head", "tail"], ["target_shape"], axis=-1, name="target_shape"),
               helper.make_node("Reshape", ["a", "target_shape"], ["r"], name="reshape")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["a"], name="first")]
    if inside_if:
        then = helper.make_graph(reshape, "then", [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
        other = helper.make_graph([helper.make_node("Neg", ["a"], ["neg"]),
                                   helper.make_node("Reshape", ["neg", "flat_shape"], ["e"])], "else", [],
                                  [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
        nodes += [helper.make_node("ReduceSum", ["a"], ["total"], keepdims=0),
                  helper.make_node("Greater", ["total", "zero"], ["positive"]),
                  helper.make_node("If", ["positive"], ["r"], then_branch=then, else_branch=other, name="branch")]
    else:
        nodes += reshape
    nodes.append(helper.make_node("MatMul", ["r", "W2"], ["out"], name="last"))
    graph = helper.make_graph(nodes, "concat_of_constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4, 4])],
                              [weight("W1", 8, 16), weight("W2", 4, 4), *consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
