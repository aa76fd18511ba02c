"""``--sample-axis INPUT=AXIS``: an input whose samples are not on axis 0 (a (C, N, F) layout, every
dim fixed or named so that detection cannot tell) is calibrated and judged on the samples along the
declared axis; without the declaration the same data is refused in one line, as before. Models
written here as ONNX graphs, the real CLI, ONNX Runtime's real int8 files, numpy as the reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

ort = pytest.importorskip("onnxruntime")
runner = CliRunner()
C, F, K = 3, 8, 5  # channels on axis 0, features on axis 2; the samples (N) are axis 1
SAMPLES, HELD_OUT = 40, 8  # static with --calib: the last fifth is kept out of calibration and judged on


def _weights():
    rng = np.random.default_rng(0)
    return rng.standard_normal((F, K)).astype(np.float32), rng.standard_normal((F, K)).astype(np.float32)


def _save(path, nodes, inputs, outputs, inits):
    from onnx import helper, numpy_helper, save

    graph = helper.make_graph(nodes, path.stem, inputs, outputs,
                              [numpy_helper.from_array(value, name) for name, value in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))
    return path


def _cnf_model(path, n="n"):
    """features = sum over c of x[c] @ W, + y @ V: x (C, N, F) with N named ``n``, y (N, F) with its
    batch named ``batch``; or, with ``n`` an int, x alone with every dim fixed (features = sum_c x[c] @ W)."""
    from onnx import TensorProto, helper

    w, v = _weights()
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("ReduceSum", ["xw", "axes"], ["s" if isinstance(n, str) else "features"], keepdims=0)]
    inits = {"W": w, "axes": np.array([0], np.int64)}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [C, n, F])]
    if isinstance(n, str):
        nodes += [helper.make_node("MatMul", ["y", "V"], ["yv"]), helper.make_node("Add", ["s", "yv"], ["features"])]
        inits["V"] = v
        inputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", F]))
    batch = "batch" if isinstance(n, str) else n
    outputs = [helper.make_tensor_value_info("features", TensorProto.FLOAT, [batch, K])]
    return _save(path, nodes, inputs, outputs, inits)


def _float_features(x, y=None):
    """The float model in numpy: samples along axis 1 of x, axis 0 of y."""
    w, v = _weights()
    out = np.einsum("cnf,fk->nk", x.astype(np.float64), w.astype(np.float64))
    return out if y is None else out + y.astype(np.float64) @ v.astype(np.float64)


def _cosine_and_max_abs(ref, got):
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    return float((ref * got).sum() / np.linalg.norm(ref) / np.linalg.norm(got)), float(np.abs(ref - got).max())


@pytest.fixture(scope="module")
def cnf(tmp_path_factory):
    """The two-input model and 40 samples; the 8 held out are 1.25x larger, so a range calibrated on
    them too (or on the wrong samples) would differ from one calibrated on the first 32."""
    folder = tmp_path_factory.mktemp("cnf")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((C, SAMPLES, F)).astype(np.float32)
    y = rng.standard_normal((SAMPLES, F)).astype(np.float32)
    x[:, -HELD_OUT:] *= 1.25
    y[-HELD_OUT:] *= 1.25
    np.savez(folder / "calib.npz", x=x, y=y)
    return {"model": _cnf_model(folder / "cnf.onnx"), "calib": folder / "calib.npz", "x": x, "y": y}


def _quantize(*args):
    return runner.invoke(app, ["quantize", *map(str, args)])


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_static_calibrates_and_judges_along_the_declared_axis(cnf, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "q"
    result = _quantize(cnf["model"], "--method", "static", "--calib", cnf["calib"], "--sample-axis", "x=1",
                       "--activation-type", "uint8", "--out", out)
    assert result.exit_code == 0, result.output
    manifest = _manifest(out)
    calibration = manifest["quantization"]["calibration"]
    assert (calibration["samples"], calibration["sample_axes"]) == (SAMPLES - HELD_OUT, {"x": 1})
    (entry,) = manifest["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["verdict"], fidelity["samples"]) == ("calib-holdout", "pass", HELD_OUT)
    assert (fidelity["sample_axes"], fidelity["sample_axes_declared"]) == ({"x": 1, "y": 0}, ["x"])

    # calibrated on the first 32 samples along axis 1: x's int8 step is their range / 255 (uint8 minmax)
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(out / entry["path"])).graph
    init = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    (quant_x,) = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x"]
    calibrated = cnf["x"][:, :SAMPLES - HELD_OUT]
    low, high = min(float(calibrated.min()), 0.0), max(float(calibrated.max()), 0.0)
    assert float(init[quant_x.input[1]]) == pytest.approx((high - low) / 255, rel=1e-6)
    whole = max(float(cnf["x"].max()), 0.0) - min(float(cnf["x"].min()), 0.0)
    assert float(init[quant_x.input[1]]) != pytest.approx(whole / 255, rel=1e-3)

    # judged on the 8 held-out samples along axis 1: the int8 file vs numpy's float model on them
    session = ort.InferenceSession(str(out / entry["path"]), providers=["CPUExecutionProvider"])
    x, y = cnf["x"][:, -HELD_OUT:], cnf["y"][-HELD_OUT:]
    (got,) = session.run(None, {"x": np.ascontiguousarray(x), "y": y})
    cosine, max_abs = _cosine_and_max_abs(_float_features(x, y), got)
    (judged,) = fidelity["outputs"]
    assert judged["output"] == "features" and judged["samples"] == HELD_OUT
    assert judged["metrics"]["cosine"] == pytest.approx(cosine, rel=1e-5)
    assert judged["metrics"]["max_abs"] == pytest.approx(max_abs, rel=1e-4)


def test_without_the_declaration_the_same_data_is_refused_in_one_line(cnf, tmp_path):
    out = tmp_path / "q"
    result = _quantize(cnf["model"], "--method", "static", "--calib", cnf["calib"], "--out", out)
    assert result.exit_code == 2
    line = _one_line(result)
    assert "different sample counts" in line and "x 3 (axis 0), y 40 (axis 0)" in line and "--sample-axis" in line
    assert not out.exists()


def test_dynamic_judged_on_eval_data_along_a_negative_axis_of_a_fixed_shape(tmp_path):
    """x (3, 4, 8), every dim fixed: the model takes 4 samples a call, axis -2 counts them; the 40
    samples of --eval-data are judged 4 at a time, as the file is run here on the same chunks."""
    model = _cnf_model(tmp_path / "fixed.onnx", n=4)
    x = np.random.default_rng(2).standard_normal((C, SAMPLES, F)).astype(np.float32)
    np.save(tmp_path / "eval.npy", x)
    refused = _quantize(model, "--method", "dynamic", "--eval-data", tmp_path / "eval.npy", "--out", tmp_path / "r")
    assert refused.exit_code == 2
    assert "expects (3, 4, 8) (axis 1 differs)" in _one_line(refused) and not (tmp_path / "r").exists()

    out = tmp_path / "q"
    result = _quantize(model, "--method", "dynamic", "--eval-data", tmp_path / "eval.npy", "--sample-axis", "x=-2",
                       "--out", out)
    assert result.exit_code == 0, result.output
    (entry,) = _manifest(out)["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["samples"], fidelity["sample_axes"]) == ("eval-data", SAMPLES, {"x": 1})
    session = ort.InferenceSession(str(out / entry["path"]), providers=["CPUExecutionProvider"])
    got = np.concatenate([session.run(None, {"x": np.ascontiguousarray(x[:, i:i + 4])})[0]
                          for i in range(0, SAMPLES, 4)])
    cosine, max_abs = _cosine_and_max_abs(_float_features(x), got)
    (judged,) = fidelity["outputs"]
    assert judged["metrics"]["cosine"] == pytest.approx(cosine, rel=1e-5)
    assert judged["metrics"]["max_abs"] == pytest.approx(max_abs, rel=1e-4)


@pytest.mark.parametrize("value, said", [
    ("z=1", "'z', which is not an input of the model (x, y)"),
    ("x=3", "input 'x' has 3 axes (-3..2; shape (3, n, 8))"),
    ("x=-4", "input 'x' has 3 axes"),
    ("x=one", "takes INPUT=AXIS, AXIS an integer"),
    ("x", "takes INPUT=AXIS"),
])
def test_bad_values_are_refused_up_front(cnf, tmp_path, value, said):
    out = tmp_path / "q"
    result = _quantize(cnf["model"], "--method", "static", "--calib", cnf["calib"], "--sample-axis", value,
                       "--out", out)
    assert result.exit_code == 2
    assert said in _one_line(result)
    assert not out.exists()


def test_pipeline_refuses_an_axis_the_input_lacks_before_any_work(cnf, tmp_path):
    out = tmp_path / "p"
    result = runner.invoke(app, ["pipeline", "--source", str(cnf["model"]), "--calib", str(cnf["calib"]),
                                 "--sample-axis", "y=2", "--methods", "static", "--format", "onnx", "--out", str(out)])
    assert result.exit_code == 2
    assert "--sample-axis y=2: input 'y' has 2 axes" in _one_line(result)
    assert not out.exists()


def test_pipeline_calibrates_and_judges_along_the_declared_axis(cnf, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "p"
    result = runner.invoke(app, ["pipeline", "--source", str(cnf["model"]), "--calib", str(cnf["calib"]),
                                 "--sample-axis", "x=1", "--methods", "static", "--format", "onnx", "--min-runs", "2",
                                 "--min-time", "0", "--processes", "1", "--no-reference", "--no-emulate",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    manifest = _manifest(out / "quantized" / "static")
    assert manifest["quantization"]["calibration"]["samples"] == SAMPLES - HELD_OUT
    fidelity = manifest["files"][0]["metrics"]["fidelity"]
    assert (fidelity["samples"], fidelity["sample_axes_declared"], fidelity["verdict"]) == (HELD_OUT, ["x"], "pass")


def test_a_npy_file_is_read_along_any_axis_without_reading_it_whole(tmp_path):
    from edgekit.userdata.sets import NpyFile

    array = np.arange(3 * 7 * 4 * 2, dtype=np.float32).reshape(3, 7, 4, 2)
    np.save(tmp_path / "a.npy", array)
    npy = NpyFile(tmp_path / "a.npy")
    for axis in (1, 2, 3):
        for start, stop in ((0, 2), (3, 7), (5, 9), (1, 1)):
            index = (slice(None),) * axis + (slice(start, stop),)
            np.testing.assert_array_equal(npy.along(axis, start, stop), array[index])


TNC_MODULE = '''
import torch


class TNC(torch.nn.Module):
    """An LSTM laid out (T, N, C) (batch_first=False), a linear head on its last step."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lstm = torch.nn.LSTM(8, 16)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[-1])


