"""ExecuTorch ``.pte`` specifics: provenance inside the program, planned shape bounds, PT2E int8
(--exclude, --max-drop, QAT), and the one-line refusals (QAT across APIs, no board wheel)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("executorch")
pytest.importorskip("torchao")

from edgekit.formats.artifacts import load_manifest  # noqa: E402
from edgekit.cli.app import app  # noqa: E402
from edgekit.formats import executorch  # noqa: E402

pytestmark = pytest.mark.slow
runner = CliRunner()


def _ok(*args) -> None:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output


def _float_logits(checkpoint, inputs: np.ndarray) -> np.ndarray:
    import torch

    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(checkpoint)
    model = load_model_from_artifact(folder, manifest).eval()
    with torch.inference_mode():
        return model(torch.from_numpy(inputs)).numpy()


@pytest.fixture(scope="module")
def pte_fp32(digits_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("pte") / "fp32"
    _ok("export", digits_checkpoint, "--format", "executorch", "--out", out)
    return out


def test_provenance_travels_inside_the_program(pte_fp32, digits_checkpoint):
    _, manifest = load_manifest(pte_fp32)
    entry = manifest.file("executorch")
    provenance = executorch.read_provenance(pte_fp32 / entry.path)
    assert provenance["model"] == "digits-cnn" and provenance["variant"] == "fp32-executorch"
    assert provenance["target"] == "rpi4" and provenance["edgekit_version"]
    assert entry.details["delegate"] == "xnnpack" and entry.details["delegated_subgraphs"] >= 1


def test_batches_past_the_planned_bound_run_in_chunks(pte_fp32, digits_checkpoint):
    from edgekit.data.datasets import load_split

    _, manifest = load_manifest(pte_fp32)
    entry = manifest.file("executorch")
    bound = entry.details["max_shapes"]["batch"]
    assert bound >= 7  # the reference case at batch 7 ran
    rows = load_split("digits", "test").inputs[: 2 * bound + 3]
    predict = executorch.predictor(pte_fp32 / entry.path, entry.details)
    np.testing.assert_allclose(predict(rows), _float_logits(digits_checkpoint, rows), atol=1e-4, rtol=1e-3)


def test_garbage_pte_is_one_line(tmp_path):
    from edgekit.core.errors import InputFileError

    bad = tmp_path / "model.pte"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(InputFileError, match="is not an ExecuTorch program"):
        executorch.check_file(bad)


def test_exclude_keeps_a_layer_float_and_max_drop_holds(digits_checkpoint, tmp_path):
    _ok("quantize", digits_checkpoint, "--method", "static", "--format", "executorch", "--out", tmp_path / "all")
    _ok("quantize", digits_checkpoint, "--method", "static", "--format", "executorch", "--exclude", "head",
        "--out", tmp_path / "head")
    _, everything = load_manifest(tmp_path / "all")
    _, kept = load_manifest(tmp_path / "head")
    assert kept.file("executorch").details["float_layers"] == ["head"]
    assert kept.file("executorch").bytes > everything.file("executorch").bytes  # the head's weights stay fp32
    _ok("quantize", digits_checkpoint, "--method", "static", "--format", "executorch", "--max-drop", "0.5",
        "--out", tmp_path / "budget")
    _, budget = load_manifest(tmp_path / "budget")
    entry = budget.file("executorch")
    assert entry.metrics["float_accuracy"] - entry.metrics["accuracy"] <= 0.005 + 1e-9
    assert budget.quantization["budget"]["max_drop_points"] == 0.5


def test_qat_through_pt2e(digits_checkpoint, tmp_path):
    _ok("quantize", digits_checkpoint, "--method", "qat", "--format", "executorch", "--qat-epochs", "1",
        "--out", tmp_path / "qat")
    _, manifest = load_manifest(tmp_path / "qat")
    entry = manifest.file("executorch")
    assert entry.precision == "int8" and entry.details["api"] == "torchao PT2E"
    assert entry.details["qat"]["epochs"] == 1
    assert entry.metrics["float_accuracy"] - entry.metrics["accuracy"] <= 0.02


def test_qat_across_quantization_apis_is_refused_before_any_work(digits_checkpoint, tmp_path):
    result = runner.invoke(app, ["quantize", str(digits_checkpoint), "--method", "qat", "--format",
                                 "torchscript,executorch", "--out", str(tmp_path / "q")])
    assert result.exit_code == 2
    assert "need separate runs" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "q").exists()


def test_bundle_refuses_a_platform_without_an_executorch_wheel(pte_fp32, tmp_path):
    result = runner.invoke(app, ["bundle", str(pte_fp32), "--target", "rpi4", "--out", str(tmp_path / "b"),
                                 "--platform", "manylinux_2_17_armv7l"])
    # PyPI is reachable here (the package registries are): the refusal must be the real one, not a network error
    assert result.exit_code == 1, result.output
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "no wheel for manylinux_2_17_armv7l" in line, line
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.tar.gz").exists()


def test_bundle_json_pins_the_board_runtime(pte_fp32, tmp_path):
    _ok("bundle", pte_fp32, "--target", "rpi4", "--out", tmp_path / "b")
    info = json.loads((tmp_path / "b" / "bundle.json").read_text())
    assert info["runtime"]["name"] == "executorch" and info["format"] == "executorch"
    text = (tmp_path / "b" / "requirements.txt").read_text()
    assert "--index-url https://download.pytorch.org/whl/cpu" in text
    assert "--extra-index-url https://pypi.org/simple" in text
    assert not (tmp_path / "b" / "serve.py").exists()  # serve.py is ONNX Runtime only


def test_the_target_sets_the_pt2e_recipe(digits_checkpoint, tmp_path):
    from edgekit.core.targets import load_target

    source = load_target("rpi4").source
    text = open(source).read().replace("[runtime.executorch_quant]  # .pte int8 (PT2E, XNNPACKQuantizer): symmetric int8\n"
                                       "per_channel = true", "[runtime.executorch_quant]\nper_channel = false")
    assert "per_channel = false" in text
    custom = tmp_path / "rpi4-per-tensor.toml"
    custom.write_text(text)
    _ok("quantize", digits_checkpoint, "--method", "static", "--format", "executorch", "--target", custom,
        "--out", tmp_path / "q")
    _, manifest = load_manifest(tmp_path / "q")
    assert manifest.file("executorch").details["weights"].endswith("per tensor")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("per_channel = false", "per_channel = false\nbits = 4"))
    result = runner.invoke(app, ["quantize", str(digits_checkpoint), "--method", "static", "--format", "executorch",
                                 "--target", str(bad), "--out", str(tmp_path / "q2")])
    assert result.exit_code == 2 and "bits" in result.stderr


def _spec(axes: dict):
    from edgekit.core.input_spec import InputSpec

    return InputSpec(name="tokens", dtype="int64", shape=(None, None), dynamic_axes=axes)


@pytest.mark.parametrize("suggestion, expected", [
    ("  sequence = Dim('sequence', max=128)", {"sequence": (1, 128)}),
    ("  sequence = Dim('sequence', min=2, max=48)", {"sequence": (2, 48)}),
    ("  sequence = 16", None),  # the model fixes the axis (an LSTM): not a bound we narrow to
    ("  batch = 1\n  sequence = Dim('sequence', max=128)", None),
    ("  other = Dim('other', max=8)", None),  # not one of our axes
    ("  sequence = Dim('sequence', min=9, max=4)", None),
])
def test_torch_exports_suggested_bounds_are_taken_only_when_they_narrow(suggestion, expected):
    message = f"Constraints violated (sequence)!\nSuggested fixes:\n{suggestion}\n\nThe error above occurred ..."
    assert executorch.narrowed_bounds(message, [_spec({0: "batch", 1: "sequence"})]) == expected
    assert executorch.narrowed_bounds("Constraints violated (sequence)!", [_spec({1: "sequence"})]) is None
