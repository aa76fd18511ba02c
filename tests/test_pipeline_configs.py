"""The pipeline's int8 methods are config objects, built once in the plan and passed whole to
quantize: a name from --methods is built from the registry, a config object given to
PipelineConfig keeps its settings; what a method needs comes from its config type's traits."""

from __future__ import annotations

import dataclasses
import json

import pytest

from edgekit.api import DynamicConfig, PipelineConfig, QatConfig, StaticConfig, run_pipeline
from edgekit.data.calibsets import default_calibration
from edgekit.core.errors import UsageError
from edgekit.pipeline.plan import make_plan

QUICK = {"processes": 2, "min_runs": 3, "min_time_s": 0.0, "warmup": 1,
         "budget_overrides": {"max_p99_ms": "60s", "max_peak_rss_mb": "8GiB"}}


def test_names_become_configs_with_the_plans_formats_and_calibration(tmp_path):
    plan = make_plan(PipelineConfig(methods=("dynamic", "static"), formats=("onnx", "torchscript"), out=tmp_path / "r"))
    shipped = default_calibration(plan.task["dataset"])  # the default model's (digits32)
    assert [(run.label, type(run.config)) for run in plan.quant_runs] == [("dynamic", DynamicConfig), ("static", StaticConfig)]
    assert all(run.config.formats == ("onnx", "torchscript") for run in plan.quant_runs)
    assert plan.quant_runs[1].config.calib == shipped == plan.calib
    # every other setting is the config class's own default
    assert dataclasses.replace(plan.quant_runs[1].config, calib=None) == StaticConfig(calib=None, formats=("onnx", "torchscript"))


def test_a_config_object_keeps_its_settings_and_takes_the_plans_formats(tmp_path, digits_checkpoint):
    given = StaticConfig(calib=None, calibrate_method="percentile", percentile=99.9, formats=("onnx",))
    plan = make_plan(PipelineConfig(checkpoint=digits_checkpoint, methods=(given,), formats=("onnx", "executorch"),
                                    out=tmp_path / "r"))
    (run,) = plan.quant_runs
    assert run.label == "static" and plan.methods == ("static",)
    assert run.config == dataclasses.replace(given, formats=("onnx", "executorch"),
                                             calib=default_calibration(plan.task["dataset"]))
    own = tmp_path / "calib"
    own.mkdir()
    kept = make_plan(PipelineConfig(checkpoint=digits_checkpoint, methods=(StaticConfig(calib=own),), out=tmp_path / "r"))
    assert kept.quant_runs[0].config.calib == own  # a config naming its own data keeps it


def test_a_method_that_trains_runs_once_per_quantization_api(tmp_path):
    plan = make_plan(PipelineConfig(methods=(QatConfig(epochs=1),), formats=("onnx", "executorch", "torchscript"),
                                    out=tmp_path / "r"))
    assert [(run.label, run.config.formats, run.config.epochs) for run in plan.quant_runs] == [
        ("qat", ("onnx", "torchscript"), 1), ("qat-executorch", ("executorch",), 1)]


@pytest.mark.parametrize("methods, message", [
    (("static", "static"), "methods names static more than once"),
    ((StaticConfig(), "static"), "methods names static more than once"),
    ((DynamicConfig,), "not a quantization config: the class DynamicConfig"),
    (("nope",), "unknown method 'nope'"),
])
def test_bad_methods_are_one_line_before_any_work(methods, message, tmp_path):
    with pytest.raises(UsageError, match=message) as caught:
        PipelineConfig(methods=methods, out=tmp_path / "r")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "r").exists()


def test_the_config_object_reaches_the_files(digits_checkpoint, tmp_path):
    """Its settings are the ones the int8 file was made with (the artifact's manifest says so)."""
    out = tmp_path / "run"
    given = StaticConfig(calib=None, calibrate_method="percentile", percentile=99.9, calib_max_samples=64)
    result = run_pipeline(PipelineConfig(checkpoint=digits_checkpoint, methods=(given,), formats=("onnx",), out=out, **QUICK))
    manifest = json.loads((out / "quantized" / "static" / "manifest.json").read_text())
    recorded = manifest["quantization"]["config"]
    assert manifest["quantization"]["method"] == "static"
    assert (recorded["calibrate_method"], recorded["percentile"], recorded["calib_max_samples"]) == ("percentile", 99.9, 64)
    assert recorded["formats"] == ["onnx"] and recorded["calib"] == str(default_calibration(manifest["task"]["dataset"]))
    assert {row.variant for row in result.rows} >= {"fp32-onnx", "int8-static-onnx"}
