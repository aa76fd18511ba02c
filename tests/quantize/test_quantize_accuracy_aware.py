"""QAT vs PTQ on a model where PTQ loses accuracy, accuracy budgets (--max-drop) and --auto."""

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from edgekit.formats.artifacts import describe_file, finalize, load_manifest
from edgekit.cli.app import app
from edgekit.core.errors import UsageError

runner = CliRunner()
OUTLIER_SCALE = 50.0


@pytest.fixture(scope="module")
def outlier_checkpoint(digits_checkpoint, tmp_path_factory):
    """The digits CNN with one outlier activation channel: the same function, a harder int8 job.

    Channel 0 of the first block is scaled up 50x (BN gamma and beta) and the next convolution's
    weights for that channel scaled down 50x: the float model computes exactly the same logits,
    but one channel now spans a range 50x wider than the others (like the outlier features of
    transformer activations), so per-tensor activation ranges starve the other channels.
    """
    from edgekit.sources.checkpoint import CHECKPOINT_FILE, load_checkpoint, save_checkpoint

    folder, manifest = load_manifest(digits_checkpoint)
    state, meta = load_checkpoint(folder / CHECKPOINT_FILE)
    state["features.0.1.weight"][0] *= OUTLIER_SCALE
    state["features.0.1.bias"][0] *= OUTLIER_SCALE
    state["features.1.0.weight"][:, 0] /= OUTLIER_SCALE
    out = tmp_path_factory.mktemp("outlier") / "checkpoint"
    out.mkdir()
    save_checkpoint(out / CHECKPOINT_FILE, state, meta)
    entry = describe_file(out, CHECKPOINT_FILE, "checkpoint", metrics=manifest.files[0].metrics)
    finalize(dataclasses.replace(manifest, files=(entry,)), out)
    return out


def test_outlier_model_is_the_same_function(digits_checkpoint, outlier_checkpoint):
    from edgekit.formats.evaluation import task_accuracy, torch_predictor
    from edgekit.sources.checkpoint import load_model_from_artifact

    accs = [task_accuracy(m.task, torch_predictor(load_model_from_artifact(f, m)))
            for f, m in (load_manifest(digits_checkpoint), load_manifest(outlier_checkpoint))]
    assert accs[0] == accs[1]


def test_qat_beats_static_ptq_where_ptq_loses_accuracy(outlier_checkpoint, tmp_path):
    from conftest import CALIB_DIGITS

    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    _, ptq = quantize(outlier_checkpoint, "static", tmp_path / "ptq", "rpi4", calib=CALIB_DIGITS, formats=("onnx",))
    _, qat = quantize(outlier_checkpoint, "qat", tmp_path / "qat", "rpi4", epochs=3)
    float_acc = ptq.quantization and load_manifest(outlier_checkpoint)[1].metrics["accuracy"]
    ptq_acc = ptq.file("onnx").metrics["accuracy"]
    assert ptq_acc <= float_acc - 0.005  # PTQ loses at least half a point here
    for entry in qat.files:
        assert entry.metrics["accuracy"] > ptq_acc, (entry.format, entry.metrics["accuracy"], ptq_acc)
        assert entry.metrics["parity"]["cosine"] > 0.99  # int8 reproduces the fake-quant network QAT trained
    assert qat.file("torchscript").details["quantized_engine"] == "qnnpack"
    onnx_details = qat.file("onnx").details
    assert onnx_details["format"] == "QDQ" and onnx_details["weights_folded"] == 4
    assert qat.file("onnx").bytes < 0.45 * load_manifest(outlier_checkpoint)[1].files[0].bytes
    _, exported = export(tmp_path / "qat", tmp_path / "dist")  # export re-checks parity and accuracy
    assert exported.file("onnx").metrics["accuracy"] == qat.file("onnx").metrics["accuracy"]


