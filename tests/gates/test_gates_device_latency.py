"""Gates that say what they measured: a device target's latency budgets hold runs on the device.

A result benchmarked on this x86 host is not held to rpi4's p99 budget (20 ms): the check is
reported as skipped, with the measured value and the reason, and the verdict does not depend on
how loaded the CI machine was. Size and memory budgets still apply; latency budgets the user gives
(``--max-p99-ms``, the project file) apply where asked; ``--local-latency`` applies the target's
too; a remote run on the board is held to them; emulated runs never are.
"""

from __future__ import annotations

import dataclasses
import json
import platform

import pytest
from typer.testing import CliRunner

from bench_results import make_result
from edgekit.records.result import to_document
from edgekit.cli.app import app
from edgekit.gates.results import FAIL, PASS, SKIP

runner = CliRunner()
PI4 = {"machine": "aarch64", "board": "Raspberry Pi 4 Model B Rev 1.4", "cpu_model": None}
X86 = {"machine": "x86_64", "cpu_model": "AMD EPYC 7B13 64-Core Processor"}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no edgekit.toml discovered by accident
    return tmp_path


def write(path, *results):
    path.write_text(json.dumps(to_document(list(results))))
    return str(path)


def result(host, mode="local", **figures):
    return dataclasses.replace(make_result(**{"size_mb": 1.0, **figures}), host=host, mode=mode)


def gate_json(workdir, bench, *args):
    out = workdir / "gate.json"
    if out.exists():
        out.unlink()
    done = runner.invoke(app, ["gate", bench, "--json", str(out), *map(str, args)])
    doc = json.loads(out.read_text())
    return done, {c["metric"]: c for c in doc["checks"]}, doc


def test_a_real_local_bench_on_this_host_is_not_held_to_the_pi_latency(digits_fp32_export, workdir):
    if platform.machine() == "aarch64":
        pytest.skip("this host is an aarch64 machine: its local runs may be the board's")
    bench = workdir / "bench.json"
    done = runner.invoke(app, ["bench", str(digits_fp32_export / "model.onnx"), "--target", "rpi4",
                               "--min-runs", "20", "--min-time", "0.05", "--json", str(bench)])
    assert done.exit_code == 0, done.output
    measured = json.loads(bench.read_text())["results"][0]
    # the budget the run is measured against: rpi4's 20 ms; wherever the p99 falls, the verdict is the same
    for p99_budget in ("0.001", "1000"):
        assert measured["host"]["machine"] == platform.machine()
        done, checks, doc = gate_json(workdir, str(bench), "--target", "rpi4", "--max-size-mb", "4",
                                      "--max-peak-rss-mb", "2048")
        assert done.exit_code == 0, done.output
        p99 = checks["p99"]
        assert p99["status"] == SKIP and p99["source"] == "target rpi4" and p99["limit"] == 20.0
        assert p99["measured"] == pytest.approx(measured["timing"]["p99"])  # what was measured is still said
        assert f"measured on {platform.machine()}" in p99["message"] and "not on rpi4" in p99["message"]
        assert "--local-latency" in p99["message"] and p99["detail"] == "not measured on rpi4"
        assert checks["size"]["status"] == PASS and checks["peak_rss"]["status"] == PASS
        assert doc["verdict"].startswith("gate passed") and "1 skipped" in doc["verdict"]
        assert any("--local-latency" in note for note in doc["notes"])
        # the user's own latency budget applies here: it is theirs to set for this machine
        done, checks, _ = gate_json(workdir, str(bench), "--target", "rpi4", "--max-p99-ms", p99_budget)
        assert checks["p99"]["source"] == "flag"
        assert checks["p99"]["status"] == (FAIL if p99_budget == "0.001" else PASS)
        assert done.exit_code == (3 if p99_budget == "0.001" else 0)


def test_the_terminal_says_why_and_the_way_out(workdir):
    bench = write(workdir / "bench.json", result(X86, p99=19.6))
    done = runner.invoke(app, ["gate", bench, "--target", "rpi4"])
    assert done.exit_code == 0, done.output
    assert "gate passed: 3 of 4 checks passed, 1 skipped for 1 model" in done.stdout
    assert "19.60 ms" in done.stdout and "not measured on rpi4" in " ".join(done.stdout.split())
    assert "note: the latency budgets of target rpi4 were not applied to 1 result (int8) measured on x86_64" in \
        " ".join(done.stderr.split())
    assert "Error" not in done.stderr and "Traceback" not in done.stderr


