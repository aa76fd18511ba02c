"""Outputs are guarded like inputs (issue 11): edgekit replaces only what it wrote, commits
multi-file results as a unit, leaves no process behind and says one line when the disk is full.

The single-command hostile cases live in the corpus (tests/test_hostile_inputs.py); these are
the ones that need state: a user's folder next to edgekit's, a kill at a chosen moment, two runs
at once, a full disk.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from corpus.hostile import assert_one_line_error, snapshot
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
REPO = Path(__file__).resolve().parent.parent


def _env(tmp_path) -> dict:
    return {**os.environ, "EDGEKIT_NO_PROGRESS": "1", "EDGEKIT_CACHE_DIR": str(tmp_path / "cache"),
            "TORCH_CPP_LOG_LEVEL": "ERROR", "OMP_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------------------------
# the README journey that used to delete dist/rpi4, dist/rpi4.tar.gz and notes.txt


def test_export_never_deletes_a_users_files_in_out(digits_static, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["export", str(digits_static), "--format", "onnx", "--out", "dist"]).exit_code == 0
    inside = runner.invoke(app, ["bundle", "dist", "--target", "rpi4", "--out", "dist/rpi4"])
    assert_one_line_error(inside, 2, "lies inside the input")  # a bundle never goes into its export
    assert runner.invoke(app, ["bundle", "dist", "--target", "rpi4", "--out", "bundles/rpi4"]).exit_code == 0
    (tmp_path / "dist" / "notes.txt").write_text("my thesis\n")
    before = snapshot(tmp_path)

    again = runner.invoke(app, ["export", str(digits_static), "--format", "onnx", "--out", "dist"])

    assert_one_line_error(again, 2, "dist holds notes.txt, which edgekit did not write")
    assert "--force" in again.stderr
    assert snapshot(tmp_path) == before  # nothing deleted, nothing changed, nothing added
    forced = runner.invoke(app, ["export", str(digits_static), "--format", "onnx", "--out", "dist", "--force"])
    assert forced.exit_code == 0, forced.stderr
    assert not (tmp_path / "dist" / "notes.txt").exists() and (tmp_path / "dist" / "model.onnx").is_file()
    assert (tmp_path / "bundles" / "rpi4" / "bundle.json").is_file()  # never touched


def test_an_artifact_edgekit_wrote_is_replaced_without_force(digits_checkpoint, tmp_path):
    out = tmp_path / "dist"
    assert runner.invoke(app, ["export", str(digits_checkpoint), "--format", "onnx", "--out", str(out)]).exit_code == 0
    first = (out / "manifest.json").read_text()
    time.sleep(1.1)  # a new "created" stamp
    result = runner.invoke(app, ["export", str(digits_checkpoint), "--format", "onnx,torchscript", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert (out / "manifest.json").read_text() != first and (out / "model.pt").is_file()


def test_quantize_into_its_own_kind_replaces_and_into_another_refuses(digits_checkpoint, digits_fp32_export, tmp_path):
    out = tmp_path / "q"
    args = ["quantize", str(digits_checkpoint), "--method", "dynamic", "--format", "onnx", "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    assert runner.invoke(app, args).exit_code == 0  # its own artifact: replaced
    before = snapshot(digits_fp32_export)
    other = runner.invoke(app, [*args[:-1], str(digits_fp32_export)])
    assert_one_line_error(other, 2, "holds an edgekit export artifact, not a quantized one")
    assert snapshot(digits_fp32_export) == before


def test_bundle_archive_of_someone_else_is_not_replaced(digits_fp32_export, tmp_path):
    out = tmp_path / "rpi4"
    (tmp_path / "rpi4.tar.gz").write_bytes(b"my own archive")
    result = runner.invoke(app, ["bundle", str(digits_fp32_export), "--target", "rpi4", "--out", str(out)])
    assert_one_line_error(result, 2, "is not an edgekit bundle archive")
    assert (tmp_path / "rpi4.tar.gz").read_bytes() == b"my own archive" and not out.exists()


def test_report_paths_never_land_on_or_in_inputs(digits_fp32_export, tmp_path):
    model = digits_fp32_export / "model.onnx"
    before = snapshot(digits_fp32_export)
    for target in (model, digits_fp32_export / "bench.json", digits_fp32_export / "manifest.json"):
        result = runner.invoke(app, ["bench", str(model), "--min-runs", "1", "--min-time", "0", "--json", str(target)])
        assert_one_line_error(result, 2)
    assert snapshot(digits_fp32_export) == before


# ---------------------------------------------------------------------------------------------
# commits as a unit, proven with a kill at the worst moment

_KILL_AT = textwrap.dedent("""
    import os, signal, sys
    import edgekit.core.fileio as fileio
    moment = sys.argv[1]
    real_swap = fileio.swap_in_dir
    real_replace = os.replace

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def swap(new, final, then=None):
        if moment == "before-folder":
            die()
        def after():
            if moment == "before-archive":
                die()
            (then or (lambda: None))()
            if moment == "after-archive":
                die()
        real_swap(new, final, after)

    fileio.swap_in_dir = swap
    from edgekit.cli.app import main
    sys.argv = ["edgekit", *sys.argv[2:]]
    main()
