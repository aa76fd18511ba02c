"""`edgekit train` and `edgekit generate` through the CLI: exit codes, messages, progress output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
TINY_LSTM = ["--model", "lstm-lm", "--set", "embed_dim=16", "--set", "hidden_size=32", "--set", "n_heads=2",
             "--set", "max_len=32", "--batch-size", "8", "--max-steps", "4", "--log-every", "2"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


def test_help_does_not_import_torch():
    code = (
        "import sys\n"
        "from edgekit.cli.app import app\n"
        "for args in (['--help'], ['train', '--help'], ['generate', '--help']):\n"
        "    try:\n"
        "        app(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--precision", "--grad-accum", "--clip-grad-norm", "--warmup-steps", "--resume", "--strategy",
                 "--grad-checkpoint", "--compile", "--max-nonfinite", "--save-every", "--profile", "--top-k"):
        assert flag in proc.stdout


def test_train_prints_plain_progress_and_the_result(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "--set", "width=4", "--max-steps", "4", "--log-every", "2",
                                 "--batch-size", "32", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Trained digits-cnn: test accuracy" in result.stdout
    assert "training digits-cnn on cpu (fp32" in result.stderr
    assert "step 2/4  loss" in result.stderr and "samples/s" in result.stderr
    assert "eval at step 4" in result.stderr
    assert (out / "manifest.json").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "width"], "--set takes KEY=VALUE, got 'width'"),
        (["--set", "depth=3"], "model 'digits-cnn' has no config key 'depth'"),
        (["--model", "transformer-lm", "--set", "attention=flash"], "unknown attention 'flash'; choose one of: full, linear, local"),
        (["--precision", "fp8"], "unknown precision 'fp8'"),
        (["--resume"], "nothing to resume in"),
        (["--grad-checkpoint"], "--grad-checkpoint suits transformer"),
        (["--model", "lstm-lm", "--data", "{tmp}/missing.txt"], "text file not found"),
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = runner.invoke(app, ["train", *args, "--max-steps", "1", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: ") and message in result.stderr
    assert "Traceback" not in result.output


def test_train_a_language_model_then_generate(tmp_path):
    out = tmp_path / "lm"
    result = runner.invoke(app, ["train", *TINY_LSTM, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Trained lstm-lm: test next token accuracy" in result.stdout and "perplexity" in result.stdout
    assert "tokens/s" in result.stderr

    args = ["generate", str(out), "--prompt", "The if statement", "--max-tokens", "20", "--seed", "1"]
    first = runner.invoke(app, [*args, "--json"])
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    assert data["tokens"] == 20 and data["prompt"] == "The if statement"
    assert json.loads(runner.invoke(app, [*args, "--json"]).stdout)["text"] == data["text"]  # seeded
    plain = runner.invoke(app, [*args, "--temperature", "0", "--top-k", "0"])
    assert plain.exit_code == 0 and plain.stdout.startswith("The if statement")


def test_generate_refuses_a_classifier(tmp_path):
    out = tmp_path / "digits"
    assert runner.invoke(app, ["train", "--set", "width=4", "--max-steps", "1", "--out", str(out)]).exit_code == 0
    result = runner.invoke(app, ["generate", str(out), "--prompt", "x"])
    assert result.exit_code == 2
    assert "generate needs a language model" in result.stderr
    result = runner.invoke(app, ["generate", str(tmp_path / "nope"), "--prompt", "x"])
    assert result.exit_code == 2 and "artifact not found" in result.stderr


def test_rich_progress_renders_on_a_terminal():
    import io

    from rich.console import Console

    from edgekit.cli.train import RichProgress

    buffer = io.StringIO()
    bar = RichProgress(Console(file=buffer, force_terminal=True, width=120))
    bar({"event": "start", "model": "m", "device": "cpu", "precision": "fp32", "world_size": 1, "strategy": "none",
         "total_steps": 4, "global_batch": 8, "parameters": 10, "resumed": False, "step": 0})
    bar({"event": "step", "step": 2, "total_steps": 4, "loss": 1.5, "lr": 1e-3, "throughput": 1000.0,
         "unit": "tokens", "eta_s": 3.0, "loss_scale": 1024.0})
    bar({"event": "warning", "message": "careful"})
    bar.close()
    text = buffer.getvalue()
    assert "loss 1.5000" in text and "tokens/s" in text and "warning: careful" in text
