"""The per-tensor int8 error report, the SkipLayerNormalization-blocking layout, and bad inputs
(padding-only calibration, calibration names that miss the model's inputs, nothing to quantize)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()


def _save(model, path):
    import onnx

    onnx.save(model, str(path))
    return path


def _two_matmuls(path, outlier: float = 60.0):
    """x -> MatMul(W1) -> h -> MatMul(W2) -> y, where x carries one outlier channel (scaled by
    ``outlier`` through a constant Mul) and h does not."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    scale = np.ones(16, np.float32)
    scale[3] = outlier
    inits = [numpy_helper.from_array(scale, "scale"),
             numpy_helper.from_array(rng.normal(size=(16, 16)).astype(np.float32) / 4, "w1"),
             numpy_helper.from_array(rng.normal(size=(16, 8)).astype(np.float32) / 4, "w2")]
    nodes = [helper.make_node("Mul", ["input", "scale"], ["x"], name="scale_in"),
             helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["output"], name="mm2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 8])], inits)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_fake_quant_matches_an_independent_uint8_round_trip():
    from edgekit.quantize.search.report import fake_quant

    x = np.linspace(-1.0, 3.0, 101)
    got = fake_quant(x, -1.0, 3.0)
    scale, zero = 4.0 / 255, round(1.0 / (4.0 / 255))
    expected = np.array([(min(max(round(v / scale) + zero, 0), 255) - zero) * scale for v in x])
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert np.abs(got - x).max() <= scale / 2 + 1e-12
    # the range is widened to hold 0, as ONNX Runtime does
    assert fake_quant(np.array([2.0, 4.0]), 2.0, 4.0)[0] == pytest.approx(2.0, abs=4.0 / 255)


def test_report_ranks_the_outlier_tensor_worst(tmp_path):
    from edgekit.quantize.calibration.calibrators import TensorRange
    from edgekit.quantize.search.report import summarize, tensor_report
    from edgekit.quantize.toolkits.ort_backend import quiet

    from onnxruntime.quantization import QuantFormat, quantize_static
    from onnxruntime.quantization.calibrate import CalibrationDataReader

    model = _two_matmuls(tmp_path / "f.onnx")
    rng = np.random.default_rng(1)
    batches = [{"input": rng.normal(size=(32, 16)).astype(np.float32)} for _ in range(4)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    with quiet():
        quantize_static(str(model), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ)
    rows = tensor_report(model, tmp_path / "q.onnx", iter(batches))
    acts = {r.tensor: r for r in rows if r.kind == "activation"}
    assert {"x", "r"} <= set(acts)
    assert acts["x"].sqnr_db < acts["r"].sqnr_db  # the outlier channel sets a coarse step for all
    assert acts["x"].outlier_channels == 1 and acts["x"].channels == 16
    assert acts["x"].crest > acts["r"].crest
    assert acts["x"].accumulated_sqnr_db is not None and acts["r"].accumulated_sqnr_db is not None
    assert [r.sqnr_db for r in rows] == sorted(r.sqnr_db for r in rows)  # worst first
    assert {r.tensor for r in rows if r.kind == "weight"} == {"w1", "w2"}
    # a tighter (calibrated) range clips the outlier: its own error is larger than with min/max
    x = np.concatenate([b["input"] for b in batches]) * np.where(np.arange(16) == 3, 60.0, 1.0)
    clipped = tensor_report(model, tmp_path / "q.onnx", iter(batches), {"x": TensorRange(-3.0, 3.0)})
    assert next(r for r in clipped if r.tensor == "x").sqnr_db < acts["x"].sqnr_db
    assert acts["x"].low == pytest.approx(float(x.min()), rel=1e-5)
    summary = summarize(rows)
    assert summary["tensors"] == len(acts) and summary["weights"] == 2
    json.dumps(summary)  # goes into the manifest


def test_blocking_skip_layernorm_keeps_the_outputs(tmp_path):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from edgekit.quantize.toolkits.fusion import apply_fusion

    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(size=8).astype(np.float32), "bias"),
             numpy_helper.from_array(np.ones(8, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(8, np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["input", "w"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["biased"]),  # a constant operand: stays Add
             helper.make_node("Add", ["biased", "input"], ["residual"]),
             helper.make_node("LayerNormalization", ["residual", "gamma", "beta"], ["output"], axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4, 8])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 8])], inits)
    src = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "f.onnx")
    dst, details = apply_fusion(src, tmp_path / "g.onnx", "no-skip-ln")
    assert details == {"fusion": "no-skip-ln", "skip_layernorm_blocked": 1}
    import onnx

    ops = [n.op_type for n in onnx.load(str(dst)).graph.node]
    assert ops == ["MatMul", "Add", "Sum", "LayerNormalization"]
    x = rng.normal(size=(1, 4, 8)).astype(np.float32)
    run = lambda p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]  # noqa: E731
    np.testing.assert_allclose(run(dst), run(src), rtol=1e-6, atol=1e-6)
    assert apply_fusion(src, tmp_path / "h.onnx", "runtime") == (src, {"fusion": "runtime"})


