"""The error-rate budget: `edgekit loadtest` results carry ``settings.error_rate`` (a fraction) and
``edgekit gate --max-error-rate`` budgets it in percent; other results skip the check."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from edgekit.records.result import to_document
from edgekit.cli.app import app
from edgekit.core.errors import UsageError
from edgekit.gates.budgets import Budget, Budgets, parse_limit
from edgekit.gates.evaluate import evaluate
from edgekit.gates.results import FAIL, PASS, SKIP
from bench_results import make_result


def loadtest_result(failed: int, requests: int = 1000):
    result = make_result(variant="served-onnx", target=None)
    counts = {"200": requests - failed, **({"503": failed} if failed else {})}
    return dataclasses.replace(result, mode="loadtest", settings={
        "loadtest": True, "requests": requests, "status_counts": counts, "error_rate": round(failed / requests, 6)})


@pytest.mark.parametrize("text, limit", [("1%", 1.0), ("0.5", 0.5), (0, 0.0), ("0%", 0.0), (2, 2.0)])
def test_error_rate_limits_are_percent(text, limit):
    assert parse_limit("error_rate", text) == (limit, "%")


@pytest.mark.parametrize("bad", ["1ms", "-1%", "nan", True, "5 requests"])
def test_bad_error_rate_limits_are_usage_errors(bad):
    with pytest.raises(UsageError):
        parse_limit("error_rate", bad)


@pytest.mark.parametrize("failed, limit, status, measured", [
    (0, 0.0, PASS, 0.0),        # no errors meets even a zero budget
    (10, 1.0, PASS, 1.0),       # 10 of 1000 = 1.0 %: at the limit passes
    (11, 1.0, FAIL, 1.1),       # 11 of 1000 = 1.1 %
    (1, 0.0, FAIL, 0.1),
])
def test_error_rate_is_the_failed_share_in_percent(failed, limit, status, measured):
    report = evaluate([loadtest_result(failed)], Budgets((Budget("error_rate", limit, "%", "flag"),)))
    (check,) = report.checks
    assert check.metric == "error_rate" and check.status == status
    assert check.measured == pytest.approx(measured)


def test_a_result_that_is_not_a_load_test_skips_the_error_rate_budget():
    report = evaluate([make_result()], Budgets((Budget("error_rate", 1.0, "%", "flag"),)))
    (check,) = report.checks
    assert check.status == SKIP and "not an `edgekit loadtest` result" in check.message


@pytest.mark.parametrize("rate", [1.5, -0.1, float("nan"), "0.1"])
def test_an_impossible_error_rate_fails(rate):
    result = dataclasses.replace(loadtest_result(0), settings={"error_rate": rate})
    (check,) = evaluate([result], Budgets((Budget("error_rate", 1.0, "%", "flag"),))).checks
    assert check.status == FAIL


def test_gate_cli_budgets_the_error_rate_of_a_loadtest_json(tmp_path):
    path = tmp_path / "load.json"
    path.write_text(json.dumps(to_document([loadtest_result(30)])))
    runner = CliRunner()
    failed = runner.invoke(app, ["gate", str(path), "--max-error-rate", "1%"])
    assert failed.exit_code == 3, failed.output
    assert "error rate" in failed.output
    passed = runner.invoke(app, ["gate", str(path), "--max-error-rate", "5"])
    assert passed.exit_code == 0, passed.output