def make():
    return TNC()
'''


def test_a_time_major_lstm_is_judged_on_its_sequences_not_its_time_steps(tmp_path, monkeypatch):
    """x (12, N, 8): axis 0 is time, fixed; the dynamic axis (``sequence`` to --input-shape) is the
    batch, which no name tells. Declared, the 40 sequences of --eval-data are judged along axis 1
    (the ONNX file checked against the module run here, on the same chunks)."""
    torch = pytest.importorskip("torch")
    (tmp_path / "tnc_sample_axis.py").write_text(TNC_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    x = np.random.default_rng(3).standard_normal((12, SAMPLES, 8)).astype(np.float32)
    np.save(tmp_path / "eval.npy", x)
    out = tmp_path / "q"
    result = _quantize("tnc_sample_axis:make", "--input-shape", "x=12xNx8", "--method", "dynamic",
                       "--format", "onnx", "--eval-data", tmp_path / "eval.npy", "--sample-axis", "x=1", "--out", out)
    assert result.exit_code == 0, result.output
    (entry,) = _manifest(out)["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["samples"], fidelity["sample_axes"], fidelity["verdict"]) == (SAMPLES, {"x": 1}, "pass")
    import tnc_sample_axis

    with torch.no_grad():
        reference = tnc_sample_axis.make()(torch.from_numpy(x)).numpy()
    from edgekit.fidelity.assess import EVAL_BATCH  # dynamic int8 scales by the batch it is given

    session = ort.InferenceSession(str(out / entry["path"]), providers=["CPUExecutionProvider"])
    got = np.concatenate([session.run(None, {"x": np.ascontiguousarray(x[:, i:i + EVAL_BATCH])})[0]
                          for i in range(0, SAMPLES, EVAL_BATCH)])
    cosine, max_abs = _cosine_and_max_abs(reference, got)
    (judged,) = fidelity["outputs"]
    assert judged["metrics"]["cosine"] == pytest.approx(cosine, rel=1e-5)
    assert judged["metrics"]["max_abs"] == pytest.approx(max_abs, rel=1e-3)


CNF_MODULE = '''
import torch


