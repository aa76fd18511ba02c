"""Reports: JUnit XML parses back with the right counts, Markdown rows, versioned JSON, terminal rows."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

from hypothesis import given, settings
from hypothesis import strategies as st

from edgekit.records.result import BenchResult, Memory, ModelInfo, Timing
from edgekit.gates.budgets import Budget
from edgekit.gates.evaluate import evaluate
from edgekit.gates.report import (
    COLUMNS,
    GATE_SCHEMA,
    GATE_SCHEMA_VERSION,
    table_rows,
    to_json,
    to_junit_xml,
    to_markdown,
    verdict,
)


def make_result(variant="int8", size_mb=4.2, p99=15.0, accuracy=0.912, float_accuracy=0.92, path=None) -> BenchResult:
    return BenchResult(
        model=ModelInfo(path or f"out/{variant}/model.onnx", "onnx", round(size_mb * 1024 * 1024), variant=variant,
                        accuracy=accuracy, float_accuracy=float_accuracy),
        runtime={"name": "onnxruntime"},
        input_shapes={"input": [1, 8]},
        settings={},
        timing=Timing(1.0, 2.0, 10.0, 11.0, 12.0, p99, 10.0, 0.5, 9.0, 20.0, 100, 1.0),
        throughput_per_s=100.0,
        memory=Memory(300.0, 100.0, 50.0),
        host={},
        target="rpi4",
    )


BUDGETS = [
    Budget("size", 4.0, "MB", "target rpi4", "target"),
    Budget("p99", 20.0, "ms", "flag"),
    Budget("accuracy_drop", 1.0, "pt", "edgekit.toml", "file"),
]


def sample_report():
    # int8: size fails, p99 passes, accuracy passes; fp32: size passes, p99 fails, accuracy skipped
    return evaluate(
        [make_result("int8", size_mb=4.2), make_result("fp32", size_mb=3.0, p99=25.0, accuracy=None)], BUDGETS
    )


def test_junit_parses_back_with_the_right_counts():
    root = ET.fromstring(to_junit_xml(sample_report()).encode("utf-8"))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == ("6", "2", "1", "0")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["int8", "fp32"]
    int8, fp32 = suites
    assert (int8.get("tests"), int8.get("failures"), int8.get("skipped")) == ("3", "1", "0")
    assert (fp32.get("tests"), fp32.get("failures"), fp32.get("skipped")) == ("3", "1", "1")
    assert [c.get("name") for c in int8.findall("testcase")] == ["size", "p99 latency", "accuracy drop"]
    failure = int8.find("testcase[@name='size']/failure")
    assert failure is not None and failure.get("message").startswith("size 4.20 MB > 4.00 MB")
    assert "target rpi4" in failure.text
    skipped = fp32.find("testcase[@name='accuracy drop']/skipped")
    assert skipped is not None and "no accuracy recorded" in skipped.get("message")
    assert len(root.findall(".//failure")) == 2 and len(root.findall(".//skipped")) == 1
    props = {p.get("name"): p.get("value") for p in int8.iter("property")}
    assert props["path"] == "out/int8/model.onnx" and props["target"] == "rpi4"


def test_junit_escapes_hostile_names():
    name = 'a<b>&"c\'\x01\x1b]d\ud800'
    report = evaluate([make_result(name)], BUDGETS)
    root = ET.fromstring(to_junit_xml(report).encode("utf-8"))
    assert root.find("testsuite").get("name") == 'a<b>&"c\'\ufffd\ufffd]d\ufffd'


@settings(max_examples=50, deadline=None)
@given(variant=st.text(max_size=30), path=st.text(max_size=30))
def test_junit_and_markdown_always_well_formed(variant, path):
    report = evaluate([make_result(variant, path=path or "m.onnx")], BUDGETS)
    root = ET.fromstring(to_junit_xml(report).encode("utf-8"))
    assert root.get("tests") == "3"
    md = to_markdown(report)
    rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + 3  # header + one per check
    for row in rows:
        # an unescaped pipe in a cell would add a column
        assert row.replace("\\|", "").count("|") == len(COLUMNS) + 1


def test_markdown_contains_the_failing_row_and_verdict():
    md = to_markdown(sample_report())
    assert md.startswith("## ❌ edgekit gate: failed")
    assert "| int8 | size | 4.20 MB | ≤ 4.00 MB | target rpi4 | **❌ FAIL** |" in md
    assert "| int8 | p99 latency | 15.00 ms | ≤ 20.00 ms | flag | ✅ pass |" in md
    assert "| fp32 | accuracy drop | — | ≤ 1.00 pt | edgekit.toml | ⚪ skipped (no accuracy recorded) |" in md
    assert "**Failures**" in md and "- fp32: p99 latency 25.00 ms &gt; 20.00 ms" in md
    passing = to_markdown(evaluate([make_result()], [Budget("size", 5.0, "MB", "flag")]))
    assert passing.startswith("## ✅ edgekit gate: passed") and "Failures" not in passing


def test_markdown_escapes_pipes():
    md = to_markdown(evaluate([make_result("a|b")], BUDGETS))
    assert "| a\\|b | size |" in md


def test_markdown_escapes_terminal_control_sequences():
    """A model name from a bench file carrying ESC/OSC sequences reaches a CI summary as text."""
    md = to_markdown(evaluate([make_result("evil\x1b]0;pwned\x07\x1b[31m")], BUDGETS))
    assert "\x1b" not in md and "\x07" not in md
    assert "evil\\\\x1b]0;pwned" in md  # shown escaped (and its backslash escaped for Markdown)


def test_json_is_versioned_and_strict():
    report = evaluate([make_result(p99=math.nan)], BUDGETS)
    doc = to_json(report, inputs=["bench.json"], baseline=None)
    text = json.dumps(doc, allow_nan=False)  # NaN became null
    back = json.loads(text)
    assert back["schema"] == GATE_SCHEMA == "edgekit.gate"
    assert back["schema_version"] == GATE_SCHEMA_VERSION == 1
    assert back["passed"] is False
    assert back["summary"] == {"checks": 3, "passed": 1, "failed": 2, "skipped": 0}
    assert back["inputs"] == ["bench.json"]
    p99 = next(c for c in back["checks"] if c["metric"] == "p99")
    assert p99["measured"] is None and p99["status"] == "fail" and p99["source"] == "flag"
    assert back["models"][0]["name"] == "int8" and back["models"][0]["passed"] is False
    assert back["verdict"].startswith("gate failed: 2 of 3 checks failed")


def test_table_rows_and_verdict():
    report = sample_report()
    rows = table_rows(report)
    assert COLUMNS == ("model", "check", "measured", "limit", "source", "status")
    assert rows[0].cells == ("int8", "size", "4.20 MB", "≤ 4.00 MB", "target rpi4", "FAIL")
    assert rows[0].status == "fail"
    assert rows[-1].cells[-1] == "skipped (no accuracy recorded)" and rows[-1].status == "skip"
    assert verdict(report) == (
        "gate failed: 2 of 6 checks failed, 1 skipped for 2 models "
        "(int8: size 4.20 MB > 4.00 MB; fp32: p99 latency 25.00 ms > 20.00 ms)"
    )
    ok = evaluate([make_result()], [Budget("size", 5.0, "MB", "flag")])
    assert verdict(ok) == "gate passed: 1 of 1 checks passed for 1 model"
