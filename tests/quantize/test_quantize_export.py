"""Quantization and export on the default model, checked against the float model."""

import json

import numpy as np
import pytest

from edgekit.formats.artifacts import load_manifest
from edgekit.core.errors import InputFileError, ParityError, UsageError
from edgekit.formats.evaluation import onnx_predictor, task_accuracy, torch_predictor
from edgekit.formats.reference import read_reference


def test_static_int8_keeps_accuracy_and_shrinks(digits_checkpoint, digits_static, digits_fp32_export):
    _, float_manifest = load_manifest(digits_checkpoint)
    _, q = load_manifest(digits_static)
    _, fp32 = load_manifest(digits_fp32_export)
    float_acc = float_manifest.metrics["accuracy"]
    assert float_acc > 0.95
    for entry in q.files:
        assert entry.precision == "int8"
        assert abs(entry.metrics["accuracy"] - float_acc) <= 0.01  # within 1 point of fp32
        assert entry.metrics["parity"]["top1_agreement"] >= 0.8
        fp32_size = fp32.file(entry.format).bytes
        assert entry.bytes < 0.45 * fp32_size, (entry.format, entry.bytes, fp32_size)
    assert q.quantization["calibration"]["samples"] == 256
    assert q.file("torchscript").details["quantized_engine"] == "qnnpack"
    assert q.file("onnx").details["format"] == "QDQ"


