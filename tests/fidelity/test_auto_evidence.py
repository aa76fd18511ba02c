"""``edgekit quantize --auto`` judges its candidates as ``--method`` judges its file: on --eval-data or the
held-out part of --calib, every output by the metric that binds for it, stateful models on streams with
their state fed back (calibration too), --output-kind and --require-eval-data as plain quantize takes them.
Real ONNX models, the real CLI, ONNX Runtime's real int8 files.

The models (``fidelity_models.wide_*``) have a wide float front so that an int8 file is several times
faster than float on any host: --auto keeps only candidates faster than float, and a small model's
timings would be a coin flip."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import fidelity_models as fm
from edgekit.cli.app import app

pytest.importorskip("onnxruntime")
runner = CliRunner()


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Calibration runs here: no ranges cached by an earlier run of the same files."""
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


def _auto(*args):
    return runner.invoke(app, ["quantize", *map(str, args), "--auto", "--format", "onnx", "--target", "x86-64"],
                         env={"EDGEKIT_NO_PROGRESS": "1", "COLUMNS": "250"})


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.slow
def test_auto_calibrates_a_stateful_model_on_its_stream_and_judges_every_output(tmp_path):
    """One stream of 120 calls in --calib, the state declared (--state): the static recipes calibrate on
    96 of them, call after call with the state fed back (a stream's later calls carry no state: without feeding back they could not
    run), and every candidate is judged on the other 24 as a stream, the state output included."""
    model = fm.wide_vad(tmp_path / "vad.onnx")
    np.savez(tmp_path / "stream.npz", x=fm.wide_stream(120))
    result = _auto(model, "--calib", tmp_path / "stream.npz", "--state", "carry=carry2", "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    manifest = _manifest(tmp_path / "q")
    assert manifest["quantization"]["calibration"]["samples"] == 96  # 120 less the held-out fifth
    (entry,) = manifest["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["streams"], fidelity["samples"]) == ("calib-holdout", 1, 24)
    assert fidelity["state_pairs"] == [{"input": "carry", "output": "carry2"}]
    assert [(o["output"], o["kind"]) for o in fidelity["outputs"]] == [("prob", "scalar"), ("carry2", "tensor")]
    assert fidelity["verdict"] == "pass"
    candidates = manifest["quantization"]["candidates"]
    static = [c for c in candidates if c["method"] == "static"]
    assert len(static) == 5 and all(c["error"] is None for c in static), static
    judged = [c for c in candidates if c["fidelity"]]
    assert judged and all(c["fidelity"]["evidence"] == "calib-holdout" and c["fidelity"]["output"] in ("prob", "carry2")
                          for c in judged)
    assert "PASS (calib-holdout)" in result.stdout and "carry2 [tensor]" in result.stdout
    wrong = _auto(model, "--calib", tmp_path / "stream.npz", "--state", "carry=nowhere", "--out", tmp_path / "q2")
    assert wrong.exit_code == 2 and "state output 'nowhere'" in wrong.stderr and not (tmp_path / "q2").exists()


def test_auto_picks_by_the_binding_metric_on_the_users_data(tmp_path):
    """--calib holds a loud sample in every ten, so static int8 keeps ranges 60x wider than the user's
    typical inputs: on those (--eval-data) its probabilities barely move (correlation < 0.95) though
    every value stays near 0.5 (cosine ~1). The static rows are refused by the correlation; the dynamic
    file (its activations scaled per call) is chosen, with the correlation ONNX Runtime gives by hand."""
    model = fm.wide_score(tmp_path / "score.onnx")
    calib, typical = fm.loud_calibration()
    np.save(tmp_path / "calib.npy", calib)
    np.save(tmp_path / "eval.npy", typical)
    result = _auto(model, "--calib", tmp_path / "calib.npy", "--eval-data", tmp_path / "eval.npy",
                   "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    manifest = _manifest(tmp_path / "q")
    assert manifest["quantization"]["config"]["judged_on"] == "eval-data"
    candidates = {c["name"]: c for c in manifest["quantization"]["candidates"]}
    refused = [c for c in candidates.values() if c["refused"]]
    assert refused and all(c["method"] == "static" for c in refused)
    for c in refused:
        assert "'prob' (scalar)" in c["refused"] and "correlation" in c["refused"] and "--eval-data" in c["refused"]
        assert not c["meets_budget"] and not c["chosen"]
    assert "refused: output 'prob' (scalar)" in result.stdout
    (chosen,) = [c for c in candidates.values() if c["chosen"]]
    assert chosen["fidelity"]["metric"] == "correlation" and chosen["fidelity"]["evidence"] == "eval-data"
    (entry,) = manifest["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["samples"], fidelity["verdict"]) == ("eval-data", 40, "pass")
    got = np.asarray(fm.ort_runner(tmp_path / "q" / entry["path"])({"x": typical})[0]).ravel()
    want = np.asarray(fm.ort_runner(model)({"x": typical})[0]).ravel()
    assert chosen["value"] == pytest.approx(np.corrcoef(got, want)[0, 1], abs=1e-3)


def test_auto_output_kind_overrides_the_detected_kind(tmp_path):
    """One probability per sample is a scalar (correlation binds); declared a tensor, the cosine binds,
    for the candidates' rows and the chosen file alike. Without --calib only the dynamic recipe is built."""
    model = fm.wide_score(tmp_path / "score.onnx")
    np.save(tmp_path / "eval.npy", np.random.default_rng(4).standard_normal((16, fm.WIDE_FEATURES)).astype(np.float32))
    result = _auto(model, "--eval-data", tmp_path / "eval.npy", "--output-kind", "prob=tensor", "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    manifest = _manifest(tmp_path / "q")
    (chosen,) = [c for c in manifest["quantization"]["candidates"] if c["chosen"]]
    assert (chosen["method"], chosen["metric"], chosen["fidelity"]["output"]) == ("dynamic", "cosine", "prob")
    (prob,) = manifest["files"][0]["metrics"]["fidelity"]["outputs"]
    assert prob["kind"] == "tensor" and [b["metric"] for b in prob["binding"]] == ["cosine"]
    wrong = _auto(model, "--output-kind", "prob=colour", "--out", tmp_path / "q2")
    assert wrong.exit_code == 2 and "--output-kind takes OUTPUT=KIND" in wrong.stderr
    nowhere = _auto(model, "--output-kind", "score=tensor", "--out", tmp_path / "q2")
    assert nowhere.exit_code == 2
    assert nowhere.stderr.strip().splitlines() == [f"Error: --output-kind score=...: {model} has no output 'score' "
                                                   "(outputs: prob)"]
    assert not (tmp_path / "q2").exists()


def test_auto_require_eval_data_refuses_without_real_data(tmp_path):
    model = fm.wide_score(tmp_path / "score.onnx")
    result = _auto(model, "--require-eval-data", "--out", tmp_path / "q")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: --require-eval-data") and "--eval-data" in line
    assert not (tmp_path / "q").exists()
    np.save(tmp_path / "few.npy", np.zeros((4, fm.WIDE_FEATURES), np.float32))  # too few to hold any out
    few = _auto(model, "--require-eval-data", "--calib", tmp_path / "few.npy", "--out", tmp_path / "q")
    assert few.exit_code == 2 and "at least 10 samples" in few.stderr.strip().splitlines()[0]
    assert not (tmp_path / "q").exists()


def test_a_streams_held_out_part_is_the_steps_calibration_did_not_run(tmp_path):
    """Plain static (the judging --auto shares): one stream of 60 calls, 48 calibrated; the figures are
    those of calls 48-59 run from a zero state, each model feeding back its own state, by hand with ONNX
    Runtime (before, calls 0-11, which calibration had used, were judged and called held out)."""
    model = fm.vad(tmp_path / "vad.onnx")
    (frames,) = fm.frames(1, 60, seed=3)
    np.savez(tmp_path / "stream.npz", x=frames)
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(tmp_path / "stream.npz"),
                                 "--format", "onnx", "--out", str(tmp_path / "q")])
    assert result.exit_code == 0, result.output
    manifest = _manifest(tmp_path / "q")
    assert manifest["quantization"]["calibration"]["samples"] == 48
    (entry,) = manifest["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["streams"], fidelity["samples"]) == ("calib-holdout", 1, 12)

    def probs(path):
        run, h, out = fm.ort_runner(path), np.zeros((1, 1, fm.HIDDEN), np.float32), []
        for frame in frames[48:]:
            prob, h = run({"x": frame[None], "h": h})
            out.append(float(np.ravel(prob)[0]))
        return np.array(out)

    want, got = probs(model), probs(tmp_path / "q" / entry["path"])
    binding = {b["metric"]: b["value"] for o in fidelity["outputs"] if o["output"] == "prob" for b in o["binding"]}
    assert binding["correlation"] == pytest.approx(np.corrcoef(got, want)[0, 1], abs=2e-6)
    # calls 0-11 give 0.0101 here: 3.7x the held-out calls' figure
    assert binding["max_abs_of_spread"] == pytest.approx(np.abs(got - want).max() / np.ptp(want), rel=1e-3)


def test_auto_judges_on_an_image_folder_through_its_preprocessing(tmp_path):
    """--eval-data as images, read with --calib-preprocess (no --calib: only the dynamic recipe is built);
    without either data option the preprocessing describes nothing and is refused."""
    import torch
    from PIL import Image

    torch.manual_seed(6)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, fm.WIDE_FEATURES), fm._wide_front(),
                              torch.nn.Linear(fm.WIDE, 1), torch.nn.Sigmoid())
    model = fm._export(net, (torch.zeros(2, 3, 8, 8),), tmp_path / "cnn.onnx", ["image"], ["prob"],
                       {"image": {0: "batch"}, "prob": {0: "batch"}})
    (tmp_path / "photos").mkdir()
    rng = np.random.default_rng(9)
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (10, 12, 3), dtype=np.uint8)).save(tmp_path / "photos" / f"p{i}.png")
    result = _auto(model, "--eval-data", tmp_path / "photos", "--calib-preprocess", "resize=8,crop=8,range=0:1",
                   "--out", tmp_path / "q")
    assert result.exit_code == 0, result.output
    fidelity = _manifest(tmp_path / "q")["files"][0]["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["samples"], fidelity["verdict"]) == ("eval-data", 12, "pass")
    orphan = _auto(model, "--calib-preprocess", "range=0:1", "--out", tmp_path / "q2")
    assert orphan.exit_code == 2 and "--calib-preprocess" in orphan.stderr.strip().splitlines()[0]
    assert not (tmp_path / "q2").exists()
