"""``edgekit quantize`` judges every file on representative data, or says it did not: --eval-data
(any method, dynamic too), a held-out part of --calib, synthetic inputs labelled as no evidence,
--require-eval-data for CI. Real ONNX models, the real CLI, ONNX Runtime's real int8 files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import fidelity_models as fm
from edgekit.cli.app import app

pytest.importorskip("onnxruntime")
runner = CliRunner()


def _quantize(*args):
    return runner.invoke(app, ["quantize", *map(str, args)])


def _fidelity(out):
    (entry,) = json.loads((out / "manifest.json").read_text())["files"]
    return entry["metrics"]["fidelity"]


@pytest.fixture(scope="module")
def outlier_model(tmp_path_factory):
    """logits = x @ W + b, one weight 200x the others: a per-tensor int8 step rounds the others away
    (the classes 0, 2, 4 tie on the bias, so those weights decide), while the +-40 and -1000 biases
    keep every cosine near 1."""
    from onnx import TensorProto, helper, numpy_helper, save

    folder = tmp_path_factory.mktemp("outlier")
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((fm.FEATURES, fm.CLASSES)) * 0.5).astype(np.float32)
    w[0, 5] = 100.0
    b = np.array([40, -40, 40, -40, 40, -1000], np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "W"], ["xw"]), helper.make_node("Add", ["xw", "B"], ["logits"])],
        "outlier", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", fm.FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", fm.CLASSES])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(folder / "outlier.onnx"))
    np.save(folder / "eval.npy", rng.standard_normal((64, fm.FEATURES)).astype(np.float32))
    return folder


def test_without_data_the_figures_are_labelled_synthetic_and_never_a_verdict(outlier_model, tmp_path):
    result = _quantize(outlier_model / "outlier.onnx", "--method", "dynamic", "--per-tensor", "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    fidelity = _fidelity(tmp_path / "q")
    assert (fidelity["evidence"], fidelity["verdict"]) == ("synthetic", "unverified")
    assert "not evidence of accuracy" in fidelity["evidence_note"]
    assert "unverified (synthetic)" in result.stdout and "not evidence of accuracy" in result.stdout
    assert "PASS" not in result.stdout


def test_eval_data_refuses_the_dynamic_file_that_synthetic_inputs_passed(outlier_model, tmp_path):
    """The same int8 file: 8 synthetic samples keep argmax agreement over 0.8, the user's 64 rows do
    not; the cosine is near 1 on both, so only the binding metric catches it."""
    result = _quantize(outlier_model / "outlier.onnx", "--method", "dynamic", "--per-tensor",
                       "--eval-data", outlier_model / "eval.npy", "--out", tmp_path / "q")
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "'logits' (classes)" in line and "top1_agreement" in line
    assert "--eval-data" in line and "64 samples" in line
    assert not (tmp_path / "q").exists()


def test_eval_data_on_a_good_dynamic_file_is_a_pass_over_every_sample(tmp_path):
    model = fm.score(tmp_path / "score.onnx")
    rows = np.random.default_rng(1).standard_normal((40, fm.FEATURES)).astype(np.float32)
    np.save(tmp_path / "eval.npy", rows)
    result = _quantize(model, "--method", "dynamic", "--eval-data", tmp_path / "eval.npy", "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    fidelity = _fidelity(tmp_path / "q")
    assert (fidelity["evidence"], fidelity["verdict"], fidelity["samples"]) == ("eval-data", "pass", 40)
    (prob,) = fidelity["outputs"]
    assert prob["kind"] == "scalar" and {b["metric"] for b in prob["binding"]} == {"correlation", "max_abs_of_spread"}
    assert fidelity["headline"]["output"] == "prob"
    assert "PASS (eval-data)" in result.stdout and "correlation" in result.stdout


def test_calib_given_to_dynamic_is_data_to_judge_on(tmp_path):
    model = fm.score(tmp_path / "score.onnx")
    np.save(tmp_path / "calib.npy", np.random.default_rng(2).standard_normal((24, fm.FEATURES)).astype(np.float32))
    result = _quantize(model, "--method", "dynamic", "--calib", tmp_path / "calib.npy", "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    fidelity = _fidelity(tmp_path / "q")
    assert (fidelity["evidence"], fidelity["samples"]) == ("calib-holdout", 24)  # dynamic never saw any of it


def test_static_holds_a_part_of_calib_out_to_judge_on(tmp_path):
    model = fm.ctc(tmp_path / "ctc.onnx")
    np.save(tmp_path / "calib.npy",
            np.random.default_rng(3).standard_normal((50, fm.STEPS, fm.FEATURES)).astype(np.float32))
    result = _quantize(model, "--method", "static", "--calib", tmp_path / "calib.npy", "--calib-batch-size", "10",
                       "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    assert manifest["quantization"]["calibration"]["samples"] == 40  # 50 - 50 // 5 held out
    fidelity = manifest["files"][0]["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["samples"]) == ("calib-holdout", 10)
    (logprobs,) = fidelity["outputs"]
    assert logprobs["kind"] == "sequence" and logprobs["binding"][0]["metric"] == "timestep_agreement"


def test_require_eval_data_refuses_before_any_work(tmp_path):
    model = fm.score(tmp_path / "score.onnx")
    result = _quantize(model, "--method", "dynamic", "--require-eval-data", "--out", tmp_path / "q")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: --require-eval-data") and "--eval-data" in line
    assert not (tmp_path / "q").exists()
    missing = _quantize(model, "--method", "dynamic", "--eval-data", tmp_path / "nowhere", "--out", tmp_path / "q")
    assert missing.exit_code == 2 and "evaluation data not found" in missing.stderr


def test_a_stateful_model_is_judged_on_streams_of_the_users_frames(tmp_path):
    model = fm.vad(tmp_path / "vad.onnx")
    (tmp_path / "streams").mkdir()
    for i, frames in enumerate(fm.frames(3, 20)):
        np.savez(tmp_path / "streams" / f"take{i}.npz", x=frames)
    result = _quantize(model, "--method", "dynamic", "--eval-data", tmp_path / "streams", "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    fidelity = _fidelity(tmp_path / "q")
    assert (fidelity["streams"], fidelity["samples"]) == (3, 60)
    assert fidelity["state_pairs"] == [{"input": "h", "output": "hn"}]
    assert [(o["output"], o["kind"]) for o in fidelity["outputs"]] == [("prob", "scalar"), ("hn", "tensor")]


def test_dynamic_is_judged_on_an_image_folder_through_its_preprocessing(tmp_path):
    """--eval-data as an image folder, read with --calib-preprocess, for a method that never calibrates."""
    import torch
    from PIL import Image

    torch.manual_seed(5)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 14 * 14, fm.CLASSES))
    model = fm._export(net, (torch.zeros(2, 3, 16, 16),), tmp_path / "cnn.onnx", ["image"], ["logits"],
                       {"image": {0: "batch"}, "logits": {0: "batch"}})
    (tmp_path / "photos").mkdir()
    rng = np.random.default_rng(8)
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(tmp_path / "photos" / f"p{i}.png")
    result = _quantize(model, "--method", "dynamic", "--eval-data", tmp_path / "photos",
                       "--calib-preprocess", "resize=16,crop=16,range=0:1", "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    fidelity = _fidelity(tmp_path / "q")
    assert (fidelity["evidence"], fidelity["samples"]) == ("eval-data", 6)
    assert fidelity["outputs"][0]["kind"] == "classes"
    orphan = _quantize(model, "--method", "dynamic", "--calib-preprocess", "range=0:1", "--out", tmp_path / "q2")
    assert orphan.exit_code == 2 and "--calib-preprocess" in orphan.stderr.strip().splitlines()[0]


def test_a_state_pair_names_do_not_tell_is_declared_with_state(tmp_path):
    model = fm.vad(tmp_path / "vad.onnx", names=("x", "carry", "prob", "carry2"))
    (tmp_path / "streams").mkdir()
    for i, frames in enumerate(fm.frames(2, 10)):
        np.save(tmp_path / "streams" / f"take{i}.npy", frames)
    result = _quantize(model, "--method", "dynamic", "--eval-data", tmp_path / "streams", "--state", "carry=carry2",
                       "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    fidelity = _fidelity(tmp_path / "q")
    assert fidelity["state_pairs"] == [{"input": "carry", "output": "carry2"}]
    assert (fidelity["streams"], fidelity["samples"]) == (2, 20)
    wrong = _quantize(model, "--method", "dynamic", "--state", "carry=nowhere", "--out", tmp_path / "q2")
    assert wrong.exit_code == 2 and "state output 'nowhere'" in wrong.stderr
