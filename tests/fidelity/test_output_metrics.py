"""The metric that binds for each kind of output fails where a cosine says all is well, and passes
for a good candidate. Real ONNX files, real ONNX Runtime sessions; the references are numpy's own
(np.corrcoef, arg-max by hand), not edgekit's sums."""

from __future__ import annotations

import numpy as np
import pytest

import fidelity_models as fm
from edgekit.fidelity.compare import Comparison, compare_batches, compare_streams
from edgekit.formats.metrics import FLOORS, greedy_decode, output_kind
from edgekit.sources.state_pairs import StatePair, state_pairs

pytest.importorskip("onnxruntime")


def _pair(tmp_path, make, **damage):
    return fm.ort_runner(make(tmp_path / "float.onnx")), fm.ort_runner(make(tmp_path / "bad.onnx", **damage))


def _binding(result: dict) -> dict:
    return {b["metric"]: b["ok"] for b in result["binding"]}


def _feeds(name: str, shape: tuple, batches: int = 4, seed: int = 5) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(batches)]


def test_a_ctc_sequence_is_held_to_per_timestep_agreement_not_its_cosine(tmp_path):
    good, bad = _pair(tmp_path, fm.ctc, damage=True)
    feeds = _feeds("features", (8, fm.STEPS, fm.FEATURES))
    (same,) = compare_batches(good, good, feeds, ["logprobs"]).results()
    (damaged,) = compare_batches(good, bad, feeds, ["logprobs"]).results()
    assert same["kind"] == damaged["kind"] == "sequence"  # log-softmax rows: classes per timestep
    assert same["ok"] and same["metrics"]["sequence_match"] == 1.0
    # the cosine passes its own floor; the arg-max per timestep (by hand, below) does not
    assert damaged["metrics"]["cosine"] >= FLOORS["tensor"][0][1]
    ref = np.concatenate([good(f)[0] for f in feeds]).argmax(-1)
    got = np.concatenate([bad(f)[0] for f in feeds]).argmax(-1)
    assert damaged["metrics"]["timestep_agreement"] == pytest.approx((ref == got).mean(), abs=1e-6)
    assert _binding(damaged) == {"timestep_agreement": False, "symbol_agreement": False} and not damaged["ok"]
    assert damaged["metrics"]["sequence_match"] < 0.5


def test_a_tnc_sequence_is_read_batch_first():
    ref = np.zeros((5, 2, 3), np.float32)  # (T, N, C): blank everywhere...
    ref[1, 0, 2] = ref[3, 1, 1] = 9.0  # ...one symbol per sample
    got = ref.copy()
    got[3, 1, 1] = 0.0  # sample 1 loses its symbol
    comparison = Comparison(["out"], {"out": "sequence"})
    comparison.add([ref], [got], batch=2)
    (result,) = comparison.results()
    assert result["metrics"]["timestep_agreement"] == pytest.approx(9 / 10)
    assert result["metrics"]["sequence_match"] == pytest.approx(1 / 2)
    assert greedy_decode(np.array([0, 2, 2, 0, 2, 1, 1])) == (2, 2, 1)


def test_a_classifier_is_held_to_argmax_agreement(tmp_path):
    good, bad = _pair(tmp_path, fm.classifier, damage=True)
    feeds = _feeds("input", (16, fm.FEATURES))
    (damaged,) = compare_batches(good, bad, feeds, ["logits"]).results()
    (same,) = compare_batches(good, good, feeds, ["logits"]).results()
    assert damaged["kind"] == "classes" and same["ok"]
    assert damaged["metrics"]["cosine"] > 0.99  # the +-40 bias hides the damage from a cosine
    ref = np.concatenate([good(f)[0] for f in feeds]).argmax(1)
    got = np.concatenate([bad(f)[0] for f in feeds]).argmax(1)
    assert damaged["metrics"]["top1_agreement"] == pytest.approx((ref == got).mean())
    assert not damaged["ok"] and _binding(damaged) == {"top1_agreement": False}


def test_one_number_per_sample_is_held_to_correlation_and_max_abs(tmp_path):
    good, bad = _pair(tmp_path, fm.score, damage=True)
    feeds = _feeds("input", (16, fm.FEATURES))
    (damaged,) = compare_batches(good, bad, feeds, ["prob"]).results()
    (same,) = compare_batches(good, good, feeds, ["prob"]).results()
    assert damaged["kind"] == same["kind"] == "scalar" and same["ok"]
    assert damaged["metrics"]["cosine"] > 0.95  # every probability is near 0.5
    assert damaged["metrics"]["correlation"] == pytest.approx(0.0, abs=1e-6)  # a constant candidate
    ref = np.concatenate([good(f)[0] for f in feeds]).ravel()
    got = np.concatenate([bad(f)[0] for f in feeds]).ravel()
    assert damaged["metrics"]["max_abs"] == pytest.approx(np.abs(ref - got).max(), rel=1e-5)
    assert _binding(damaged) == {"correlation": False, "max_abs_of_spread": False}
    # a slightly perturbed candidate: correlation by numpy's own formula
    noisy = (ref + np.random.default_rng(0).normal(0, 0.01, ref.shape)).astype(np.float32)
    comparison = Comparison(["prob"])
    comparison.add([ref[:, None]], [noisy[:, None]], batch=len(ref))
    (result,) = comparison.results()
    assert result["metrics"]["correlation"] == pytest.approx(np.corrcoef(ref, noisy)[0, 1], abs=1e-6)


