"""Valid models that used to end in an internal error or a refusal (issue 32): each through the CLI,
checked against the float model run by ONNX Runtime (or TorchScript) beside it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import robust_models
from conftest import one_line_error
from edgekit.cli.app import app

runner = CliRunner()


def _run(path, feed: dict) -> list:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feed)


def _cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _manifest(folder) -> dict:
    return json.loads((folder / "manifest.json").read_text())


@pytest.mark.parametrize("inside_if", [False, True], ids=["concat", "concat-in-if-branch"])
@pytest.mark.parametrize("method", ["dynamic", "static"])
def test_a_graph_ort_shape_inference_asserts_on_still_quantizes(tmp_path, method, inside_if):
    """Concat([-1], [4, 4], axis=-1) of constants: ORT's symbolic shape inference asserts (it took the
    run down as 'internal error (AssertionError)'); edgekit falls back to ONNX's shape inference,
    says so naming the node, and the int8 file follows the float model on both branches."""
    model = tmp_path / "model.onnx"
    robust_models.concat_of_constants(model, inside_if)
    samples = np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)
    np.save(tmp_path / "calib.npy", samples)
    out = tmp_path / "q"
    args = ["quantize", str(model), "--method", method, "--format", "onnx", "--out", str(out)]
    if method == "static":
        # judged on whole batches of one sign, as the If decides on the batch's sum (held-out single rows of
        # mixed signs take the branches one by one: not what this graph is fed)
        np.save(tmp_path / "eval.npy", np.abs(samples[:16]))
        args += ["--calib", str(tmp_path / "calib.npy"), "--eval-data", str(tmp_path / "eval.npy")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "symbolic shape inference failed at node target_shape (Concat) (AssertionError)" in result.stderr
    assert "internal error" not in result.output
    manifest = _manifest(out)
    assert [f["precision"] for f in manifest["files"]] == ["int8"]
    assert any("target_shape (Concat)" in w for w in manifest["quantization"]["warnings"])
    for sign in (1.0, -1.0):  # both branches of the If
        feed = {"x": sign * np.abs(samples[:16])}
        assert _cosine(_run(out / "model.onnx", feed)[0], _run(model, feed)[0]) > 0.99


def test_a_detector_with_free_height_and_width_asks_for_its_size(tmp_path):
    """At the 1x1 size edgekit made up, the skip connection's Concat failed inside ONNX Runtime
    (internal error); now one line asks for --input-shape, and with it (or with page-sized
    calibration data) the int8 file is written and follows the float model."""
    model = tmp_path / "detector.onnx"
    robust_models.export_detector(model)
    line = one_line_error(runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--out", str(tmp_path / "a")]), 2)
    assert "free height/width axes on input 'image'" in line
    assert "--input-shape image=1x3x<height>x<width>" in line and "internal error" not in line
    assert not (tmp_path / "a").exists()
    bad = one_line_error(runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--input-shape",
                                            "image=1x3x5x5", "--out", str(tmp_path / "b")]), 2)
    assert "fails at the size --input-shape gives (1x3x5x5" in bad

    result = runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--input-shape", "image=1x3x48x64",
                                 "--out", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    pages = np.random.default_rng(0).random((12, 3, 48, 64)).astype(np.float32)
    np.save(tmp_path / "pages.npy", pages)
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(tmp_path / "pages.npy"),
                                 "--out", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    feed = {"image": pages[:2]}
    assert _cosine(_run(tmp_path / "d" / "model.onnx", feed)[0], _run(model, feed)[0]) > 0.99
    # dynamic judged on --eval-data: the reference cases are the data's pages, at their size
    result = runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--eval-data", str(tmp_path / "pages.npy"),
                                 "--out", str(tmp_path / "e")])
    assert result.exit_code == 0, result.output
    assert _cosine(_run(tmp_path / "e" / "model.onnx", feed)[0], _run(model, feed)[0]) > 0.99


def _stream(steps: int = 120) -> np.ndarray:
    t = np.arange(steps)[:, None]
    noise = np.random.default_rng(0).standard_normal((steps, 16))
    return (np.sin(t / 7 + np.arange(16)) + 0.1 * noise).astype(np.float32)


def _streamed(path, frames: np.ndarray) -> np.ndarray:
    """The model run over ``frames`` a call at a time, its state fed back (zeros at the start)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    state, outs = np.zeros((2, 1, 32), np.float32), []
    for frame in frames:
        prob, state = session.run(None, {"input": frame[None], "state": state})
        outs.append(prob.item())
    return np.array(outs)


