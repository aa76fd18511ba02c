"""A model shaped like silero-vad: every weighted layer inside the branches of an ``If`` on a scalar
sample-rate input, weights written as ``Constant`` nodes (as exporters write a branch's), a state
input fed back from an output. Dynamic int8 reaches the branches and is judged on streams whose
sample rate comes from the data; static QDQ reaches no branch and is refused, not labelled int8."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

ort = pytest.importorskip("onnxruntime")
runner = CliRunner()
FEATURES, HIDDEN, RATE = 12, 16, 16000


def _branch(name: str, rng) -> object:
    """hn = tanh(x Wx + h Wh), prob = sigmoid(hn Wo): three Constant weights, then the layers."""
    from onnx import TensorProto, helper, numpy_helper

    weights = {"wx": rng.standard_normal((FEATURES, HIDDEN)) * 0.4, "wh": rng.standard_normal((HIDDEN, HIDDEN)) * 0.3,
               "wo": rng.standard_normal((HIDDEN, 1)) * 1.5}
    nodes = [helper.make_node("Constant", [], [f"{name}_{k}"], value=numpy_helper.from_array(v.astype(np.float32)))
             for k, v in weights.items()]
    nodes += [helper.make_node("MatMul", ["x", f"{name}_wx"], [f"{name}_a"]),
              helper.make_node("MatMul", ["h", f"{name}_wh"], [f"{name}_b"]),
              helper.make_node("Add", [f"{name}_a", f"{name}_b"], [f"{name}_s"]),
              helper.make_node("Tanh", [f"{name}_s"], [f"{name}_hn"]),
              helper.make_node("MatMul", [f"{name}_hn", f"{name}_wo"], [f"{name}_z"]),
              helper.make_node("Sigmoid", [f"{name}_z"], [f"{name}_p"])]
    outs = [helper.make_tensor_value_info(f"{name}_p", TensorProto.FLOAT, None),
            helper.make_tensor_value_info(f"{name}_hn", TensorProto.FLOAT, None)]
    return helper.make_graph(nodes, name, [], outs)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from onnx import TensorProto, helper, numpy_helper, save

    folder = tmp_path_factory.mktemp("if_vad")
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Equal", ["sr", "rate"], ["is_rate"]),
         helper.make_node("If", ["is_rate"], ["prob", "hn"], then_branch=_branch("hi", rng),
                          else_branch=_branch("lo", rng))],
        "if_vad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", FEATURES]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", HIDDEN]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["batch", 1]),
         helper.make_tensor_value_info("hn", TensorProto.FLOAT, ["batch", HIDDEN])],
        [numpy_helper.from_array(np.array(RATE, np.int64), "rate")])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx_model.ir_version = 8
    save(onnx_model, str(folder / "if_vad.onnx"))
    (folder / "streams").mkdir()
    for i in range(3):  # slowly drifting frames, one stream a file; the rate on every call
        x = np.cumsum(rng.standard_normal((40, FEATURES)) * 0.3, axis=0).astype(np.float32)
        np.savez(folder / "streams" / f"s{i}.npz", x=x, sr=np.full(40, RATE, np.int64))
    return folder


def _probabilities(path, streams) -> np.ndarray:
    """Each call's probability, the state carried (ONNX Runtime straight, not through edgekit)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    probs = []
    for file in sorted(streams.glob("*.npz")):
        h = np.zeros((1, HIDDEN), np.float32)
        for row in np.load(file)["x"]:
            prob, h = session.run(None, {"x": row[None], "h": h, "sr": np.array(RATE, np.int64)})
            probs.append(float(prob[0, 0]))
    return np.array(probs)


def test_dynamic_int8_reaches_if_branches_and_is_judged_on_streams_with_the_data_s_rate(model, tmp_path):
    from onnx import load

    from edgekit.quantize.toolkits.onnx_subgraphs import walk

    out = tmp_path / "q"
    result = runner.invoke(app, ["quantize", str(model / "if_vad.onnx"), "--method", "dynamic",
                                 "--eval-data", str(model / "streams"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    int8 = load(str(out / "model.onnx"))
    assert sum(node.op_type == "MatMulInteger" for node, _ in walk(int8.graph)) == 6  # three per branch
    (entry,) = json.loads((out / "manifest.json").read_text())["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["streams"], fidelity["samples"]) == ("eval-data", 3, 120)
    assert fidelity["state_pairs"] == [{"input": "h", "output": "hn"}]
    reported = next(o for o in fidelity["outputs"] if o["output"] == "prob")
    assert reported["kind"] == "scalar"
    float_probs, int8_probs = _probabilities(model / "if_vad.onnx", model / "streams"), _probabilities(
        out / "model.onnx", model / "streams")
    assert reported["metrics"]["correlation"] == pytest.approx(np.corrcoef(float_probs, int8_probs)[0, 1], abs=1e-4)
    assert reported["metrics"]["max_abs"] == pytest.approx(np.abs(float_probs - int8_probs).max(), abs=1e-5)


def test_static_int8_that_reaches_no_branch_is_refused_not_labelled_int8(model, tmp_path):
    out = tmp_path / "q"
    result = runner.invoke(app, ["quantize", str(model / "if_vad.onnx"), "--method", "static",
                                 "--calib", str(model / "streams"), "--out", str(out)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: int8 ONNX of ") and "if_vad.onnx would be the float model unchanged" in line
    assert "6 of its 6 weighted layers are inside If/Loop subgraphs" in line and "--method dynamic" in line
    assert not out.exists()


def test_an_input_without_axes_takes_one_value_per_stream(model, tmp_path):
    """A sample rate that changes inside a stream is refused in one line, before anything is written."""
    bad = tmp_path / "bad"
    bad.mkdir()
    x = np.zeros((4, FEATURES), np.float32)
    np.savez(bad / "s.npz", x=x, sr=np.array([RATE, RATE, 8000, RATE], np.int64))
    result = runner.invoke(app, ["quantize", str(model / "if_vad.onnx"), "--method", "dynamic",
                                 "--eval-data", str(bad), "--out", str(tmp_path / "q")])
    assert result.exit_code != 0
    (line,) = result.stderr.strip().splitlines()
    assert "input 'sr' takes one value (no axes)" in line, line
    assert not (tmp_path / "q").exists()
