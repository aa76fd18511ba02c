"""Every output compared (issue 32): reference.npz holds every output of the float model, the export
parity check and the board's own output check compare each one and name the one that breaks.

A network with three heads (class scores, boxes, a probability: one value per sample) is written as
an ONNX graph with seeded weights; its outputs are computed by hand in numpy. Damaged copies negate
the boxes (output 1) or flip the probability to 1 - p (output 2: still positive, so a cosine per
batch of one sample stays 1.0)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import multi_output_models as mm
from edgekit.core.errors import InputFileError, ParityError

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

BATCHES = (1, 7)


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """(folder, weights, {batch: (x, hand-computed outputs)}) with intact and damaged ONNX files."""
    folder = tmp_path_factory.mktemp("heads")
    w = mm.weights()
    rng = np.random.default_rng(5)
    cases = {}
    for batch in BATCHES:
        x = rng.standard_normal((batch, mm.FEATURES)).astype(np.float32)
        cases[batch] = (x, mm.heads_numpy(x, w))
    for damage in (None, "negate_boxes", "flip_prob"):
        mm.heads_onnx(folder / f"{damage or 'intact'}.onnx", w, damage)
    mm.write_reference(folder / "reference.npz", cases)
    return folder, w, cases


def _board_check(model, reference, *extra):
    """``python -m edgekit.board.check`` in a child process: (exit code, JSON document, verdict line)."""
    from edgekit.board.check import read_output

    done = subprocess.run([sys.executable, "-m", "edgekit.board.check", "--model", str(model),
                           "--reference", str(reference), *extra], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    if done.returncode == 2 or not done.stdout.strip():
        return done.returncode, None, done.stderr.strip()
    doc, verdict = read_output(done.stdout)
    return done.returncode, doc, verdict


# ---- the file --------------------------------------------------------------------------------------

def test_the_reference_holds_every_output_in_order(tmp_path, heads):
    from edgekit.core.input_spec import InputSpec
    from edgekit.board.inputs import read_reference as board_read
    from edgekit.formats.reference import read_reference, write_predicted_reference

    _, w, _ = heads
    spec = InputSpec(name="input", shape=(None, mm.FEATURES), dtype="float32", dynamic_axes={0: "batch"})
    path = tmp_path / "reference.npz"
    write_predicted_reference(path, lambda inputs: mm.heads_numpy(inputs["input"], w), (spec,), {})
    with np.load(path) as data:
        assert sorted(data.files) == sorted(f"b{b}/{k}" for b in (1, 7)
                                            for k in ("input/input", "output", "outputs/1", "outputs/2"))
    for cases in (read_reference(path, every_output=True), board_read(path, every_output=True)):
        for batch, (inputs, outputs) in cases.items():
            want = mm.heads_numpy(inputs["input"], w)
            assert len(outputs) == 3 and [o.shape for o in outputs] == [(batch, 4), (batch, 4), (batch, 1)]
            for got, hand in zip(outputs, want):
                np.testing.assert_array_equal(got, hand)
    for cases in (read_reference(path), board_read(path)):  # callers that take the first output
        for inputs, first in cases.values():
            np.testing.assert_array_equal(first, mm.heads_numpy(inputs["input"], w)[0])


def test_an_old_single_output_reference_still_reads_and_checks(tmp_path, heads):
    from edgekit.board.inputs import read_reference as board_read
    from edgekit.formats.reference import read_reference

    folder, _, cases = heads
    old = mm.write_reference(tmp_path / "old.npz", cases, keep=1)
    assert [len(outs) for _, outs in read_reference(old, every_output=True).values()] == [1, 1]
    assert [len(outs) for _, outs in board_read(old, every_output=True).values()] == [1, 1]
    code, doc, verdict = _board_check(folder / "intact.onnx", old)
    assert code == 0 and verdict.startswith("PASS"), verdict
    assert [o["index"] for o in doc["outputs"]] == [0]
    assert doc["notes"] == ["the model gives 3 outputs; the reference holds 1 (written before every output was "
                            "kept): 1 compared"]


def test_a_reference_missing_an_output_in_the_middle_is_refused_in_one_line(tmp_path, heads):
    from edgekit.formats.reference import read_reference

    folder, _, cases = heads
    arrays = {}
    for batch, (x, outputs) in cases.items():
        arrays.update({f"b{batch}/input/input": x, f"b{batch}/output": outputs[0], f"b{batch}/outputs/2": outputs[2]})
    np.savez(tmp_path / "gap.npz", **arrays)
    with pytest.raises(InputFileError, match="batch 1 lacks output 1"):
        read_reference(tmp_path / "gap.npz")
    code, doc, message = _board_check(folder / "intact.onnx", tmp_path / "gap.npz")
    assert code == 2 and doc is None and message.endswith("batch 1 lacks output 1")
    assert message.startswith("Error: ") and len(message.splitlines()) == 1
    np.savez(tmp_path / "zero.npz", **{"b1/input/input": cases[1][0], "b1/output": cases[1][1][0],
                                       "b1/outputs/01": cases[1][1][1]})
    code, _, message = _board_check(folder / "intact.onnx", tmp_path / "zero.npz")
    assert code == 2 and "unexpected array 'b1/outputs/01'" in message


# ---- export parity ---------------------------------------------------------------------------------

def _parity_cases(cases):
    return {batch: ({"input": x}, outputs) for batch, (x, outputs) in cases.items()}


def _ort(path):
    from edgekit.formats.parity import every_output, predictor_for

    return every_output(predictor_for(path, "onnx"))


def test_parity_compares_every_output_against_the_hand_computed_ones(heads):
    from edgekit.formats.parity import check_parity

    folder, w, cases = heads
    predict = _ort(folder / "intact.onnx")
    assert predict.output_names == list(mm.OUTPUT_NAMES)
    parity = check_parity(predict, _parity_cases(cases), "fp32", "fp32 onnx export")
    assert [o["index"] for o in parity["outputs"]] == [0, 1, 2]
    assert [o["name"] for o in parity["outputs"]] == list(mm.OUTPUT_NAMES)
    for k, out in enumerate(parity["outputs"]):  # each output's error, against numpy's float64 by hand
        hand = max(float(np.abs(predict({"input": x})[k].astype(np.float64) - outs[k]).max())
                   for x, outs in cases.values())
        assert out["max_abs"] == pytest.approx(hand, rel=1e-5, abs=1e-12) and out["max_abs"] < 1e-5
    assert parity["max_abs"] == max(o["max_abs"] for o in parity["outputs"])  # today's keys: the worst
    assert parity["top1_agreement"] == 1.0 and parity["outputs"][1]["top1_agreement"] is None
    assert parity["batch_sizes"] == [1, 7]
    # the probability (one value per sample) is judged over all 8 samples at once
    assert parity["outputs"][2]["correlation"] == pytest.approx(1.0, abs=1e-6)


def test_parity_names_a_broken_second_output(heads):
    from edgekit.formats.parity import check_parity

    folder, _, cases = heads
    damaged = _ort(folder / "negate_boxes.onnx")
    with pytest.raises(ParityError, match=r"^fp32 onnx export: output 1 \('boxes'\) differs from the float model "
                                          r"at batch 1 \(max abs error"):
        check_parity(damaged, _parity_cases(cases), "fp32", "fp32 onnx export")
    with pytest.raises(ParityError, match=r"int8 output 1 \('boxes'\) diverges from the float model at batch 1 "
                                          r"\(cosine -1\.000; need >= 0\.95\)"):
        check_parity(damaged, _parity_cases(cases), "int8", "int8 onnx export")
    # the first output alone (what was compared before) passes: the damage was invisible to it
    first_only = {batch: (inputs, outputs[0]) for batch, (inputs, outputs) in _parity_cases(cases).items()}
    check_parity(lambda inputs: damaged(inputs)[0], first_only, "int8", "int8 onnx export")


def test_a_one_value_per_sample_output_cannot_pass_on_a_one_element_cosine(heads):
    from edgekit.formats.parity import check_parity

    folder, _, cases = heads
    flipped = _ort(folder / "flip_prob.onnx")
    x1, outs1 = cases[1]
    got = flipped({"input": x1})[2].astype(np.float64).ravel()
    want = outs1[2].astype(np.float64).ravel()
    assert got.size == 1 and float(got @ want / np.linalg.norm(got) / np.linalg.norm(want)) == pytest.approx(1.0)
    with pytest.raises(ParityError, match=r"int8 output 2 \('prob'\) \(one value per sample\) diverges from the "
                                          r"float model over 8 samples: correlation -1\.000"):
        check_parity(flipped, _parity_cases(cases), "int8", "int8 onnx export")


# ---- the board's check -----------------------------------------------------------------------------

def test_the_board_check_passes_the_intact_model_with_an_entry_per_output(heads):
    folder, w, cases = heads
    code, doc, verdict = _board_check(folder / "intact.onnx", folder / "reference.npz")
    assert code == 0 and verdict.startswith("PASS: intact.onnx"), verdict
    assert [(o["index"], o["name"], o["per_sample"]) for o in doc["outputs"]] == [(0, "scores", 4), (1, "boxes", 4),
                                                                                   (2, "prob", 1)]
    assert all(o["ok"] and o["failures"] == [] for o in doc["outputs"])
    assert doc["outputs"][0]["top1_agreement"] == 1.0 and doc["outputs"][1]["top1_agreement"] is None
    assert [len(doc["batches"][str(b)]["outputs"]) for b in BATCHES] == [3, 3]
    assert doc["max_abs"] < 1e-5 and doc["cosine"] > 0.999999


def test_the_board_check_fails_naming_a_negated_second_output(heads):
    folder, _, cases = heads
    code, doc, verdict = _board_check(folder / "negate_boxes.onnx", folder / "reference.npz")
    assert code == 1 and verdict.startswith("FAIL: outputs differ from the reference: output 1 ('boxes'): cosine "
                                            "-1.000000 < 0.5"), verdict
    assert [o["ok"] for o in doc["outputs"]] == [True, False, True]
    hand = max(float(np.abs(2 * outs[1].astype(np.float64)).max()) for _, outs in cases.values())  # |-b - b|
    assert doc["outputs"][1]["max_abs"] == pytest.approx(hand, rel=1e-5)


def test_the_board_check_fails_a_flipped_probability_by_its_spread(heads):
    folder, _, cases = heads
    code, doc, verdict = _board_check(folder / "flip_prob.onnx", folder / "reference.npz")
    prob = np.concatenate([outs[2].astype(np.float64).ravel() for _, outs in cases.values()])
    hand_cosine = float(prob @ (1 - prob) / np.linalg.norm(prob) / np.linalg.norm(1 - prob))
    hand_ratio = float(np.abs(1 - 2 * prob).max() / (prob.max() - prob.min()))
    out = doc["outputs"][2]
    assert out["cosine"] == pytest.approx(hand_cosine, abs=1e-5) and out["cosine"] > 0.5  # the cosine floor holds...
    assert out["max_abs_of_spread"] == pytest.approx(hand_ratio, rel=1e-4) and hand_ratio > 0.5
    assert code == 1 and "output 2 ('prob'): max abs error" in verdict and "(one value per sample)" in verdict


def test_a_fixed_batch_models_outputs_are_not_mistaken_for_one_value_per_sample(tmp_path, heads):
    """A model with a fixed batch of 1 is fed one row in its batch-7 case too (as edgekit writes it):
    its (1, 4) outputs hold 4 values per sample, not 4/7."""
    from edgekit.formats.parity import check_parity

    folder, w, cases = heads
    x = cases[1][0]
    fixed = {batch: (x, mm.heads_numpy(x, w)) for batch in BATCHES}
    code, doc, verdict = _board_check(folder / "intact.onnx", mm.write_reference(tmp_path / "fixed.npz", fixed))
    assert code == 0 and [o["per_sample"] for o in doc["outputs"]] == [4, 4, 1], verdict
    parity = check_parity(_ort(folder / "intact.onnx"), _parity_cases(fixed), "int8", "x")
    assert [sorted(o) for o in parity["outputs"]][1] == ["cosine", "index", "max_abs", "max_rel", "name",
                                                        "top1_agreement"]  # a tensor, not a scalar


# ---- through the CLI, as a user runs it -------------------------------------------------------------

def _negate_output(folder, index: int, refinalize: bool = True) -> None:
    """``folder/model.onnx`` with output ``index`` negated (a Neg node before it); the manifest
    re-finalized over the changed file, as anyone can."""
    import dataclasses

    import onnx
    from onnx import helper

    from edgekit.formats.artifacts import describe_file, finalize, load_manifest

    model = onnx.load(str(folder / "model.onnx"))
    name = model.graph.output[index].name
    for node in model.graph.node:
        node.output[:] = [f"{name}_raw" if o == name else o for o in node.output]
    model.graph.node.append(helper.make_node("Neg", [f"{name}_raw"], [name]))
    onnx.save(model, str(folder / "model.onnx"))
    if refinalize:
        _, manifest = load_manifest(folder, verify=False)
        entry = manifest.file("onnx")
        changed = describe_file(folder, entry.path, entry.format, precision=entry.precision,
                                metrics=entry.metrics, details=entry.details)
        finalize(dataclasses.replace(manifest, files=tuple(changed if f is entry else f for f in manifest.files)),
                 folder)


def _run_check_outputs(bundle):
    """The bundle's own ``python3 check_outputs.py``, as a board runs it."""
    from edgekit.board.check import read_output

    done = subprocess.run([sys.executable, "check_outputs.py"], cwd=bundle, capture_output=True, text=True,
                          timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    doc, verdict = read_output(done.stdout)
    return done.returncode, doc, verdict


def _torch_weights(module) -> dict:
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    return {"w1": state["trunk.weight"].T, "b1": state["trunk.bias"], "w2": state["scores.weight"].T,
            "b2": state["scores.bias"], "w3": state["boxes.weight"].T, "b3": state["boxes.bias"],
            "w4": state["prob.weight"].T, "b4": state["prob.bias"]}


@pytest.mark.slow
def test_export_and_bundle_of_a_three_output_model_check_every_output(tmp_path):
    """``edgekit export`` (ONNX and .pte), ``edgekit bundle --target rpi4``, the bundle's check_outputs.py:
    every output in the reference (numbers by hand), compared by each; a negated output 1 FAILs by name."""
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    runner = CliRunner()
    source = ["multi_output_models:heads", "--input-shape", "Nx16"]
    done = runner.invoke(app, ["export", *source, "--format", "onnx,executorch", "-o", str(tmp_path / "dist")])
    assert done.exit_code == 0, done.output
    w = _torch_weights(mm.heads())
    with np.load(tmp_path / "dist" / "reference.npz") as data:
        for batch in BATCHES:
            hand = mm.heads_numpy(data[f"b{batch}/input/input"], w)
            got = [data[f"b{batch}/output"], data[f"b{batch}/outputs/1"], data[f"b{batch}/outputs/2"]]
            for ours, theirs in zip(got, hand):
                np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    manifest = json.loads((tmp_path / "dist" / "manifest.json").read_text())
    for entry in manifest["files"]:
        assert [o["index"] for o in entry["metrics"]["parity"]["outputs"]] == [0, 1, 2], entry["format"]

    for fmt in ("onnx", "executorch"):
        bundle = tmp_path / f"bundle-{fmt}"
        done = runner.invoke(app, ["bundle", str(tmp_path / "dist"), "--target", "rpi4", "--format", fmt,
                                   "-o", str(bundle)])
        assert done.exit_code == 0, done.output
        code, doc, verdict = _run_check_outputs(bundle)
        assert code == 0 and verdict.startswith("PASS"), verdict
        assert [o["index"] for o in doc["outputs"]] == [0, 1, 2] and doc["max_abs"] < 1e-4, fmt

    _negate_output(tmp_path / "bundle-onnx", 1, refinalize=False)  # the bundle's check reads the file as it is
    code, doc, verdict = _run_check_outputs(tmp_path / "bundle-onnx")
    assert code == 1 and verdict.startswith("FAIL: outputs differ from the reference: output 1 ("), verdict
    assert "cosine -1.000000 < 0.5" in verdict and [o["ok"] for o in doc["outputs"]] == [True, False, True]


@pytest.mark.slow
def test_exporting_a_quantized_file_with_a_broken_second_output_is_refused_by_name(tmp_path):
    """``edgekit quantize`` keeps every output in its reference; ``edgekit export`` of the quantized
    folder re-checks each, so a file whose output 1 was negated (manifest re-finalized) is refused."""
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    runner = CliRunner()
    done = runner.invoke(app, ["quantize", "multi_output_models:heads", "--input-shape", "Nx16", "--method",
                               "dynamic", "--format", "onnx", "-o", str(tmp_path / "q")])
    assert done.exit_code == 0, done.output
    with np.load(tmp_path / "q" / "reference.npz") as data:
        assert {k.split("/", 1)[1] for k in data.files} == {"input/input", "output", "outputs/1", "outputs/2"}
    done = runner.invoke(app, ["export", str(tmp_path / "q"), "-o", str(tmp_path / "intact")])
    assert done.exit_code == 0, done.output
    _negate_output(tmp_path / "q", 1)
    done = runner.invoke(app, ["export", str(tmp_path / "q"), "-o", str(tmp_path / "damaged")])
    assert done.exit_code == 1, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.output
    assert lines[0].startswith("Error: int8 onnx export: int8 output 1 (") and "cosine -1.000" in lines[0], lines[0]
    assert not (tmp_path / "damaged").exists()  # nothing half-written


def test_the_board_probe_writes_every_output(heads, tmp_path):
    """``python -m edgekit.board.probe`` (what ``verify --emulate`` runs on both sides) writes each output
    under its key, equal to the hand-computed outputs."""
    folder, _, cases = heads
    out = tmp_path / "probed.npz"
    done = subprocess.run([sys.executable, "-m", "edgekit.board.probe", str(folder / "intact.onnx"),
                           str(folder / "reference.npz"), str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with np.load(out) as probed:
        assert sorted(probed.files) == sorted(f"b{b}/output" if k == 0 else f"b{b}/outputs/{k}"
                                              for b in cases for k in range(3))
        for batch, (_, outs) in cases.items():
            for k, want in enumerate(outs):
                got = probed[f"b{batch}/output" if k == 0 else f"b{batch}/outputs/{k}"]
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