""")


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["before-folder", "before-archive", "after-archive"])
def test_bundle_killed_between_its_commits_never_mismatches(moment, digits_static, tmp_path):
    from test_interrupt import _assert_bundle_intact

    from edgekit.export.api import export

    exported = tmp_path / "int8"
    export(digits_static, exported, formats=("onnx",), target="rpi4")
    out = tmp_path / "dist" / "rpi4"
    args = ["bundle", str(exported), "--target", "rpi4", "--out", str(out)]
    env = _env(tmp_path)
    first = subprocess.run([sys.executable, "-m", "edgekit", *args], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    old_sums = (out / "SHA256SUMS").read_bytes()
    # a second build differs (another created stamp), so old and new can be told apart
    args += ["--target", str(REPO / "targets" / "rpi4.toml")]
    proc = subprocess.run([sys.executable, "-c", _KILL_AT, moment, *args], env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    _assert_bundle_intact(out, archive_required=False)  # never an archive of another build beside the folder
    archive = out.parent / "rpi4.tar.gz"
    if moment == "before-folder":
        assert (out / "SHA256SUMS").read_bytes() == old_sums and not archive.exists()
    elif moment == "before-archive":
        assert not archive.exists()  # the new folder, its archive still to come: rerun makes it
    else:
        assert archive.exists()
    rerun = subprocess.run([sys.executable, "-m", "edgekit", *args], env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    _assert_bundle_intact(out)
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(".")]  # temporaries are gone


# ---------------------------------------------------------------------------------------------
# no process outlives edgekit


def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
def test_kill_9_during_a_local_bench_leaves_no_runner(digits_fp32_export, tmp_path):
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-m", "edgekit", "bench", str(digits_fp32_export / "model.onnx"), "--min-time", "60",
         "--min-runs", "1", "--quiet"],
        env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    runners = []
    while time.monotonic() < deadline and not runners:
        runners = [p for p in _descendants(proc.pid) if "runner" in " ".join(p.cmdline())]
        time.sleep(0.1)
    assert runners, "the benchmark runner never started"
    os.kill(proc.pid, signal.SIGKILL)  # no clean-up code of edgekit's runs now
    proc.wait()
    gone, alive = psutil.wait_procs(runners, timeout=1.0)
    alive = [p for p in alive if _running(p)]  # a zombie has exited (only its parent's wait() is missing)
    assert not alive, f"runner(s) outlived edgekit: {[p.pid for p in alive]}"


def _running(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---------------------------------------------------------------------------------------------
# two runs into one folder


@pytest.mark.slow
def test_concurrent_training_into_one_finished_folder_never_crashes(tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "edgekit", "train", "--set", "width=4", "--max-steps", "30", "--threads", "1",
            "--out", str(out)]
    env = _env(tmp_path)
    first = subprocess.run(args, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    for code, stderr in results:
        assert "internal error" not in stderr and "Traceback" not in stderr, stderr
        assert code == 0 or (code == 1 and "another edgekit run" in stderr), (code, stderr)
    assert any(code == 0 for code, _ in results)
    from edgekit.formats.artifacts import load_manifest

    load_manifest(out)  # whole and verified


# ---------------------------------------------------------------------------------------------
# a full disk: one line, exit 1, nothing partial


def test_disk_full_during_bundle_is_one_line_and_leaves_nothing(digits_fp32_export, small_disk):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (440 << 10))  # leaves less than one bundle's worth
    before = snapshot(small_disk)
    result = runner.invoke(app, ["bundle", str(digits_fp32_export), "--target", "rpi4", "--out", str(small_disk / "rpi4")])
    assert_one_line_error(result, 1, "No space left on device")
    assert snapshot(small_disk) == before


def test_disk_full_during_training_is_one_line_and_leaves_nothing(small_disk):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (560 << 10))
    before = snapshot(small_disk)
    out = small_disk / "run"
    result = runner.invoke(app, ["train", "--set", "width=64", "--max-steps", "2", "--threads", "1", "--out", str(out)])
    assert_one_line_error(result, 1, "No space left on device")
    assert {k: v for k, v in snapshot(small_disk).items() if not k.startswith("run")} == before
    # not an artifact, and nothing half-written: what a resumed run needs is whole or absent
    assert not (out / "manifest.json").exists() and not (out / "checkpoint.pt").exists()
    assert not [p for p in small_disk.rglob(".*") if p.name.endswith(".tmp")]
    if (out / "last.pt").exists():
        from edgekit.train.checkpoint import load_train_state

        load_train_state(out / "last.pt")
