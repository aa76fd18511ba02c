"""A CTC text line is mostly blank timesteps: a file that keeps the blanks and loses the symbols
agrees on most timesteps while reading another text. The symbols' own agreement binds too (PP-OCRv4's
recognizer, static int8: 91 % of timesteps, 83 % of symbol timesteps, 31 % of lines read the same)."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.fidelity.compare import Comparison
from edgekit.formats.metrics import greedy_decode


def _one_hot(ids: np.ndarray, classes: int = 5) -> np.ndarray:
    return np.eye(classes, dtype=np.float32)[ids]


def test_a_line_of_blanks_with_wrong_symbols_fails_on_its_symbols():
    rng = np.random.default_rng(0)
    ref = np.zeros((8, 40), np.int64)  # 8 lines, 40 timesteps, blank (0) on 34 of them
    for line in ref:
        line[rng.choice(40, 6, replace=False)] = rng.integers(1, 5, 6)
    got = ref.copy()
    got[:, :] = np.where((ref != 0) & (np.arange(40) % 2 == 0), (ref % 4) + 1, ref)  # about half the symbols change
    comparison = Comparison(["probs"], {"probs": "sequence"})
    comparison.add([_one_hot(ref)], [_one_hot(got)], batch=8)
    (result,) = comparison.results()
    symbols = (ref != 0) | (got != 0)
    assert result["metrics"]["timestep_agreement"] == pytest.approx((ref == got).mean(), abs=1e-6)
    assert result["metrics"]["timestep_agreement"] >= 0.9  # the blanks carry the all-timestep figure
    assert result["metrics"]["symbol_agreement"] == pytest.approx((ref == got)[symbols].mean(), abs=1e-6)
    assert {b["metric"]: b["ok"] for b in result["binding"]} == {"timestep_agreement": True, "symbol_agreement": False}
    assert not result["ok"]
    reads_same = np.mean([greedy_decode(a) == greedy_decode(b) for a, b in zip(ref, got)])
    assert result["metrics"]["sequence_match"] == pytest.approx(reads_same)


def test_all_blank_lines_have_no_symbol_figure_and_pass_on_their_timesteps():
    ids = np.zeros((3, 10), np.int64)
    comparison = Comparison(["probs"], {"probs": "sequence"})
    comparison.add([_one_hot(ids)], [_one_hot(ids)], batch=3)
    (result,) = comparison.results()
    assert result["metrics"]["symbol_agreement"] is None and result["ok"]
    assert [b["metric"] for b in result["binding"]] == ["timestep_agreement"]
