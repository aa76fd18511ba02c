"""A bundle's host check: its model run here as a board would run it, the figures a board's run is held to."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from edgekit.bundle import layout
from edgekit.core.children import popen_kwargs
from edgekit.core.errors import EdgekitError
from edgekit.board.check import read_output

HOST_CHECK_TIMEOUT_S = 600.0


def python_check(work: Path, model_name: str, fmt: str) -> dict:
    """Run the board package's output check here, as a board would (the bundle's own check_outputs.py
    when it has one): the host's figures to compare with."""
    work = work.resolve()
    script = work / layout.CHECK_OUTPUTS
    command = [str(script)] if script.is_file() else ["-m", "edgekit.board.check"]
    argv = [sys.executable, "-P", *command, "--model", str(work / model_name), "--format", fmt,
            "--reference", str(work / layout.REFERENCE)]
    env = {**os.environ, "TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR")}
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=HOST_CHECK_TIMEOUT_S, env=env, check=False, **popen_kwargs())
    except subprocess.TimeoutExpired:
        raise EdgekitError(f"the output check of {model_name} did not finish within {HOST_CHECK_TIMEOUT_S:g} s") from None

    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    fail = [line for line in proc.stdout.splitlines() if line.startswith("FAIL: ")]
    if proc.returncode != 0:
        last = (fail[-1].removeprefix("FAIL: ") if fail else lines[-1].removeprefix("Error: ") if lines
                else f"exit status {proc.returncode}")
        raise EdgekitError(f"the bundled {model_name} fails its output check on this host: {last}")
    try:
        doc, _ = read_output(proc.stdout)
    except ValueError:  # json.JSONDecodeError included
        raise EdgekitError(f"the output check of {model_name} printed no JSON") from None
    return {key: doc[key] for key in ("machine", "runtime", "batches", "max_abs", "cosine", "top1_agreement",
                                      "outputs_sha256") if key in doc}