def _token_model(path, vocab: int = 50):
    """(input_ids, attention_mask) -> embedding lookup -> MatMul, masked: a tiny "encoder"."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(size=(vocab, 8)).astype(np.float32), "table"),
             numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "w")]
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["h"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["m", "axes"], ["m3"]),
             helper.make_node("Mul", ["h", "m3"], ["output"])]
    inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["N", "S"]) for n in ("input_ids", "attention_mask")]
    graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", "S", 8])],
                              inits)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_padding_only_calibration_is_one_line_error(tmp_path):
    from conftest import one_line_error

    model = _token_model(tmp_path / "m.onnx")
    (tmp_path / "calib").mkdir()
    np.savez(tmp_path / "calib" / "b.npz", input_ids=np.zeros((4, 16), np.int64),
             attention_mask=np.zeros((4, 16), np.int64))
    result = runner.invoke(app, ["quantize", str(model), "--calib", str(tmp_path / "calib"), "--target", "x86-64",
                                 "--out", str(tmp_path / "q")])
    line = one_line_error(result, 2)
    assert "padding only" in line and "attention_mask" in line
    assert not (tmp_path / "q").exists()


def test_calibration_names_that_miss_the_inputs_are_one_line_error(tmp_path):
    from conftest import one_line_error

    model = _token_model(tmp_path / "m.onnx")
    (tmp_path / "calib").mkdir()
    np.savez(tmp_path / "calib" / "b.npz", ids=np.ones((4, 16), np.int64), mask=np.ones((4, 16), np.int64))
    result = runner.invoke(app, ["quantize", str(model), "--calib", str(tmp_path / "calib"), "--target", "x86-64",
                                 "--out", str(tmp_path / "q")])
    line = one_line_error(result, 2)
    assert "attention_mask" in line and "input_ids" in line


def test_nothing_to_quantize_is_one_line_error(tmp_path):
    from onnx import TensorProto, helper

    from conftest import one_line_error

    graph = helper.make_graph([helper.make_node("Relu", ["input"], ["output"])], "g",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4])])
    model = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "relu.onnx")
    result = runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--target", "x86-64",
                                 "--out", str(tmp_path / "q")])
    assert "nothing to quantize" in one_line_error(result, 2)


def test_report_option_on_a_token_model(tmp_path):
    """--report: the table on stdout and the summary in the manifest; the fidelity check of a token
    model reads its real (unmasked) positions, on right-padded token rows inside the vocabulary."""
    model = _token_model(tmp_path / "m.onnx")
    (tmp_path / "calib").mkdir()
    rng = np.random.default_rng(4)
    mask = (np.arange(16)[None, :] < rng.integers(4, 17, size=(8, 1))).astype(np.int64)
    np.savez(tmp_path / "calib" / "b.npz", input_ids=rng.integers(1, 50, size=(8, 16)) * mask, attention_mask=mask)
    result = runner.invoke(app, ["quantize", str(model), "--calib", str(tmp_path / "calib"), "--target", "x86-64",
                                 "--op-types", "MatMul", "--report", "--out", str(tmp_path / "q")])
    assert result.exit_code == 0, result.output
    assert "int8 error per tensor" in result.stdout
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    (entry,) = manifest["files"]
    found = entry["details"]["error_report"]
    assert found["tensors"] >= 1 and found["worst"][0]["tensor"]
    # the reference cases are the user's calibration rows (their 16-token shape)
    ref = np.load(tmp_path / "q" / "reference.npz")
    assert ref["b1/input/input_ids"].shape == (1, 16)
    np.testing.assert_array_equal(ref["b7/input/attention_mask"], mask[:7])


def test_auto_never_picks_an_int8_candidate_slower_than_float(tmp_path, monkeypatch):
    """Timing is faked (no wall-clock threshold): every int8 candidate "runs" slower than fp32, so
    --auto refuses them all with the table, instead of shipping a slower model."""
    from types import SimpleNamespace

    import edgekit.bench.api
    from edgekit.quantize.search.auto import NoCandidateError, quantize_auto

    model = _token_model(tmp_path / "m.onnx")

    def fake_bench(paths, **settings):
        return [SimpleNamespace(timing=SimpleNamespace(p50=1.0 if "fp32" in str(p) else 2.0)) for p in paths]

    monkeypatch.setattr(edgekit.bench.api, "bench", fake_bench)
    with pytest.raises(NoCandidateError) as caught:
        quantize_auto(model, tmp_path / "q", "x86-64", formats=("onnx",), max_drop=100)
    assert "faster than float" in str(caught.value)
    int8 = [c for c in caught.value.candidates if c.method != "fp32" and c.skipped is None]
    assert int8 and all(c.slower_than_float and not c.chosen for c in int8)
    # no calibration data for an ONNX file: the static recipes are listed as skipped, not built
    skipped = [c for c in caught.value.candidates if c.skipped is not None]
    assert skipped and all(c.method == "static" and not c.path for c in skipped)
    assert caught.value.bench_inputs == {"input_ids": [1, 16], "attention_mask": [1, 16]}
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("arrays, message", [
    ({"input_ids": np.ones((4, 16, 2), np.int64), "attention_mask": np.ones((4, 16), np.int64)}, "expects (N, N)"),
    ({"input_ids": np.full((4, 16), 99, np.int64), "attention_mask": np.ones((4, 16), np.int64)}, "outside [0, 50)"),
])
def test_calibration_shapes_and_ids_that_do_not_fit_are_one_line_errors(tmp_path, arrays, message):
    """Wrong rank, and token ids past the embedding table (its rows are the ids' range)."""
    from conftest import one_line_error

    model = _token_model(tmp_path / "m.onnx")
    (tmp_path / "calib").mkdir()
    np.savez(tmp_path / "calib" / "b.npz", **arrays)
    result = runner.invoke(app, ["quantize", str(model), "--calib", str(tmp_path / "calib"), "--target", "x86-64",
                                 "--out", str(tmp_path / "q")])
    assert message in one_line_error(result, 2)
