"""--onnx-exporter auto: each family's measured choice, a fallback when it cannot export, and a record."""

from __future__ import annotations

import onnx
import pytest
from conftest import one_line_error
from typer.testing import CliRunner

from edgekit.formats.artifacts import load_manifest
from edgekit.cli.app import app
from edgekit.models.registry import get_spec

runner = CliRunner()


def cumulative():
    """A user model only torch.export can export (the TorchScript exporter has no logcumsumexp)."""
    import torch

    class Cumulative(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.logcumsumexp(self.proj(x), dim=1)

    return Cumulative()


def _metadata(path) -> dict:
    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


def test_zoo_models_get_their_familys_exporter_and_say_why(digits_fp32_export, digits_static):
    spec = get_spec("digits-cnn")
    folder, manifest = load_manifest(digits_fp32_export)
    details = manifest.file("onnx").details
    assert details["onnx_exporter"] == spec.onnx_exporter == "torchscript"
    assert details["onnx_exporter_choice"] == spec.onnx_exporter_why and "faster" in spec.onnx_exporter_why
    assert _metadata(folder / "model.onnx")["edgekit.onnx_exporter"] == "torchscript"
    # the quantized model records the exporter its float graph came from
    _, quantized = load_manifest(digits_static)
    assert quantized.file("onnx").details["onnx_exporter"] == "torchscript"
    assert "not quantizable" in get_spec("lstm-lm").onnx_exporter_why  # the family where the two differ most


def test_auto_falls_back_to_torch_export_and_records_it(tmp_path):
    out = tmp_path / "auto"
    result = runner.invoke(app, ["export", "test_onnx_exporters:cumulative", "--input-shape", "Nx8", "--format", "onnx",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    folder, manifest = load_manifest(out)
    entry = manifest.file("onnx")
    assert entry.details["onnx_exporter"] == "dynamo"
    assert "torchscript exporter failed" in entry.details["onnx_exporter_choice"]
    assert "logcumsumexp" in entry.details["onnx_exporter_choice"]
    assert entry.metrics["parity"]["max_abs"] < 1e-5 and entry.metrics["parity"]["batch_sizes"] == [1, 7]
    assert _metadata(folder / "model.onnx")["edgekit.onnx_exporter"] == "dynamo"
    assert "Torch IR graph" not in result.output  # the failed first try stays quiet


def test_an_explicit_exporter_is_not_second_guessed(tmp_path):
    result = runner.invoke(app, ["export", "test_onnx_exporters:cumulative", "--input-shape", "Nx8", "--format", "onnx",
                                 "--onnx-exporter", "torchscript", "--out", str(tmp_path / "ts")])
    assert one_line_error(result, 1) == ("Error: ONNX export (torchscript exporter) failed: Exporting the operator "
                                         "'aten::logcumsumexp' to ONNX opset version 17 is not supported")
    assert not (tmp_path / "ts").exists()


@pytest.mark.slow
def test_torch_export_on_request_for_a_zoo_model(digits_checkpoint, tmp_path):
    """torch.export keys dynamic shapes by the forward's argument names; edgekit passes them by position."""
    result = runner.invoke(app, ["export", str(digits_checkpoint), "--format", "onnx", "--onnx-exporter", "dynamo",
                                 "--out", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    _, manifest = load_manifest(tmp_path / "d")
    entry = manifest.file("onnx")
    assert entry.details["onnx_exporter"] == "dynamo" and entry.details["onnx_exporter_choice"] == "asked"
    assert entry.metrics["parity"]["max_abs"] < 1e-4 and entry.metrics["accuracy"] == entry.metrics["float_accuracy"]
