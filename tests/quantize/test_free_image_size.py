"""An image input whose height and width are both free is asked for its size, even when the model
runs at the 1x1 edgekit would make up (PP-OCRv4's detector does in float, not in int8): no figure
measured on 1x1 images says anything. Given --input-shape, it is judged at that size."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

pytest.importorskip("onnxruntime")
runner = CliRunner()


def _pooling_cnn(path):
    """Conv 3->8 then global average pooling: runs at any height and width, 1x1 included."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "W"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["features"])],
        "pooling", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "height", "width"])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 8, 1, 1])],
        [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))
    return path


def test_free_height_and_width_without_data_ask_for_the_size(tmp_path):
    model = _pooling_cnn(tmp_path / "pooling.onnx")
    result = runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--out", str(tmp_path / "q")])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "has free height/width axes on input 'image'" in line and "judge at 1x1 images" in line
    assert "--input-shape image=1x3x<height>x<width>" in line
    assert not (tmp_path / "q").exists()
    given = runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--input-shape", "image=1x3x32x48",
                                "--out", str(tmp_path / "q")])
    assert given.exit_code == 0, given.output
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    assert [i["shape"][2:] for i in manifest["inputs"]] == [[32, 48]]
