"""Shared fixtures: a trained digits checkpoint and its quantized/exported artifacts, built once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CALIB_DIGITS = REPO / "calib_data" / "digits"

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
os.environ.setdefault("EDGEKIT_NO_PROGRESS", "1")


@pytest.fixture(scope="session")
def digits_checkpoint(tmp_path_factory) -> Path:
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    out = tmp_path_factory.mktemp("digits") / "checkpoint"
    train(TrainConfig(epochs=8, seed=0), out)
    return out


@pytest.fixture(scope="session")
def mobilenet_checkpoint(tmp_path_factory) -> Path:
    """The default pipeline model: big enough that int8 beats float by a wide margin (~0.4x p50), so
    whether --auto finds a candidate does not hang on a coin flip between two 0.02 ms timings."""
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    out = tmp_path_factory.mktemp("mobilenet") / "checkpoint"
    train(TrainConfig(model="digits-mobilenet", epochs=4, seed=0), out)
    return out


@pytest.fixture(scope="session")
def digits_static(digits_checkpoint, tmp_path_factory) -> Path:
    from edgekit.quantize.api import quantize

    out = tmp_path_factory.mktemp("digits-static") / "q"
    quantize(digits_checkpoint, "static", out, "rpi4", calib=CALIB_DIGITS)
    return out


@pytest.fixture(scope="session")
def digits_fp32_export(digits_checkpoint, tmp_path_factory) -> Path:
    from edgekit.export.api import export

    out = tmp_path_factory.mktemp("digits-export") / "fp32"
    export(digits_checkpoint, out, target="rpi4")
    return out


def one_line_error(result, code: int) -> str:
    """A CliRunner result that exited ``code`` with exactly one ``Error:`` line and no traceback."""
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


# ---- skips: counted by reason, and held to tests/skip_policy.py on CI -----------------------------

_SKIPS: dict[str, int] = {}


def pytest_runtest_logreport(report):
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        _SKIPS[reason] = _SKIPS.get(reason, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    from skip_policy import unexpected

    if not _SKIPS:
        return
    terminalreporter.section(f"skips by reason ({sum(_SKIPS.values())})")
    for reason, count in sorted(_SKIPS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count:4d}  {reason}")
    surprising = unexpected(_SKIPS)
    if surprising and os.environ.get("EDGEKIT_CI") == "1":
        terminalreporter.write_line(f"FAILED: {sum(surprising.values())} test(s) skipped for reasons CI does not "
                                    "expect (tests/skip_policy.py): install what they need in .ci/setup", red=True)


def pytest_sessionfinish(session, exitstatus):
    from skip_policy import unexpected

    if os.environ.get("EDGEKIT_CI") == "1" and unexpected(_SKIPS) and session.exitstatus == 0:
        session.exitstatus = 1


@pytest.fixture()
def small_disk(tmp_path):
    """A 600 KiB tmpfs (needs root and mount rights; skipped elsewhere)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
