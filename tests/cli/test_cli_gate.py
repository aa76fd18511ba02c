"""``edgekit gate`` through CliRunner: exit codes 0/3/2/1, one-line errors, reports written on failure."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from edgekit.records.result import BenchResult, Memory, ModelInfo, Timing, to_document
from edgekit.cli.app import app

runner = CliRunner()


def make_result(variant="int8", size_mb=4.2, p50=10.0, p99=15.0, std=0.5, runs=200, target="rpi4", accuracy=0.912):
    return BenchResult(
        model=ModelInfo(f"out/{variant}/model.onnx", "onnx", round(size_mb * 1024 * 1024), variant=variant,
                        accuracy=accuracy, float_accuracy=0.92),
        runtime={"name": "onnxruntime"},
        input_shapes={"input": [1, 8]},
        settings={},
        timing=Timing(1.0, 2.0, p50, p50 + 1.2816 * std, p50 + 1.7 * std, p99, p50, std, p50 - 1, p99 + 1, runs, 1.0),
        throughput_per_s=100.0,
        memory=Memory(300.0, 100.0, 50.0),
        host={"machine": "aarch64", "board": "Raspberry Pi 4 Model B Rev 1.4"},  # measured on the board: the
        mode="remote",                                                          # target's latency budgets apply
        target=target,
    )


def write_bench(path, *results):
    path.write_text(json.dumps(to_document(list(results))))
    return str(path)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty current folder, so no edgekit.toml / pyproject.toml is discovered by accident."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def gate(*args):
    return runner.invoke(app, ["gate", *map(str, args)])


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def test_passing_gate_exits_0(workdir):
    bench = write_bench(workdir / "bench.json", make_result(size_mb=3.0))
    result = gate(bench, "--target", "rpi4")
    assert result.exit_code == 0, result.output
    assert "gate passed: 4 of 4 checks passed for 1 model" in result.stdout
    assert "target rpi4" in result.stdout
    assert result.stderr == ""


def test_failing_gate_exits_3_and_still_writes_reports(workdir):
    bench = write_bench(workdir / "bench.json", make_result(size_mb=4.2))
    out = workdir / "reports"
    result = gate(bench, "--target", "rpi4", "--junit", out / "gate.xml", "--markdown", out / "gate.md",
                  "--json", out / "gate.json")
    assert result.exit_code == 3, result.output
    assert result.stderr == ""  # a broken budget is a verdict, said once on stdout, not an "Error:"
    assert result.stdout.count("gate failed") == 1
    assert "gate failed: 1 of 4 checks failed for 1 model (int8: size 4.20 MB > 4.00 MB)" in result.stdout
    assert "FAIL" in result.stdout
    root = ET.parse(out / "gate.xml").getroot()
    assert (root.get("tests"), root.get("failures")) == ("4", "1")
    assert "| int8 | size | 4.20 MB | ≤ 4.00 MB | target rpi4 | **❌ FAIL** |" in (out / "gate.md").read_text()
    doc = json.loads((out / "gate.json").read_text())
    assert doc["schema"] == "edgekit.gate" and doc["schema_version"] == 1 and doc["passed"] is False
    assert doc["inputs"] == [bench]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left behind


def test_flag_overrides_target_with_units(workdir):
    bench = write_bench(workdir / "bench.json", make_result(size_mb=4.2, p99=15.0))
    result = gate(bench, "--target", "rpi4", "--max-size-mb", "5MB", "--max-p99-ms", "0.012s", "--json", "g.json")
    assert result.exit_code == 3  # p99 15 ms > 12 ms
    checks = {c["metric"]: c for c in json.loads((workdir / "g.json").read_text())["checks"]}
    assert (checks["size"]["status"], checks["size"]["source"], checks["size"]["limit"]) == ("pass", "flag", 5.0)
    assert (checks["p99"]["status"], checks["p99"]["limit"]) == ("fail", 12.0)
    assert checks["peak_rss"]["source"] == "target rpi4"


def test_flags_alone_are_enough(workdir):
    bench = write_bench(workdir / "bench.json", make_result(size_mb=0.4))
    assert gate(bench, "--max-size-mb", "512KiB").exit_code == 0
    assert gate(bench, "--max-size-mb", "256KiB").exit_code == 3


def test_project_file_in_current_folder_and_config_flag(workdir):
    bench = write_bench(workdir / "bench.json", make_result(size_mb=4.2))
    (workdir / "edgekit.toml").write_text('[budgets]\nmax_size_mb = "4.5MB"\n')
    result = gate(bench, "--target", "rpi4", "--json", "g.json")
    assert result.exit_code == 0, result.output
    size = next(c for c in json.loads((workdir / "g.json").read_text())["checks"] if c["metric"] == "size")
    assert size["source"] == "edgekit.toml"
    other = workdir / "strict.toml"
    other.write_text("[budgets.int8]\nmax_size_mb = 4\n")
    assert gate(bench, "--config", other).exit_code == 3


def test_multiple_result_files(workdir):
    a = write_bench(workdir / "a.json", make_result("int8", size_mb=1.0))
    b = write_bench(workdir / "b.json", make_result("fp32", size_mb=9.0))
    result = gate(a, b, "--max-size-mb", "4", "--junit", "j.xml")
    assert result.exit_code == 3
    names = [s.get("name") for s in ET.parse(workdir / "j.xml").getroot().findall("testsuite")]
    assert names == ["int8", "fp32"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--max-size-mb", "4XB"], "--max-size-mb: unknown unit 'XB' in '4XB'; units: B, KB, KiB, MB, MiB, GB, GiB"),
        (["--max-p99-ms", "-3"], "--max-p99-ms: '-3' is negative"),
        (["--max-p50-ms", "nan"], "--max-p50-ms: cannot read 'nan'"),
        (["--max-accuracy-drop", "1 percent"], "unknown unit 'percent'"),
        (["--target", "rpi99"], "unknown target 'rpi99'"),
        (["--config", "missing.toml"], "budget config file not found"),
        (["--max-size-mb", "4", "--max-regression", "10%"], "--baseline and --max-regression go together"),
    ],
)
def test_usage_errors_exit_2_with_one_line(workdir, args, fragment):
    bench = write_bench(workdir / "bench.json", make_result())
    result = gate(bench, *args)
    assert result.exit_code == 2, result.output
    assert fragment in one_error_line(result)


def test_no_budget_at_all_says_how_to_give_one(workdir):
    bench = write_bench(workdir / "bench.json", make_result(target="rpi4"))
    result = gate(bench)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "no budgets to check" in line and "--target" in line and "--config" in line and "--max-size-mb" in line
    assert "measured for --target rpi4" in line


def test_unknown_key_in_config_lists_allowed(workdir):
    bench = write_bench(workdir / "bench.json", make_result())
    (workdir / "edgekit.toml").write_text("[budgets]\nmax_latency_ms = 3\n")
    result = gate(bench)
    assert result.exit_code == 2
    assert "max_size_mb, max_p50_ms, max_p99_ms, max_peak_rss_mb, max_accuracy_drop" in one_error_line(result)


def test_truncated_json_exits_2(workdir):
    text = json.dumps(to_document([make_result()]))
    (workdir / "bench.json").write_text(text[: len(text) // 2])
    result = gate(workdir / "bench.json", "--max-size-mb", "4")
    assert result.exit_code == 2
    assert "is not valid JSON" in one_error_line(result)


def test_other_schema_version_exits_2(workdir):
    doc = to_document([make_result()])
    doc["schema_version"] = 99
    (workdir / "bench.json").write_text(json.dumps(doc))
    result = gate(workdir / "bench.json", "--max-size-mb", "4")
    assert result.exit_code == 2
    assert "bench schema version 99" in one_error_line(result)


def test_missing_result_file_exits_2(workdir):
    result = gate(workdir / "nope.json", "--max-size-mb", "4")
    assert result.exit_code == 2
    assert "not found" in one_error_line(result)


def test_report_path_that_would_overwrite_an_input_is_refused(workdir):
    bench = write_bench(workdir / "bench.json", make_result())
    result = gate(bench, "--max-size-mb", "4", "--json", bench)
    assert result.exit_code == 2
    assert "would overwrite an input" in one_error_line(result)
    assert json.loads((workdir / "bench.json").read_text())["schema"] == "edgekit.bench"


def test_unwritable_report_path_is_a_tool_error(workdir):
    bench = write_bench(workdir / "bench.json", make_result(size_mb=1.0))
    (workdir / "file").write_text("x")
    result = gate(bench, "--max-size-mb", "4", "--junit", workdir / "file" / "gate.xml")
    assert result.exit_code == 1
    assert "cannot create output folder" in one_error_line(result)


def test_regression_gate(workdir):
    base = write_bench(workdir / "main.json", make_result(p50=10.0, std=0.2, runs=1000))
    slow = write_bench(workdir / "pr.json", make_result(p50=12.0, std=0.2, runs=1000))
    noisy = write_bench(workdir / "noisy.json", make_result(p50=11.5, std=3.0, runs=10))
    result = gate(slow, "--baseline", base, "--max-regression", "10%", "--json", "g.json")
    assert result.exit_code == 3, result.output
    check = json.loads((workdir / "g.json").read_text())["checks"][0]
    assert (check["metric"], check["status"], check["source"]) == ("p50_regression", "fail", "baseline main.json")
    assert check["measured"] == pytest.approx(20.0)
    within = gate(noisy, "--baseline", base, "--max-regression", "0.10", "--json", "w.json")
    assert within.exit_code == 0, within.output
    check = json.loads((workdir / "w.json").read_text())["checks"][0]
    assert (check["status"], check["detail"]) == ("pass", "within noise")
    bad = gate(slow, "--baseline", base, "--max-regression", "10")
    assert bad.exit_code == 2 and "ambiguous" in one_error_line(bad)


def test_gate_imports_nothing_heavy():
    code = (
        "import sys, edgekit.gates, edgekit.cli.gate; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'onnxruntime', 'onnx', 'numpy')); "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
