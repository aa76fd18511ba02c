"""``edgekit bench BUNDLE --emulate`` on an ncnn Python bundle: the bundle's own ncnn wheel counted on
the board's core in the cached arm64 rootfs (``edgekit.emulate.icount_python``).

The count is slow-marked and downloads nothing: it runs on the rootfs and the ncnn venv that
``bash benchmarks/emulated_verify.sh`` caches (.ci/run calls it first), with the counting plugin.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import one_line_error
from edgekit.cli.app import app

pytest.importorskip("ncnn")
pytest.importorskip("pnnx")

runner = CliRunner()
PREPARE = "run `bash benchmarks/emulated_verify.sh` first (.ci/run does); this test downloads nothing"


@pytest.fixture(scope="session")  # before the session fixtures that train models
def counting_ready() -> None:
    from edgekit.emulate.rootfs import default_cache_dir, find_rootfs

    if os.geteuid() != 0:
        pytest.skip("counting a Python bundle under emulation needs root (the rootfs's sandbox)")
    missing = [tool for tool in ("qemu-aarch64", "unshare") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed; apt-get install qemu-user")
    if find_rootfs(default_cache_dir(), "bookworm") is None:
        pytest.skip(f"no cached bookworm arm64 rootfs in {default_cache_dir()}; {PREPARE}")


def _bundle(checkpoint: Path, base: Path) -> Path:
    for args in (["export", checkpoint, "--format", "ncnn", "--out", base / "dist"],
                 ["bundle", base / "dist", "--target", "rpi4", "--out", base / "bundle"]):
        result = runner.invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, result.output
    return base / "bundle"


def _ncnn_bundle(checkpoint: Path, base: Path) -> Path:
    from edgekit import formats
    from edgekit.emulate.rootfs import default_cache_dir, find_rootfs
    from edgekit.emulate.venv import MARKER, VENVS_DIR, requirements_key

    bundle = _bundle(checkpoint, base)
    fs = find_rootfs(default_cache_dir(), "bookworm")
    key = requirements_key((bundle / "requirements.txt").read_text(encoding="utf-8"), [], fs.python,
                           formats.get("ncnn").board.no_deps)
    if not (fs.path / VENVS_DIR.lstrip("/") / key / MARKER).is_file():
        pytest.skip(f"no cached venv for the ncnn bundle's requirements in {fs.path}; {PREPARE}")
    return bundle


def _count(bundle: Path, out: Path) -> dict:
    result = runner.invoke(app, ["bench", str(bundle), "--emulate", "--emulate-runs", "3", "--json", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["results"][0]


@pytest.mark.slow
def test_an_ncnn_bundle_counts_the_same_twice_and_a_bigger_model_more(counting_ready, digits_checkpoint,
                                                                      mobilenet_checkpoint, tmp_path):
    small = _ncnn_bundle(digits_checkpoint, tmp_path / "small")
    first, second = _count(small, tmp_path / "a.json"), _count(small, tmp_path / "b.json")
    counts = first["emulated"]["instructions"]
    assert first["emulated"]["cpu"] == "cortex-a72" and first["mode"] == "emulated"
    assert counts["per_run"] > 0
    # counting between the marks is deterministic: the same per-run count and mix, to the instruction
    assert counts["per_run"] == second["emulated"]["instructions"]["per_run"]
    assert counts["classes"] == second["emulated"]["instructions"]["classes"]
    assert sum(counts["classes"].values()) == pytest.approx(counts["per_run"], abs=len(counts["classes"]))
    assert any("Python's per-call work" in note for note in first["notes"])
    assert first["runtime"]["name"] == "ncnn"

    bigger = _count(_ncnn_bundle(mobilenet_checkpoint, tmp_path / "bigger"), tmp_path / "c.json")
    # digits-mobilenet is the larger network (522 k parameters, convolutions at 28x28): measured 11.7x
    assert bigger["emulated"]["instructions"]["per_run"] > 3 * counts["per_run"]


def test_a_python_bundle_counted_on_more_threads_is_one_error_line(digits_checkpoint, tmp_path):
    bundle = _bundle(digits_checkpoint, tmp_path)
    result = runner.invoke(app, ["bench", str(bundle), "--emulate", "--threads", "2"])
    assert one_line_error(result, 2) == (f"Error: {bundle} is a Python bundle of a ncnn model; it is counted on "
                                             "one thread (drop --threads)")
