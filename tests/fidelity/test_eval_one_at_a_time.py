"""--eval-data is judged one sample a call, as a board runs the model: dynamic int8 scales each
activation by the batch it sees, so a quiet sample judged beside a loud one is rounded far more
coarsely than on the device. The figures edgekit reports are those of the file run one row at a time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

ort = pytest.importorskip("onnxruntime")
FEATURES, OUT = 16, 4


def _linear(path):
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["features"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", OUT])],
        [numpy_helper.from_array(rng.standard_normal((FEATURES, OUT)).astype(np.float32), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))
    return path


def _sqnr(ref, got):
    return 10 * np.log10((ref.astype(np.float64) ** 2).sum() / ((ref.astype(np.float64) - got) ** 2).sum())


def test_dynamic_int8_is_judged_a_row_at_a_time(tmp_path):
    model = _linear(tmp_path / "linear.onnx")
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((32, FEATURES)).astype(np.float32)
    rows[::8] *= 200.0  # one loud row in every 8: in a batch it sets the scale of the quiet ones
    np.save(tmp_path / "eval.npy", rows)
    out = tmp_path / "q"
    result = CliRunner().invoke(app, ["quantize", str(model), "--method", "dynamic", "--eval-data",
                                      str(tmp_path / "eval.npy"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads((out / "manifest.json").read_text())["files"]
    (reported,) = entry["metrics"]["fidelity"]["outputs"]

    def run(path, step):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return np.concatenate([session.run(None, {"x": rows[i:i + step]})[0] for i in range(0, len(rows), step)])

    one, batched = _sqnr(run(model, 1), run(out / "model.onnx", 1)), _sqnr(run(model, 1), run(out / "model.onnx", 16))
    assert reported["metrics"]["sqnr_db"] == pytest.approx(one, abs=0.01)
    assert abs(one - batched) > 1.0  # the batch changes the figure: the one-at-a-time one is the board's
