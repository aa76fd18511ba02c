"""``edgekit generate`` runs on the thread count ``edgekit bench`` would use, and takes ``--threads``.

A token is one small forward pass: torch's default of every core spin-waits between them (a
transformer-lm on this 2-core machine: 12-14 tokens/s on both cores, 456 on one). The rule is
``edgekit.core.threads.resolve_threads``: explicit wins, else the artifact's target's count, else all
cores, never every core of this host.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
TINY = {"d_model": 16, "n_heads": 2, "n_layers": 1, "max_len": 16}


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """(checkpoint, TorchScript export for rpi4) of a briefly trained tiny transformer-lm."""
    from edgekit.export.api import export
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    root = tmp_path_factory.mktemp("lm-threads")
    ckpt, _ = train(TrainConfig(model="transformer-lm", model_config=TINY, max_steps=5, batch_size=8, seq_len=16,
                                seed=0), root / "ckpt")
    exported, _ = export(ckpt, root / "ts", formats=("torchscript",), target="rpi4")
    return ckpt, exported


def generate(*args: str) -> dict:
    """``edgekit generate ... --json`` in a fresh process (torch's thread setting is per process)."""
    done = subprocess.run([sys.executable, "-m", "edgekit", "generate", *args, "--json", "-p", "def ",
                           "--max-tokens", "8", "--temperature", "0"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_generate_follows_the_bench_rule_and_takes_threads(lm):
    from edgekit.core.targets import load_target
    from edgekit.core.threads import resolve_threads

    ckpt, exported = lm
    no_target, _ = resolve_threads(None, None)
    rpi4, _ = resolve_threads(None, load_target("rpi4"))
    for artifact, fmt, expected in ((ckpt, "checkpoint", no_target), (exported, "torchscript", rpi4)):
        result = generate(str(artifact), "--format", fmt)
        assert result["threads"] == expected, (fmt, result)
        assert result["tokens"] == 8 and result["tokens_per_s"] > 0
        explicit = generate(str(artifact), "--format", fmt, "--threads", "1")
        assert explicit["threads"] == 1 and explicit["text"] == result["text"]  # same greedy text on any count


def test_the_library_really_runs_torch_on_that_many_threads(lm):
    ckpt, _ = lm
    code = ("import sys, torch\n"
            "from edgekit.llm.generation import generate_text\n"
            "before = torch.get_num_threads()\n"
            "r = generate_text(sys.argv[1], 'def ', 4, 0.0, 0, 0, 'cpu', 'checkpoint', 1)\n"
            "print(before, torch.get_num_threads(), r.threads)\n")
    done = subprocess.run([sys.executable, "-c", code, str(ckpt)], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})  # no OMP_NUM_THREADS: torch's own default
    assert done.returncode == 0, done.stderr
    before, after, reported = map(int, done.stdout.split())
    assert before >= 1 and (after, reported) == (1, 1)  # torch's own default before, the asked count after


def test_the_rule_is_one_function_for_bench_and_generate():
    import edgekit.bench.api
    import edgekit.core.threads

    assert edgekit.bench.api.resolve_threads is edgekit.core.threads.resolve_threads


def test_bad_threads_is_one_line(lm):
    ckpt, _ = lm
    for value in ("0", "-2", "100000"):
        result = runner.invoke(app, ["generate", str(ckpt), "-p", "def ", "--threads", value])
        assert result.exit_code == 2, (value, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: --threads must be an integer between 1 and"), lines
