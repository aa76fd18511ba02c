"""Floors, not ceilings: a language model's decode rate below ``--min-decode-tps`` (or the project
file's ``min_decode_tps``) fails the gate, at or above it passes; ``--max-ttft-ms`` likewise. A gate
that ignored a minimum budget would pass every other gate test."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from bench_results import make_result  # shared with tests/bench
from edgekit.records.result import to_document
from edgekit.gates.budgets import Budget
from edgekit.gates.evaluate import evaluate
from edgekit.gates.results import FAIL, PASS


def _llm_result(decode_tps: float, ttft_ms: float = 40.0):
    """An LLM bench result: decode 20 tok/s median over 3 processes (the shape ``edgekit bench`` writes)."""
    llm = {"processes": 3, "decode_tps": {"median": decode_tps, "min": decode_tps - 1, "max": decode_tps + 1},
           "prefill_tps": {"median": 100.0, "min": 99.0, "max": 101.0},
           "ttft_ms": {"median": ttft_ms, "min": ttft_ms - 1, "max": ttft_ms + 1}}
    return dataclasses.replace(make_result(variant="int4", accuracy=None, float_accuracy=None), settings={"llm": llm})


@pytest.mark.parametrize(("floor", "status"), [(20.5, FAIL), (25.0, FAIL), (20.0, PASS), (19.5, PASS)])
def test_decode_rate_is_held_to_its_floor(floor, status):
    (check,) = evaluate([_llm_result(20.0)], [Budget("decode_tps", floor, "tok/s", "flag")]).checks
    assert (check.status, check.measured) == (status, 20.0)


def test_a_decode_rate_under_the_floor_says_by_how_much():
    (check,) = evaluate([_llm_result(20.0)], [Budget("decode_tps", 25.0, "tok/s", "flag")]).checks
    assert "20.0% under" in check.message  # (25 - 20) / 25, by hand


@pytest.mark.parametrize(("limit", "status"), [(39.0, FAIL), (40.0, PASS)])
def test_time_to_first_token_is_held_to_its_ceiling(limit, status):
    (check,) = evaluate([_llm_result(20.0, ttft_ms=40.0)], [Budget("ttft", limit, "ms", "flag")]).checks
    assert check.status == status


def _gate(tmp_path, *args):
    doc = tmp_path / "bench.json"
    doc.write_text(json.dumps(to_document([_llm_result(20.0)])))
    return subprocess.run([sys.executable, "-m", "edgekit", "gate", str(doc), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_the_cli_fails_a_decode_rate_under_the_flag_and_passes_one_over(tmp_path):
    failed = _gate(tmp_path, "--min-decode-tps", "25")
    assert failed.returncode == 3, failed.stderr
    passed = _gate(tmp_path, "--min-decode-tps", "15tok/s")
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_the_cli_reads_the_floor_from_the_project_file(tmp_path):
    (tmp_path / "edgekit.toml").write_text("[budgets]\nmin_decode_tps = 25\n")
    assert _gate(tmp_path).returncode == 3
    (tmp_path / "edgekit.toml").write_text("[budgets]\nmin_decode_tps = 15\n")
    assert _gate(tmp_path).returncode == 0
