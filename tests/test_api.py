"""The public Python API (``edgekit.api``): real runs on the zoo's default model, config objects,
the errors for a wrong config, light imports, and the README's example."""

from __future__ import annotations

import dataclasses
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import CALIB_DIGITS, REPO


def _onnx_vs_float(checkpoint: Path, artifact: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(float outputs, int8 ONNX outputs, op types) on the artifact's reference inputs; the float
    outputs come from the checkpoint's weights run in torch here, not from edgekit's reference."""
    import onnx
    import onnxruntime as ort
    import torch

    from edgekit.formats.artifacts import load_manifest
    from edgekit.sources.checkpoint import load_model_from_artifact

    model = load_model_from_artifact(*load_manifest(checkpoint))
    session = ort.InferenceSession(str(artifact / "model.onnx"), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    with np.load(artifact / "reference.npz") as ref:
        inputs = np.concatenate([ref[k] for k in sorted(ref.files) if "/input/" in k])
    with torch.inference_mode():
        expected = model(torch.from_numpy(inputs)).numpy()
    got = session.run(None, {name: inputs})[0]
    ops = sorted({node.op_type for node in onnx.load(str(artifact / "model.onnx")).graph.node})
    return expected, got, ops


def _assert_close(expected: np.ndarray, got: np.ndarray) -> None:
    assert expected.shape == got.shape == (8, 10)  # the reference cases: batch 1 and batch 7
    cosine = float((expected * got).sum() / (np.linalg.norm(expected) * np.linalg.norm(got)))
    assert cosine > 0.999, cosine  # measured 0.99995 (dynamic), 0.99997 (static)
    assert (expected.argmax(1) == got.argmax(1)).all()
    # percentile calibration clips outliers by design: one logit may move by a few int8 steps, the rest by less
    error = np.abs(expected - got)
    assert error.max() < 0.1 * np.abs(expected).max() and error.mean() < 0.02 * np.abs(expected).max()


def test_dynamic_config_gives_an_onnx_close_to_the_float_model(digits_checkpoint, tmp_path):
    from edgekit.api import DynamicConfig, quantize

    out = tmp_path / "int8"
    folder, manifest = quantize(digits_checkpoint, DynamicConfig(formats=("onnx",)), out)
    assert folder == out and manifest.kind == "quantized" and manifest.target == "rpi4"
    assert manifest.quantization["method"] == "dynamic"
    assert [(f.path, f.format, f.precision) for f in manifest.files] == [("model.onnx", "onnx", "int8")]
    expected, got, ops = _onnx_vs_float(digits_checkpoint, out)
    _assert_close(expected, got)
    assert "DynamicQuantizeLinear" in ops and "QuantizeLinear" not in ops

    # the method name with the config's fields as keywords (what the CLI passes) is the same run
    again, manifest2 = quantize(digits_checkpoint, "dynamic", tmp_path / "by-name", formats=("onnx",))
    assert manifest2.quantization["config"] == manifest.quantization["config"]
    assert (again / "model.onnx").read_bytes() == (out / "model.onnx").read_bytes()


def test_static_config_calibrates_on_the_data_given(digits_checkpoint, tmp_path):
    from edgekit.api import StaticConfig, quantize

    config = StaticConfig(calib=CALIB_DIGITS, formats=("onnx",), calibrate_method="percentile", percentile=99.9,
                          calib_max_samples=96, calib_cache=False)
    out, manifest = quantize(digits_checkpoint, config, tmp_path / "int8", "rpi4")
    quantization = manifest.quantization
    assert quantization["method"] == "static"
    assert quantization["config"]["calibrate_method"] == "percentile" and quantization["config"]["percentile"] == 99.9
    assert quantization["calibration"]["samples"] == 96
    assert Path(quantization["calibration"]["source"]) == CALIB_DIGITS
    expected, got, ops = _onnx_vs_float(digits_checkpoint, out)
    _assert_close(expected, got)
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops and "DynamicQuantizeLinear" not in ops


def test_static_config_without_calib_uses_the_models_shipped_set(digits_checkpoint, tmp_path):
    from edgekit.api import StaticConfig, quantize
    from edgekit.data.calibsets import default_calibration

    _, manifest = quantize(digits_checkpoint, StaticConfig(calib=None, formats=("onnx",), calib_max_samples=32,
                                                           calib_cache=False), tmp_path / "int8")
    assert Path(manifest.quantization["calibration"]["source"]) == default_calibration("digits")


def test_a_model_from_outside_the_zoo_takes_its_source_options_beside_the_config(tmp_path):
    from edgekit.api import StaticConfig, quantize

    calib = tmp_path / "calib"
    calib.mkdir()
    np.save(calib / "x.npy", np.random.default_rng(0).standard_normal((40, 3, 6, 6)).astype(np.float32))
    config = StaticConfig(calib=calib, formats=("onnx",), calib_cache=False)
    _, manifest = quantize("tiny_models:tiny_net", config, tmp_path / "int8", "rpi4",
                           input_shapes=["1x3x6x6"], dynamic_axes=["0"])
    assert manifest.model["name"] == "module:tiny_models:tiny_net"
    assert manifest.quantization["calibration"]["samples"] == 32  # the last fifth (8) held out to judge on
    assert manifest.files[0].metrics["fidelity"]["cosine"] > 0.99


@pytest.mark.parametrize(
    "config, message",
    [
        ({"method": "static"}, r"not a quantization config: dict"),
        ("StaticConfig", r"unknown quantization method 'StaticConfig'"),
        (None, r"not a quantization config: NoneType"),
    ],
)
def test_a_wrong_config_is_a_clear_error_before_anything_is_written(digits_checkpoint, tmp_path, config, message):
    from edgekit.api import UsageError, quantize

    with pytest.raises(UsageError, match=message) as raised:
        quantize(digits_checkpoint, config, tmp_path / "q")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "q").exists()


def test_a_config_class_or_another_stages_config_is_refused_with_the_choices(digits_checkpoint, tmp_path):
    from edgekit.api import StaticConfig, TrainConfig, UsageError, quantize

    with pytest.raises(UsageError, match=r"the class StaticConfig \(call it: StaticConfig\(...\)\)"):
        quantize(digits_checkpoint, StaticConfig, tmp_path / "q")
    with pytest.raises(UsageError, match=r"TrainConfig .*; give one of DynamicConfig \(dynamic\), .*"
                                         r"StaticConfig \(static\).*, or a method name$"):
        quantize(digits_checkpoint, TrainConfig(), tmp_path / "q")
    # a setting belongs on the config, not beside it
    with pytest.raises(UsageError, match=r"per_channel: set it on the DynamicConfig, not as a keyword"):
        from edgekit.api import DynamicConfig

        quantize(digits_checkpoint, DynamicConfig(), tmp_path / "q", per_channel=True)
    assert not (tmp_path / "q").exists()


def test_a_registered_method_is_reached_by_its_config_type(digits_checkpoint, tmp_path, monkeypatch):
    from edgekit.api import DynamicConfig, quantize, register_method
    from edgekit.quantize import registry

    @dataclasses.dataclass(frozen=True)
    class OnnxOnlyDynamic(DynamicConfig):
        formats: tuple[str, ...] = ("onnx",)

    calls = []

    def handler(job, config):
        calls.append(type(config))
        return registry.run_routes(job, config)  # a subclass reaches its base class's routes

    registry.method_names()  # the built-in methods are in the registry before it is copied
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))  # the registration ends with the test
    register_method(registry.Method("onnx-dynamic", OnnxOnlyDynamic, handler, "dynamic int8, ONNX only"))
    assert "onnx-dynamic" in registry.method_names() and "static" in registry.method_names()
    out, manifest = quantize(digits_checkpoint, OnnxOnlyDynamic(), tmp_path / "int8")
    assert calls == [OnnxOnlyDynamic]  # its own handler, not the base class's
    assert manifest.quantization["method"] == "onnx-dynamic"
    assert manifest.files[0].details["variant"] == "int8-onnx-dynamic-onnx"
    _assert_close(*_onnx_vs_float(digits_checkpoint, out)[:2])


def _fresh_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_api_loads_no_heavy_runtime():
    heavy = _fresh_python(
        "import sys, edgekit.api as api\n"
        "[getattr(api, name) for name in api.__all__]\n"
        "api.StaticConfig(formats=('onnx',)); api.DynamicConfig(); api.QatConfig(); api.TrainConfig()\n"
        "print(' '.join(m for m in ('torch', 'onnxruntime', 'onnx') if m in sys.modules))"
    )
    assert heavy == ""


def test_from_edgekit_import_a_stage_name_is_always_the_subpackage():
    """The old lazy façade made ``from edgekit import quantize`` the function or the subpackage,
    depending on what had been imported before; now it is the subpackage either way, and the
    functions are in edgekit.api."""
    out = _fresh_python(
        "import types, edgekit\n"
        "assert edgekit.__version__\n"
        "from edgekit import quantize as first\n"
        "import edgekit.api\n"
        "from edgekit import quantize as second, export\n"
        "assert isinstance(first, types.ModuleType) and first is second and isinstance(export, types.ModuleType)\n"
        "assert callable(edgekit.api.quantize) and edgekit.api.export.__module__ == 'edgekit.export.api'\n"
        "try:\n"
        "    edgekit.gate\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    assert out == "module 'edgekit' has no attribute 'gate'; use `from edgekit.api import gate`"
    # ``import edgekit`` alone reaches the API through the attribute, and stays light
    out = _fresh_python("import sys, edgekit; f = edgekit.api.quantize; "
                        "print(f.__module__, 'torch' in sys.modules, 'onnxruntime' in sys.modules)")
    assert out == "edgekit.api False False"


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("\n## Python API\n"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the Python API section holds one runnable example"
    return blocks[0]


def test_the_readme_example_runs_from_any_folder(tmp_path):
    done = subprocess.run([sys.executable, "-c", readme_example()], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs/digits-int8/model.onnx").is_file() and (tmp_path / "dist/model.onnx").is_file()
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(r"int8 accuracy 0\.\d{3} \(float 0\.\d{3}\)", lines[0]), lines
    # size, memory and accuracy decide it; rpi4's p99 budget applies to runs on a Pi, not on this host
    assert lines[-1] == "gate passed", lines
    if platform.machine() != "aarch64":
        assert re.fullmatch(r"skipped: p99 latency \d+\.\d{3} ms \(not measured on rpi4\)", lines[-2]), lines


def test_a_method_added_with_the_decorators_is_listed_and_runs_by_name(digits_checkpoint, tmp_path, monkeypatch):
    """One class is the whole change: the registry lists it (the CLI and the pipeline read that list)
    and a route registered for its base class writes its files."""
    from edgekit.api import DynamicConfig, method, quantize
    from edgekit.quantize import registry

    registry.method_names()
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))  # the registration ends with the test

    @method("dynamic-per-tensor", "dynamic int8 with one scale per weight tensor")
    @dataclasses.dataclass(frozen=True)
    class PerTensorDynamic(DynamicConfig):
        formats: tuple[str, ...] = ("onnx",)
        per_channel: bool | None = False

    assert "dynamic-per-tensor" in registry.method_names()
    assert not registry.calibrated("dynamic-per-tensor") and not registry.trains("dynamic-per-tensor")
    out, manifest = quantize(digits_checkpoint, "dynamic-per-tensor", tmp_path / "int8")
    assert manifest.quantization["method"] == "dynamic-per-tensor"
    assert manifest.quantization["config"]["per_channel"] is False
    _assert_close(*_onnx_vs_float(digits_checkpoint, out)[:2])
