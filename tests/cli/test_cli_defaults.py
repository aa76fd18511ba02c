"""Defaults that should not surprise: train's output folder and threads, an interrupted run's hint,
`--json` results, one message for a broken budget, progress for the long quantization steps."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
TINY = ["--set", "width=4", "--max-steps", "2", "--batch-size", "32"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def test_train_default_out_is_per_model_and_json_result(workdir):
    result = runner.invoke(app, ["train", *TINY, "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    assert (workdir / "runs" / "digits-cnn" / "manifest.json").is_file()  # runs/<model>, not runs/digits
    doc = json.loads(result.stdout)  # stdout holds only the JSON; progress went to stderr
    manifest = json.loads((workdir / "runs" / "digits-cnn" / "manifest.json").read_text())
    assert doc["kind"] == "checkpoint" and doc["model"] == "digits-cnn"
    assert doc["metrics"]["accuracy"] == manifest["metrics"]["accuracy"]
    assert doc["path"] == str((workdir / "runs" / "digits-cnn").resolve())


def test_small_models_train_on_one_thread_by_default(workdir, monkeypatch):
    from edgekit.train.threads import SMALL_MODEL_PARAMETERS, default_threads, usable_cores

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert default_threads(SMALL_MODEL_PARAMETERS - 1) == 1
    assert default_threads(10 * SMALL_MODEL_PARAMETERS) == max(1, usable_cores() - 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_threads(10) is None  # the user's OpenMP setting is torch's to follow
    monkeypatch.delenv("OMP_NUM_THREADS")

    import torch

    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    seen = []
    before = torch.get_num_threads()
    train(TrainConfig(model_config={"width": 4}, max_steps=1, batch_size=16), workdir / "t",
          progress=lambda r: seen.append(r.get("threads")) if r["event"] == "start" else None)
    assert seen == [1]
    assert torch.get_num_threads() == before  # the caller's setting is put back
    explicit = []
    train(TrainConfig(model_config={"width": 4}, max_steps=1, batch_size=16, threads=2), workdir / "u",
          progress=lambda r: explicit.append(r.get("threads")) if r["event"] == "start" else None)
    assert explicit == [2]


def test_interrupted_train_says_how_to_resume(workdir, monkeypatch):
    import edgekit.train.loop as loop
    from edgekit.cli.train import interrupted_hint

    def interrupted(config, out, progress=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "train", interrupted)
    result = runner.invoke(app, ["train", *TINY])
    assert result.exit_code == 130
    assert result.stderr.strip() == "Error: interrupted before the first saved state; nothing to resume " \
                                    "(--save-every N saves more often)"
    partial = workdir / "runs" / "digits-cnn.partial"
    partial.mkdir(parents=True)
    (partial / "last.pt").write_bytes(b"state")
    result = runner.invoke(app, ["train", *TINY, "-m", "digits-cnn"])
    assert result.exit_code == 130
    line = result.stderr.strip()
    assert line.startswith("Error: interrupted; the last saved state is in") and "--resume" in line
    assert "edgekit train -m digits-cnn -o runs/digits-cnn ... --resume" in line
    assert interrupted_hint("x", workdir / "nothing").startswith("interrupted before")


def test_quantize_json_and_no_empty_budget_table(digits_checkpoint, workdir):
    from conftest import CALIB_DIGITS

    result = runner.invoke(app, ["quantize", str(digits_checkpoint), "--calib", str(CALIB_DIGITS), "--format", "onnx",
                                 "--max-drop", "50", "-o", str(workdir / "q")])
    assert result.exit_code == 0, result.output + result.stderr
    # the fully quantized file met the budget: one line, no empty sensitivity table
    assert "Accuracy budget met (onnx): drop" in result.stdout and "no layer kept in float" in result.stdout
    assert "drop if kept float" not in result.stdout and "layer" not in result.stdout.split("Accuracy budget")[1][:20]
    as_json = runner.invoke(app, ["quantize", str(digits_checkpoint), "--calib", str(CALIB_DIGITS), "--format", "onnx",
                                  "-o", str(workdir / "q2"), "--json"])
    assert as_json.exit_code == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["kind"] == "quantized" and doc["recipe"]["method"] == "static"
    assert doc["files"][0]["accuracy"] is not None and doc["files"][0]["precision"] == "int8"
    from int8_checks import agreement_with_float, onnx_int8_initializers

    from edgekit.formats.evaluation import onnx_predictor

    int8, floats = onnx_int8_initializers(workdir / "q2" / doc["files"][0]["path"])  # ONNX's own reading
    assert int8 >= 0.95 * (int8 + floats), (int8, floats)
    cosine, top1 = agreement_with_float(digits_checkpoint, onnx_predictor(workdir / "q2" / doc["files"][0]["path"]))
    assert cosine > 0.99 and top1 >= 0.95, (cosine, top1)


def test_step_progress_is_reported_not_printed(digits_checkpoint, tmp_path, capsys):
    """QAT reports each epoch through the callback; the library itself prints nothing."""
    from edgekit.quantize.api import quantize
    from edgekit.quantize.progress import StepProgress

    events = []
    quantize(digits_checkpoint, "qat", tmp_path / "qat", "rpi4", formats=("torchscript",), epochs=2,
             progress=events.append)
    steps = [(e.stage, e.done, e.total) for e in events if isinstance(e, StepProgress)]
    assert steps == [("qat", 0, 2), ("qat", 1, 2), ("qat", 2, 2)]
    assert "val accuracy" in events[-1].describe()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_quantize_cli_shows_step_progress_in_logs(digits_checkpoint, workdir, monkeypatch):
    """Not a terminal (a CI log): one line per QAT epoch on stderr."""
    monkeypatch.delenv("EDGEKIT_NO_PROGRESS", raising=False)
    result = runner.invoke(app, ["quantize", str(digits_checkpoint), "--method", "qat", "--qat-epochs", "1",
                                 "--format", "torchscript", "-o", str(workdir / "q")])
    assert result.exit_code == 0, result.output + result.stderr
    assert "QAT epoch 0/1: PTQ val accuracy" in result.stderr
    assert "QAT epoch 1/1: loss" in result.stderr


def test_sensitivity_and_auto_report_progress(tmp_path):
    import numpy as np

    from edgekit.quantize.api import quantize
    from edgekit.quantize.search.auto import quantize_auto
    from edgekit.core.errors import UsageError
    from edgekit.quantize.search.budget import AccuracyBudgetError
    from edgekit.quantize.progress import StepProgress

    calib = tmp_path / "calib"
    calib.mkdir()
    np.save(calib / "x.npy", np.random.default_rng(0).standard_normal((16, 3, 6, 6)).astype(np.float32))
    source = dict(input_shapes=["Nx3x6x6"])
    events = []
    with pytest.raises((AccuracyBudgetError, UsageError)):  # budget 0: unmeetable, whatever falls back
        quantize("tiny_models:tiny_net", "static", tmp_path / "q", "x86-64", calib=calib,
                 formats=("onnx",), max_drop=0, progress=events.append, **source)
    layers = [e for e in events if isinstance(e, StepProgress) and e.stage == "sensitivity"]
    assert layers[0].done == 0 and layers[0].total >= 2  # announced before the first layer is rebuilt
    assert [e.done for e in layers] == list(range(len(layers))) and len(layers) >= 2  # then one per layer

    events.clear()
    from edgekit.quantize.search.auto import NoCandidateError

    try:  # on a net this small int8 may well be slower than float: then --auto refuses, after its progress
        quantize_auto("tiny_models:tiny_net", tmp_path / "a", "x86-64", calib=calib, max_drop=100,
                      progress=events.append, bench_settings={"min_runs": 3, "min_time_s": 0, "warmup": 1}, **source)
    except NoCandidateError as exc:
        assert "slower than float" in str(exc)
    auto = [e for e in events if isinstance(e, StepProgress) and e.stage == "auto"]
    assert [e.done for e in auto] == list(range(auto[0].total)) and auto[0].total >= 2
    assert any(isinstance(e, StepProgress) and e.stage == "auto-bench" for e in events)


def test_progress_renderers_take_every_kind_of_report(monkeypatch):
    """The live bar (a terminal) and the log lines both accept calibration and step reports."""
    import io

    from rich.console import Console

    import edgekit.cli.quantize as cli_quantize
    from edgekit.quantize.calibration.onnx_ranges import CalibrationProgress
    from edgekit.quantize.progress import StepProgress

    reports = [CalibrationProgress(32, 256, 0.1), StepProgress("qat", 0, 2, "PTQ val accuracy 0.9"),
               StepProgress("qat", 1, 2, "loss 0.1"), StepProgress("sensitivity", 2, 5, "conv1"),
               StepProgress("auto", 0, 3, "building dynamic (onnx)"), StepProgress("qat", 2, 2, "loss 0.05")]
    monkeypatch.delenv("EDGEKIT_NO_PROGRESS", raising=False)
    for terminal in (True, False):
        monkeypatch.setattr(cli_quantize, "progress_enabled", lambda terminal=terminal: terminal)
        sink = io.StringIO()
        err = Console(file=sink, force_terminal=terminal, width=100)
        with cli_quantize._calibration_progress(err) as report:
            for item in reports:
                report(item)
        text = sink.getvalue()
        assert "QAT epoch 1/2: loss 0.1" in text and "QAT epoch 2/2: loss 0.05" in text
        if not terminal:  # a log: step lines only (no calibration batches), the last of each stage kept
            assert "calibrating" not in text and "sensitivity: layer 2/5: conv1" in text


def test_pipeline_reports_each_training_epoch():
    from edgekit.pipeline.run import _epoch_lines

    said = []
    report = _epoch_lines(said.append)
    report({"event": "step", "step": 1})
    report({"event": "eval", "epoch": 2, "epochs": 20, "val_accuracy": 0.91234, "val_loss": 0.3, "step": 40})
    assert said == ["  epoch 2/20: accuracy 0.9123, loss 0.3000"]
