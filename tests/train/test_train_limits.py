"""Limits a user sets are honoured or said: ``--max-steps`` alone is the run's length (the data
repeats), and a setting the run cannot reach as written (``--max-steps`` past explicit ``--epochs``,
a batch larger than the data, more accumulation than an epoch holds, a warm-up, evaluation or
save period longer than the run) is one ``warning:`` line and an entry in ``metrics.limits``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
TINY_LM = ["--model", "transformer-lm", "--set", "d_model=16", "--set", "n_heads=2", "--set", "n_layers=1",
           "--set", "max_len=16", "--batch-size", "64", "--log-every", "1000"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def corpus(tmp_path):
    """A small, real text file: a few steps per epoch for a tiny transformer-lm."""
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(120)), encoding="utf-8")
    return path


def records(folder, event):
    return [r for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines()) if r["event"] == event]


def warnings_in(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


def test_max_steps_alone_is_the_length_of_the_run(corpus, tmp_path):
    out = tmp_path / "lm"
    result = runner.invoke(app, ["train", *TINY_LM, "--data", str(corpus), "--max-steps", "100", "--out", str(out)])
    assert result.exit_code == 0, result.output
    start = records(out, "start")[0]
    default_epochs_reach = 20 * start["steps_per_epoch"]
    assert default_epochs_reach < 100  # the data would run out first: what used to stop the run silently
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["metrics"]["steps"] == 100 and start["total_steps"] == 100
    assert records(out, "eval")[-1]["step"] == 100
    assert start["epochs"] == -(-100 // start["steps_per_epoch"])  # the epochs it takes, the last one cut short
    assert "(best step" in result.stdout and "of 100)" in result.stdout
    assert warnings_in(result) == [] and "limits" not in manifest["metrics"]


def test_max_steps_past_explicit_epochs_is_said_and_recorded(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "--batch-size", "512", "--epochs", "2", "--max-steps", "10",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    spe = records(out, "start")[0]["steps_per_epoch"]
    reached = 2 * spe
    assert reached < 10
    said = warnings_in(result)
    assert len(said) == 1, result.stderr
    assert said[0].startswith(f"warning: --max-steps 10 is more than --epochs 2 reach (2 x {spe} steps = {reached})")
    assert f"training {reached} steps" in said[0] and "--epochs" in said[0]
    metrics = json.loads((out / "manifest.json").read_text())["metrics"]
    assert metrics["steps"] == reached
    assert [(x["setting"], x["asked"], x["reached"]) for x in metrics["limits"]] == [("max_steps", 10, reached)]
    assert metrics["limits"][0]["message"] == said[0].removeprefix("warning: ")
    assert "Error" not in result.stderr and "Traceback" not in result.output


def test_every_unreachable_setting_is_said_once(tmp_path):
    from edgekit.data.digits import load_split

    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "--batch-size", "100000", "--grad-accum", "3", "--warmup-steps", "50",
                                 "--eval-every", "100", "--save-every", "99", "--max-steps", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    samples = len(load_split("train"))  # the training split, counted independently
    said = warnings_in(result)
    expected = [
        f"warning: --batch-size 100000 is more than the {samples:,} training samples: each micro-batch holds {samples:,}",
        "warning: --grad-accum 3 is more than the 1 micro-batch an epoch holds: each optimizer step accumulates 1",
        "warning: --warmup-steps 50 is longer than the run (2 steps): warm-up shortened to 2",
        "warning: --eval-every 100 is beyond the run's 2 steps: validated once, at the end",
        "warning: --save-every 99 is beyond the run's 2 steps: last.pt saved once, at the end",
    ]
    joined = " ".join(" ".join(line.split()) for line in said)
    assert len(said) == len(expected), said
    for line in expected:
        assert joined.count(line) == 1, (line, said)
    start = records(out, "start")[0]
    assert start["global_batch"] == samples  # the start line says the batch the data allows, not 300,000
    limits = json.loads((out / "manifest.json").read_text())["metrics"]["limits"]
    assert {x["setting"] for x in limits} == {"batch_size", "grad_accum", "warmup_steps", "eval_every", "save_every"}
    assert len(records(out, "eval")) == 1 and records(out, "eval")[0]["step"] == 2


def test_the_plan_by_hand():
    from edgekit.train.config import TrainConfig
    from edgekit.train.limits import plan

    assert TrainConfig(max_steps=7).epochs is None
    alone = plan(TrainConfig(batch_size=512, max_steps=7), steps_per_epoch=3, micro_per_epoch=3, samples_per_rank=1257)
    assert (alone.total_steps, alone.epochs, alone.limits) == (7, 3, ())  # 3 + 3 + 1 steps
    both = plan(TrainConfig(batch_size=512, epochs=1, max_steps=7), 3, 3, 1257)
    assert both.total_steps == 3 and [x.setting for x in both.limits] == ["max_steps"]
    shorter = plan(TrainConfig(epochs=5, max_steps=7), 3, 3, 1257)
    assert shorter.total_steps == 7 and shorter.limits == ()  # the step limit stops first: what it is for
    assert plan(TrainConfig(), 20, 20, 1257).total_steps == 400  # neither: 20 epochs, as before


def test_api_run_without_progress_raises_a_training_warning(tmp_path):
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train
    from edgekit.train.reporting import TrainingWarning

    with pytest.warns(TrainingWarning, match="--max-steps 50 is more than --epochs 1 reach"):
        _, manifest = train(TrainConfig(batch_size=512, epochs=1, max_steps=50), tmp_path / "run")
    assert manifest.metrics["limits"][0]["setting"] == "max_steps"
