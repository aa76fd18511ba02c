"""The int8 parity floor binds where it is used: export's check, quantize's fidelity check, and the
limits a native bundle's on-board check runs with. Candidates sit just below and just above the
floor (cosine 0.95, top-1 agreement 0.8), so loosening it in ``formats/parity.py`` fails here.

The candidates are real ONNX files run by ONNX Runtime: a linear model, then a rotation R of its
logits that pairs the 10 outputs (cos t on the diagonal, +-sin t inside each pair). R is orthogonal
and x.Rx = cos t |x|^2 for every x, so the cosine to the float outputs is exactly cos t (hand
computed, independent of edgekit's metric).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekit.core.errors import ParityError

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

BATCHES = (1, 7)
FEATURES, CLASSES = 16, 10


def _weights():
    rng = np.random.default_rng(0)
    return rng.normal(size=(FEATURES, CLASSES)).astype(np.float32), rng.normal(size=CLASSES).astype(np.float32)


def _rotation(cosine: float) -> np.ndarray:
    t = math.acos(cosine)
    r = np.zeros((CLASSES, CLASSES), dtype=np.float64)
    for i in range(0, CLASSES, 2):
        r[i, i] = r[i + 1, i + 1] = math.cos(t)
        r[i, i + 1], r[i + 1, i] = math.sin(t), -math.sin(t)
    return r.astype(np.float32)


def _write_model(path, cosine: float | None):
    """``logits = (input @ W + b) @ R(cosine)``; no rotation when ``cosine`` is None (the float model)."""
    from onnx import TensorProto, helper, numpy_helper

    w, b = _weights()
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    nodes = [helper.make_node("MatMul", ["input", "W"], ["xw"]),
             helper.make_node("Add", ["xw", "B"], ["logits" if cosine is None else "z"])]
    if cosine is not None:
        inits.append(numpy_helper.from_array(_rotation(cosine), "R"))
        nodes.append(helper.make_node("MatMul", ["z", "R"], ["logits"]))
    graph = helper.make_graph(
        nodes, "floor", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _cases() -> dict:
    """{batch: (inputs, float outputs)}, the outputs computed by numpy (not by edgekit)."""
    w, b = _weights()
    rng = np.random.default_rng(1)
    cases = {}
    for batch in BATCHES:
        x = rng.normal(size=(batch, FEATURES)).astype(np.float32)
        cases[batch] = ({"input": x}, (x.astype(np.float64) @ w + b).astype(np.float32))
    return cases


def _predict(path):
    from edgekit.formats.parity import predictor_for

    return predictor_for(path, "onnx")


def test_the_rotation_gives_the_cosine_it_is_built_for(tmp_path):
    predict = _predict(_write_model(tmp_path / "r.onnx", 0.94))
    for inputs, expected in _cases().values():
        got = predict(inputs).astype(np.float64).ravel()
        want = expected.astype(np.float64).ravel()
        assert float(got @ want / np.linalg.norm(got) / np.linalg.norm(want)) == pytest.approx(0.94, abs=1e-5)


@pytest.mark.parametrize("cosine", [0.94, 0.90])
def test_export_refuses_an_int8_file_just_below_the_cosine_floor(tmp_path, cosine):
    from edgekit.formats.parity import check_parity

    predict = _predict(_write_model(tmp_path / "r.onnx", cosine))
    with pytest.raises(ParityError, match=rf"cosine {cosine:.3f}.*need >= 0\.95"):
        check_parity(predict, _cases(), "int8", "int8 onnx export", decisions=False)


def test_export_keeps_an_int8_file_just_above_the_cosine_floor(tmp_path):
    from edgekit.formats.parity import check_parity

    parity = check_parity(_predict(_write_model(tmp_path / "r.onnx", 0.96)), _cases(), "int8", "x", decisions=False)
    assert parity["cosine"] == pytest.approx(0.96, abs=1e-5)


def _swap_top_two(expected: np.ndarray, rows: int) -> np.ndarray:
    """``expected`` with its two largest logits swapped in the first ``rows`` rows (tiny change,
    other decision)."""
    out = expected.copy()
    for row in out[:rows]:
        first, second = np.argsort(row)[-1], np.argsort(row)[-2]
        row[first], row[second] = row[second], row[first]
    return out


def _close_calls(batch: int = 20) -> dict:
    """Logits whose two best classes are 0.01 apart, so a swapped decision barely moves the cosine."""
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(batch, CLASSES)).astype(np.float32)
    logits[:, 0] = logits.max(axis=1) + 5.0
    logits[:, 1] = logits[:, 0] - 0.01
    return {batch: ({"input": np.zeros((batch, FEATURES), np.float32)}, logits)}


@pytest.mark.parametrize(("swapped", "refused"), [(5, True), (3, False)])  # top-1 agreement 0.75 / 0.85 of 20
def test_an_int8_file_must_keep_80_percent_of_the_decisions(swapped, refused):
    from edgekit.formats.parity import check_parity

    cases = _close_calls()
    ((inputs, expected),) = cases.values()
    candidate = _swap_top_two(expected, swapped)
    if refused:
        with pytest.raises(ParityError, match=r"top-1 agreement 0\.75.*>= 0\.8"):
            check_parity(lambda _: candidate, cases, "int8", "x")
    else:
        assert check_parity(lambda _: candidate, cases, "int8", "x")["top1_agreement"] == pytest.approx(0.85)


def test_quantize_refuses_an_unlabelled_int8_file_just_below_the_floor(tmp_path):
    """Quantize's check of a model from outside the zoo (fidelity: the cosine alone)."""
    from edgekit.quantize.search.accuracy import check
    from edgekit.sources.model_source import resolve_source

    source = resolve_source(_write_model(tmp_path / "float.onnx", None))
    assert not source.labelled
    with pytest.raises(ParityError, match=r"cosine 0\.940; need >= 0\.95"):
        check(source, _predict(_write_model(tmp_path / "low.onnx", 0.94)), _cases(), "int8 onnx")
    kept = check(source, _predict(_write_model(tmp_path / "high.onnx", 0.96)), _cases(), "int8 onnx")
    assert kept["cosine"] == pytest.approx(0.96, abs=1e-5)


def _board_check(tmp_path, model, limits: list[str]) -> dict:
    from edgekit.board.check import check, parse_args
    from edgekit.formats.reference import BATCH_SIZES

    arrays = {}
    cases = _cases()
    for batch in BATCH_SIZES:
        inputs, expected = cases[batch]
        arrays[f"b{batch}/input/input"], arrays[f"b{batch}/output"] = inputs["input"], expected
    reference = tmp_path / "reference.npz"
    np.savez(reference, **arrays)
    return check(parse_args(["--model", str(model), "--format", "onnx", "--reference", str(reference), *limits]),
                 tmp_path)


def test_the_native_bundles_on_board_check_uses_the_same_floor(tmp_path):
    """The limits written into an int8 native bundle's run.sh, given to the board's output check,
    fail the candidate at cosine 0.94 and pass the one at 0.96 (on the cosine)."""
    from edgekit.bundle.native import check_limits

    limits = check_limits("int8")
    assert limits[:2] == ["--min-cosine", "0.95"]
    low = _board_check(tmp_path, _write_model(tmp_path / "low.onnx", 0.94), limits)
    assert not low["ok"] and any(f.startswith("cosine 0.94") and f.endswith("< 0.95") for f in low["failures"])
    high = _board_check(tmp_path, _write_model(tmp_path / "high.onnx", 0.96), limits)
    assert not any(f.startswith("cosine") for f in high["failures"])
