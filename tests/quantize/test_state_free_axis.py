"""A state input whose axes carry no names (silero-vad's (2, N, 128): only its sizes tell): its one
free axis is its batch, so streams are judged without --sample-axis, where axis 0 (the 2 layers)
used to be taken for the samples and ONNX Runtime refused the state (an internal error)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

pytest.importorskip("onnxruntime")
FEATURES, HIDDEN = 6, 8


def _model(path):
    """stateN = tanh(state + x W) over 2 layers; prob = sigmoid(mean of stateN), one per sample."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["a"]),
         helper.make_node("Add", ["state", "a"], ["s"]),
         helper.make_node("Tanh", ["s"], ["stateN"]),
         helper.make_node("ReduceMean", ["stateN"], ["m"], axes=[0, 2], keepdims=0),
         helper.make_node("Unsqueeze", ["m", "one"], ["m1"]),
         helper.make_node("Sigmoid", ["m1"], ["prob"])],
        "free_state",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, FEATURES]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, None, HIDDEN])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [None, 1]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, None, HIDDEN])],
        [numpy_helper.from_array((rng.standard_normal((FEATURES, HIDDEN)) * 0.5).astype(np.float32), "W"),
         numpy_helper.from_array(np.array([1], np.int64), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))
    return path


def test_a_state_with_unnamed_axes_is_batched_on_its_one_free_axis(tmp_path):
    model = _model(tmp_path / "free_state.onnx")
    (tmp_path / "streams").mkdir()
    rng = np.random.default_rng(1)
    for i in range(2):
        np.savez(tmp_path / "streams" / f"s{i}.npz", x=rng.standard_normal((12, FEATURES)).astype(np.float32))
    result = CliRunner().invoke(app, ["quantize", str(model), "--method", "dynamic", "--eval-data",
                                      str(tmp_path / "streams"), "--out", str(tmp_path / "q")])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads((tmp_path / "q" / "manifest.json").read_text())["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert fidelity["state_pairs"] == [{"input": "state", "output": "stateN"}]
    assert fidelity["sample_axes"]["state"] == 1 and (fidelity["streams"], fidelity["samples"]) == (2, 24)