def test_local_latency_opts_in(workdir):
    bench = write(workdir / "bench.json", result(X86, p99=25.0))
    done, checks, _ = gate_json(workdir, bench, "--target", "rpi4", "--local-latency")
    assert done.exit_code == 3 and checks["p99"]["status"] == FAIL
    assert "gate failed: 1 of 4 checks failed for 1 model (int8: p99 latency 25.00 ms > 20.00 ms)" in done.stdout


def test_a_remote_run_on_the_board_is_held_to_the_target_latency(workdir):
    bench = write(workdir / "bench.json", result(PI4, mode="remote", p99=25.0))
    done, checks, _ = gate_json(workdir, bench, "--target", "rpi4")
    assert done.exit_code == 3 and checks["p99"]["status"] == FAIL and checks["p99"]["measured"] == 25.0
    ok = write(workdir / "ok.json", result(PI4, mode="remote", p99=15.0))
    done, checks, _ = gate_json(workdir, ok, "--target", "rpi4")
    assert done.exit_code == 0 and checks["p99"]["status"] == PASS


def test_a_local_run_on_a_matching_board_counts_and_another_core_does_not(workdir):
    on_pi = write(workdir / "pi.json", result({"machine": "aarch64", "board": "Raspberry Pi 4 Model B"}, p99=25.0))
    done, checks, _ = gate_json(workdir, on_pi, "--target", "rpi4")
    assert done.exit_code == 3 and checks["p99"]["status"] == FAIL
    a53 = write(workdir / "a53.json", result({"machine": "aarch64", "cpu_model": "ARM Cortex-A53"}, p99=25.0))
    done, checks, _ = gate_json(workdir, a53, "--target", "rpi4")
    assert done.exit_code == 0 and checks["p99"]["status"] == SKIP
    assert "aarch64 (ARM Cortex-A53), not on rpi4 (aarch64, Cortex-A72)" in checks["p99"]["message"]
    # remote to a machine of another arch (an x86 box reached with --host) is not the board either
    remote_x86 = write(workdir / "rx.json", result(X86, mode="remote", p99=25.0))
    assert gate_json(workdir, remote_x86, "--target", "rpi4")[1]["p99"]["status"] == SKIP


def test_the_x86_target_holds_runs_on_this_kind_of_host(workdir):
    bench = write(workdir / "bench.json", result(X86, p99=12.0))
    done, checks, _ = gate_json(workdir, bench, "--target", "x86-64")
    assert done.exit_code == 3 and checks["p99"]["status"] == FAIL  # x86-64's 10 ms: a generic x86-64 core


def test_emulated_runs_are_never_latency_even_with_flags(workdir):
    emulated = result({**PI4, "emulated": True}, mode="emulated", p99=900.0, p50=800.0)
    bench = write(workdir / "bench.json", emulated)
    done, checks, doc = gate_json(workdir, bench, "--target", "rpi4", "--max-p50-ms", "1", "--local-latency",
                                  "--baseline", write(workdir / "base.json", emulated), "--max-regression", "5%")
    assert done.exit_code == 0, done.output
    assert checks["p50"]["status"] == checks["p99"]["status"] == checks["p50_regression"]["status"] == SKIP
    assert "emulation" in checks["p99"]["message"] and checks["p99"]["detail"] == "emulated: not latency"
    assert checks["size"]["status"] == PASS  # size still applies
    assert any("under emulation" in note for note in doc["notes"])


def test_project_file_latency_budgets_are_the_users_own(workdir):
    (workdir / "edgekit.toml").write_text('[budgets]\nmax_p99_ms = "5ms"\n')
    bench = write(workdir / "bench.json", result(X86, p99=12.0))
    done, checks, _ = gate_json(workdir, bench, "--target", "rpi4")
    assert done.exit_code == 3 and checks["p99"]["status"] == FAIL and checks["p99"]["source"] == "edgekit.toml"


def test_python_api_takes_local_latency():
    from edgekit.api import gate

    off_board = result(X86, p99=25.0)
    assert gate([off_board], "rpi4").passed
    assert not gate([off_board], "rpi4", local_latency=True).passed