class CNF(torch.nn.Module):
    """x (C, N, F) -> (N, K): a linear layer per (channel, sample), summed over the channels."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 5)

    def forward(self, x):
        return torch.relu(self.lin(x)).sum(0)


def make():
    return CNF()
'''


@pytest.mark.slow  # ExecuTorch's lowering: ~20 CPU-s
def test_executorch_static_counts_and_judges_samples_on_the_declared_axis(cnf, tmp_path, monkeypatch):
    pytest.importorskip("executorch")
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cnf_sample_axis.py").write_text(CNF_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    np.save(tmp_path / "calib.npy", cnf["x"])
    out = tmp_path / "q"
    result = _quantize("cnf_sample_axis:make", "--input-shape", f"x={C}xNx{F}", "--method", "static",
                       "--format", "executorch", "--calib", tmp_path / "calib.npy", "--sample-axis", "x=1",
                       "--out", out)
    assert result.exit_code == 0, result.output
    (entry,) = _manifest(out)["files"]
    assert entry["details"]["calibration_samples"] == SAMPLES - HELD_OUT
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["samples"], fidelity["sample_axes"], fidelity["verdict"]) == (HELD_OUT, {"x": 1}, "pass")


def test_the_same_samples_laid_out_on_axis_0_give_the_same_calibration_and_verdict(cnf, tmp_path, monkeypatch):
    """The reference layout: x as (N, C, F) into the same function (its sum over axis 1), axis 0
    counting samples as always; the declared (C, N, F) run must calibrate the same samples to the
    same ranges and judge the same held-out ones to the same figures."""
    from onnx import TensorProto, helper

    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    w, v = _weights()
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("ReduceSum", ["xw", "axes"], ["s"], keepdims=0),
             helper.make_node("MatMul", ["y", "V"], ["yv"]), helper.make_node("Add", ["s", "yv"], ["features"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", C, F]),
              helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", F])]
    outputs = [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", K])]
    ncf = _save(tmp_path / "ncf.onnx", nodes, inputs, outputs, {"W": w, "axes": np.array([1], np.int64), "V": v})
    np.savez(tmp_path / "ncf.npz", x=np.ascontiguousarray(np.swapaxes(cnf["x"], 0, 1)), y=cnf["y"])
    runs = {}
    for name, args in (("ncf", (ncf, "--calib", tmp_path / "ncf.npz")),
                       ("cnf", (cnf["model"], "--calib", cnf["calib"], "--sample-axis", "x=1"))):
        result = _quantize(*args, "--method", "static", "--activation-type", "uint8", "--out", tmp_path / name)
        assert result.exit_code == 0, result.output
        runs[name] = _manifest(tmp_path / name)
    calibrated = [m["quantization"]["calibration"]["samples"] for m in runs.values()]
    judged = [m["files"][0]["metrics"]["fidelity"] for m in runs.values()]
    assert calibrated == [SAMPLES - HELD_OUT] * 2
    assert [f["samples"] for f in judged] == [HELD_OUT] * 2
    assert judged[0]["outputs"][0]["metrics"] == pytest.approx(judged[1]["outputs"][0]["metrics"], rel=1e-5)



def _wide_cnf_model(path):
    """features = sum over c of relu(x[c] @ W1) @ W2, x (C, n, F): wide enough (F -> 1024 -> 1024) that an int8
    file is several times faster than float on any host (``--auto`` keeps no candidate slower than fp32)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(2)
    inits = {"W1": (rng.standard_normal((F, 1024)) / np.sqrt(F)).astype(np.float32),
             "W2": (rng.standard_normal((1024, 1024)) / 32).astype(np.float32), "axes": np.array([0], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "W2"], ["xw"]),
             helper.make_node("ReduceSum", ["xw", "axes"], ["features"], keepdims=0)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [C, "n", F])]
    outputs = [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", 1024])]
    return _save(path, nodes, inputs, outputs, inits)


@pytest.mark.slow  # six candidates timed (~35 s)
def test_auto_calibrates_and_judges_every_candidate_along_the_declared_axis(cnf, tmp_path, monkeypatch):
    """``--auto --sample-axis x=1``: the static candidates calibrate on the first 32 samples along axis 1 and
    every candidate is judged on the 8 held out (the chosen file's cosine equals ONNX Runtime's float model
    against it on those samples)."""
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    model = _wide_cnf_model(tmp_path / "wide.onnx")
    np.savez(tmp_path / "calib.npz", x=cnf["x"])
    out = tmp_path / "auto"
    result = _quantize(model, "--auto", "--calib", tmp_path / "calib.npz", "--sample-axis", "x=1", "--format", "onnx",
                       "--no-emulate", "--out", out)
    assert result.exit_code == 0, result.output
    (entry,) = _manifest(out)["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["samples"], fidelity["sample_axes"]) == ("calib-holdout", HELD_OUT, {"x": 1})
    x = np.ascontiguousarray(cnf["x"][:, -HELD_OUT:])
    (want,) = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = ort.InferenceSession(str(out / entry["path"]), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    cosine, _ = _cosine_and_max_abs(want, got)
    assert fidelity["outputs"][0]["metrics"]["cosine"] == pytest.approx(cosine, rel=1e-5)