def test_measured_accuracy_is_independent_of_the_recorded_one(digits_static):
    """Re-measure the ONNX int8 model here with a plain ORT session and compare to the manifest."""
    import onnx

    folder, q = load_manifest(digits_static)
    entry = q.file("onnx")
    measured = task_accuracy(q.task, onnx_predictor(folder / entry.path))
    assert measured == pytest.approx(entry.metrics["accuracy"])
    ops = {node.op_type for node in onnx.load(str(folder / entry.path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops


def test_fp32_exports_match_float_model_at_two_batch_sizes(digits_checkpoint, digits_fp32_export):
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(digits_checkpoint)
    model = load_model_from_artifact(folder, manifest)
    export_dir, exported = load_manifest(digits_fp32_export)
    cases = read_reference(export_dir / "reference.npz")
    assert sorted(cases) == [1, 7]
    onnx_run = onnx_predictor(export_dir / "model.onnx")
    from edgekit import formats

    ts_run = formats.get("torchscript").ops().predictor(export_dir / "model.pt")
    float_run = torch_predictor(model)
    for batch, (inputs, expected) in cases.items():
        np.testing.assert_allclose(float_run(inputs), expected, atol=1e-6)
        np.testing.assert_allclose(onnx_run(inputs), expected, atol=1e-4, rtol=1e-3)
        np.testing.assert_allclose(ts_run(inputs), expected, atol=1e-4, rtol=1e-3)
    assert exported.file("onnx").metrics["parity"]["batch_sizes"] == [1, 7]


def test_provenance_is_embedded(digits_fp32_export):
    import onnx

    from edgekit.formats.torchscript_backend import read_provenance

    meta = {p.key: p.value for p in onnx.load(str(digits_fp32_export / "model.onnx")).metadata_props}
    assert meta["edgekit.target"] == "rpi4" and meta["edgekit.model"] == "digits-cnn"
    assert json.loads(meta["edgekit.inputs"])[0]["dynamic_axes"] == {"0": "batch"}
    assert read_provenance(digits_fp32_export / "model.pt")["recipe"] == "fp32"


def test_dynamic_quantization_both_formats(digits_checkpoint, tmp_path):
    from edgekit.quantize.api import quantize

    _, q = quantize(digits_checkpoint, "dynamic", tmp_path / "dyn", "rpi4")
    assert q.formats() == ("torchscript", "onnx")
    assert {f.details["variant"] for f in q.files} == {"int8-dynamic-torchscript", "int8-dynamic-onnx"}
    for entry in q.files:
        assert entry.metrics["accuracy"] >= entry.metrics["float_accuracy"] - 0.01


def test_x86_target_uses_x86_engine(digits_checkpoint, tmp_path):
    from conftest import CALIB_DIGITS
    from edgekit.quantize.api import quantize

    _, q = quantize(digits_checkpoint, "static", tmp_path / "x86", "x86-64", calib=CALIB_DIGITS, formats=("torchscript",))
    assert q.file("torchscript").details["quantized_engine"] == "x86"
    assert q.formats() == ("torchscript",)


def test_quantize_bad_inputs(digits_checkpoint, digits_static, tmp_path):
    from edgekit.quantize.api import quantize

    with pytest.raises(UsageError, match="unknown quantization method 'int4'; choose one of: dynamic, qat, static"):
        quantize(digits_checkpoint, "int4", tmp_path / "o")
    with pytest.raises(UsageError, match="quantize takes a float checkpoint"):
        quantize(digits_static, "dynamic", tmp_path / "o")
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    np.save(wrong / "c.npy", np.zeros((8, 3, 32, 32), np.float32))
    with pytest.raises(InputFileError, match=r"expects \(N, 1, 8, 8\)"):
        quantize(digits_checkpoint, "static", tmp_path / "o", calib=wrong)
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_parity_failure_is_loud(digits_fp32_export, tmp_path):
    """A tampered fp32 export must fail parity, naming the output and the error."""
    from edgekit.formats.parity import check_parity

    cases = read_reference(digits_fp32_export / "reference.npz")
    good = onnx_predictor(digits_fp32_export / "model.onnx")
    with pytest.raises(ParityError, match="max abs error"):
        check_parity(lambda x: good(x) + 0.01, cases, "fp32", "fp32 onnx")
    with pytest.raises(ParityError, match="diverges"):
        check_parity(lambda x: -good(x), cases, "int8", "int8 onnx")


def test_export_of_quantized_artifact_rechecks_accuracy(digits_static, tmp_path):
    from edgekit.export.api import export

    folder, exported = export(digits_static, tmp_path / "dist", ("onnx",))
    _, q = load_manifest(digits_static)
    assert exported.file("onnx").metrics["accuracy"] == q.file("onnx").metrics["accuracy"]
    assert exported.kind == "export" and exported.parent["kind"] == "quantized"
    with pytest.raises(UsageError, match="quantized for target 'rpi4', not 'rpi5'"):
        export(digits_static, tmp_path / "dist5", ("onnx",), target="rpi5")


def test_corrupt_checkpoint_is_refused(digits_checkpoint, tmp_path):
    import shutil

    from edgekit.export.api import export

    copy = tmp_path / "ckpt"
    shutil.copytree(digits_checkpoint, copy)
    data = (copy / "checkpoint.pt").read_bytes()
    (copy / "checkpoint.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputFileError, match="checksum"):
        export(copy, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_torchscript_script_mode_and_ort_offline_optimisation(digits_checkpoint, digits_static, tmp_path):
    """Script mode keeps parity with the float model; --optimize ships ORT's optimised graph, re-checked."""
    import onnx

    from edgekit.export.api import export

    _, scripted = export(digits_checkpoint, tmp_path / "script", ("torchscript",), torchscript_mode="script")
    entry = scripted.file("torchscript")
    assert entry.details["torchscript_mode"] == "script+freeze"
    assert entry.metrics["parity"]["max_abs"] < 1e-4
    folder, optimised = export(digits_static, tmp_path / "opt", ("onnx",), optimize=True)
    entry = optimised.file("onnx")
    assert entry.details["ort_optimization"] == "extended"
    _, q = load_manifest(digits_static)
    assert entry.metrics["accuracy"] == q.file("onnx").metrics["accuracy"]
    ops = {node.op_type for node in onnx.load(str(folder / "model.onnx")).graph.node}
    assert "QLinearConv" in ops or "QLinearMatMul" in ops or "QGemm" in ops, ops  # QDQ pairs fused by ORT


def test_unscriptable_model_is_a_one_line_usage_error():
    import torch

    from edgekit.formats.torchscript_backend import script

    class Unscriptable(torch.nn.Module):
        def forward(self, x):
            return sorted([x], key=lambda t: t.sum())[0]  # lambdas do not compile

    with pytest.raises(UsageError, match="cannot script tiny: .*--torchscript-mode trace"):
        script(Unscriptable(), label="tiny")