@pytest.mark.parametrize("with_state", [False, True], ids=["frames-only", "frames-and-initial-state"])
def test_a_recurrent_model_calibrates_on_a_stream_with_its_state_fed_back(tmp_path, with_state):
    """input (N, 16) and state (layers=2, batch, 32): static calibration refused with 'inputs have
    different sample counts [1, 2]' (axis 0 of the state is its layers). Each .npz block is now one
    stream, the state output fed back; the int8 model tracks the float one over a held-out stream."""
    model = tmp_path / "vad.onnx"
    robust_models.export_recurrent(model)
    frames = _stream()
    arrays = {"input": frames[:80]}
    if with_state:
        arrays["state"] = np.zeros((2, 1, 32), np.float32)
    np.savez(tmp_path / "stream.npz", **arrays)
    out = tmp_path / "q"
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(tmp_path / "stream.npz"),
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "different sample counts" not in result.output
    manifest = _manifest(out)
    assert manifest["quantization"]["calibration"]["samples"] >= 60  # steps, not the state's 2 layers
    held_out = frames[80:]
    int8, float_ = _streamed(out / "model.onnx", held_out), _streamed(model, held_out)
    assert np.corrcoef(int8, float_)[0, 1] > 0.95
    assert np.abs(int8 - float_).max() < 0.1


def test_a_state_whose_names_do_not_pair_is_declared_with_state(tmp_path):
    """`memory` in, `carry` out: nothing pairs them by name, so the calibration data must hold the
    state for every call (refused: it is not in the block); --state memory=carry calibrates on the stream."""
    model = tmp_path / "rnn.onnx"
    robust_models.export_recurrent(model, state="memory", next_state="carry")
    np.savez(tmp_path / "stream.npz", input=_stream(60))
    args = ["quantize", str(model), "--method", "static", "--calib", str(tmp_path / "stream.npz")]
    refused = one_line_error(runner.invoke(app, [*args, "--out", str(tmp_path / "a")]), 2)
    assert "lacks array(s) for input(s): memory" in refused
    result = runner.invoke(app, [*args, "--state", "memory=carry", "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert _manifest(tmp_path / "b")["quantization"]["calibration"]["samples"] >= 40


def test_state_pairs_and_sample_axes_are_found_from_names_and_dynamic_axes(tmp_path):
    from edgekit.sources.model_source import resolve_source
    from edgekit.sources.state_pairs import StatePair, state_pairs, stream_layout

    model = tmp_path / "vad.onnx"
    robust_models.export_recurrent(model)
    axes, streams = stream_layout(resolve_source(model))
    assert axes == {"input": 0, "state": 1} and streams == (("state", "stateN"),)
    src = resolve_source(model)
    assert state_pairs(src.inputs, ("output", "h_out")) == []  # no output named like the state
    assert state_pairs(src.inputs, src.outputs, declared={"state": "output"}) == [StatePair("state", "output")]


def test_an_initial_state_for_another_batch_size_is_one_line(tmp_path):
    """A stream is fed one step at a time: an initial state holding 3 samples on its batch axis
    cannot start it, and says so in one line (no ONNX Runtime shape error)."""
    model = tmp_path / "vad.onnx"
    robust_models.export_recurrent(model)
    np.savez(tmp_path / "bad.npz", input=_stream(5), state=np.zeros((2, 3, 32), np.float32))
    line = one_line_error(runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib",
                                              str(tmp_path / "bad.npz"), "--out", str(tmp_path / "q")]), 2)
    assert "state input 'state' holds 3 sample(s) along axis 1" in line


def test_a_fixed_input_shape_is_the_shape_a_transformer_is_judged_at(tmp_path):
    """`hf:` BERT with --input-shape 1x128: its reference rows were 1x16 and 7x11 whatever the shape,
    which an ExecuTorch program fixed at 1x128 refused (set_inputs error 0x10, an internal error)."""
    from edgekit.sources.model_source import resolve_source

    config = {"model_type": "bert", "vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    fixed = resolve_source(f"hf:{tmp_path}", input_shapes=["input_ids=1x128", "attention_mask=1x128"], random_init=True)
    for batch in (1, 7):
        rows = fixed.reference_feed(batch)
        assert {name: value.shape for name, value in rows.items()} == {"input_ids": (1, 128), "attention_mask": (1, 128)}
        assert rows["attention_mask"][0].all()  # the first row is a whole sentence
    free = resolve_source(f"hf:{tmp_path}", random_init=True)  # dynamic axes: two batch sizes, two lengths
    assert free.reference_feed(7)["input_ids"].shape == (7, 11)