def test_max_drop_falls_back_the_most_sensitive_layers(outlier_checkpoint, tmp_path):
    from conftest import CALIB_DIGITS

    from edgekit.quantize.api import quantize

    _, q = quantize(outlier_checkpoint, "static", tmp_path / "q", "rpi4", calib=CALIB_DIGITS,
                    formats=("onnx",), max_drop=0.5)
    report = q.quantization["budget"]["files"][0]
    entry = q.file("onnx")
    assert report["int8_drop_points"] > 0.5 >= report["final_drop_points"]
    assert report["met"] and report["float_layers"] == entry.details["float_layers"]
    assert 1 <= len(report["float_layers"]) <= len(report["sensitivity"]) == 4
    assert report["float_layers"][0] == report["sensitivity"][0]["layer"]  # most sensitive first
    assert report["bytes_final"] > report["bytes_int8"]  # the cost of the float layers
    assert {"int8", "final"} <= set(report["latency_ms"])
    assert entry.metrics["accuracy_drop_points"] <= 0.5


def test_unmeetable_budget_is_reported_and_writes_nothing(tmp_path):
    """Fidelity budget 0: even with every weighted layer in float the residual Add stays int8."""
    import numpy as np

    calib = tmp_path / "calib"
    calib.mkdir()
    np.save(calib / "x.npy", np.random.default_rng(0).standard_normal((16, 3, 6, 6)).astype(np.float32))
    args = ["quantize", "tiny_models:tiny_net", "--input-shape", "Nx3x6x6", "--method", "static",
            "--calib", str(calib), "--format", "onnx", "--max-drop", "0", "--target", "x86-64",
            "--out", str(tmp_path / "q")]
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("accuracy budget not met for int8 onnx")  # a verdict: no "Error:"
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Accuracy budget NOT met" in result.stdout and "/conv/Conv" in result.stdout
    assert not (tmp_path / "q").exists()


def test_max_drop_needs_a_method_that_can_fall_back(digits_checkpoint, tmp_path):
    from edgekit.quantize.api import quantize

    with pytest.raises(UsageError, match="max drop must be between 0 and 100"):
        quantize(digits_checkpoint, "dynamic", tmp_path / "q", max_drop=-1)


def test_each_format_lists_its_own_layers_and_one_without_a_list_is_refused():
    from edgekit import formats
    from edgekit.quantize.registry import layers_for, listed_formats

    listed = listed_formats()  # registered by each route module that lists its layers
    assert {"onnx", "torchscript", "executorch"} <= set(listed) <= set(formats.names())
    assert all(callable(layers_for(name)) for name in listed)
    for name in sorted(set(formats.names()) - set(listed)):  # ncnn, tflite: no lister, refused in one line
        with pytest.raises(UsageError, match=rf"^--max-drop cannot keep layers of --format {name} in float: "):
            layers_for(name)
    with pytest.raises(UsageError, match=r"^--max-drop cannot keep layers of --format toy in float: .*\(@layer_lister\('toy'\)\)$"):
        layers_for("toy")


@pytest.mark.slow
def test_auto_picks_the_fastest_recipe_within_budget(mobilenet_checkpoint, tmp_path):
    from edgekit.data.calibsets import default_calibration

    args = ["quantize", str(mobilenet_checkpoint), "--auto", "--calib", str(default_calibration("digits32")),
            "--target", "x86-64", "--format", "onnx", "--out", str(tmp_path / "q")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output + result.stderr
    assert "Candidates for x86-64" in result.stdout and "static-entropy" in result.stdout
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    candidates = manifest["quantization"]["candidates"]
    chosen = [c for c in candidates if c["chosen"]]
    assert len(chosen) == 1 and chosen[0]["meets_budget"]
    in_budget = [c for c in candidates if c["meets_budget"] and c["method"] != "fp32"]
    assert chosen[0]["p50_ms"] == min(c["p50_ms"] for c in in_budget)
    assert any(c["method"] == "fp32" and c["p50_ms"] for c in candidates)
    entry = manifest["files"][0]
    assert entry["details"]["auto_recipe"] == chosen[0]["name"]
    assert entry["metrics"]["accuracy_drop_points"] <= manifest["quantization"]["config"]["max_drop_points"]
    with_method = runner.invoke(app, args[:-2] + ["--method", "dynamic", "--out", str(tmp_path / "x")])
    assert with_method.exit_code == 2 and "--auto chooses the recipe itself" in with_method.stderr