def test_kinds_come_from_values_names_or_declarations():
    rng = np.random.default_rng(0)
    features = rng.standard_normal((4, 32)).astype(np.float32)
    assert output_kind("last_hidden_state", features, 4) == "tensor"  # an arg-max of features is no decision
    assert output_kind("logits", features, 4) == "classes"
    assert output_kind("boxes", features[:, :4], 4) == "tensor"  # a 4-value box regression
    assert output_kind("y", np.exp(features) / np.exp(features).sum(1, keepdims=True), 4) == "classes"
    assert output_kind("y", features[:, :1], 4) == "scalar"
    assert output_kind("y", features, 4, declared="classes") == "classes"


def test_a_stateful_model_is_run_as_streams_with_its_own_state_fed_back(tmp_path):
    """Damage to the recurrent weights that one call hides (state taken from the float model) shows
    over a stream, where each model feeds back its own state."""
    good, bad = _pair(tmp_path, fm.vad, damage="state")
    from edgekit.core.input_spec import InputSpec

    specs = (InputSpec("x", (1, fm.FRAME)), InputSpec("h", (1, 1, fm.HIDDEN)))
    pairs = state_pairs(specs, ["prob", "hn"])
    assert pairs == [StatePair("h", "hn")]  # found by name and shape
    streams = [[{"x": s[i:i + 1]} for i in range(len(s))] for s in fm.frames(4, 64)]
    initial = {"h": np.zeros((1, 1, fm.HIDDEN), np.float32)}

    per_call = Comparison(["prob", "hn"])
    hand_ref, hand_got = [], []
    for stream in streams:
        h_float = h_cand = initial["h"]
        for step in stream:
            ref, got = good({**step, "h": h_float}), bad({**step, "h": h_float})
            per_call.add(ref, got, 1)
            hand_ref.append(ref[0].item())
            hand_got.append(bad({**step, "h": h_cand})[0].item())
            h_cand = bad({**step, "h": h_cand})[1]
            h_float = ref[1]
    streamed, count, steps = compare_streams(good, bad, streams, ["prob", "hn"], pairs, initial)
    assert (count, steps) == (4, 256)
    prob, hn = streamed.results()
    assert (prob["kind"], hn["kind"]) == ("scalar", "tensor")  # the state is compared too
    assert all(r["ok"] for r in per_call.results())  # one call at a time: all within the floors
    assert not prob["ok"] and _binding(prob)["max_abs_of_spread"] is False
    assert prob["metrics"]["cosine"] > 0.99
    hand_ref, hand_got = np.array(hand_ref), np.array(hand_got)
    assert prob["metrics"]["max_abs"] == pytest.approx(np.abs(hand_ref - hand_got).max(), rel=1e-4)
    assert prob["metrics"]["correlation"] == pytest.approx(np.corrcoef(hand_ref, hand_got)[0, 1], abs=1e-4)


def test_padded_positions_of_a_feature_output_are_left_out():
    """A hidden state at positions the attention mask marks as padding is read by no head: damage
    there (here: garbage at every padded position) does not count, damage at real tokens does."""
    rng = np.random.default_rng(0)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=np.int64)
    hidden = rng.standard_normal((2, 5, 8)).astype(np.float32)
    garbage = hidden.copy()
    garbage[mask == 0] = 100.0
    feed = {"input_ids": np.ones((2, 5), np.int64), "attention_mask": mask}
    comparison = Comparison(["last_hidden_state"])
    comparison.add([hidden], [garbage], batch=2, feed=feed)
    (result,) = comparison.results()
    assert result["kind"] == "tensor" and result["metrics"]["cosine"] == pytest.approx(1.0)
    damaged = hidden.copy()
    damaged[0, 0] = -damaged[0, 0]  # a real token's features flipped
    comparison = Comparison(["last_hidden_state"])
    comparison.add([hidden], [damaged], batch=2, feed=feed)
    real = hidden[mask.astype(bool)].ravel()
    got = damaged[mask.astype(bool)].ravel()
    expected = float(real @ got / (np.linalg.norm(real) * np.linalg.norm(got)))
    assert comparison.results()[0]["metrics"]["cosine"] == pytest.approx(expected, abs=1e-6)
