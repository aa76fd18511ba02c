"""The pipeline's default model and the data it needs, shipped inside the package."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgekit.data import digits
from edgekit.data.calibsets import default_calibration

REPO = Path(__file__).resolve().parents[2]


def test_upscaled_digits_match_torch_bilinear_interpolation():
    import torch
    import torch.nn.functional as F

    small = digits.load_split("test").inputs[:16]
    expected = F.interpolate(torch.from_numpy(small), size=(32, 32), mode="bilinear", align_corners=False).numpy()
    large = digits.load_split_large("test")
    np.testing.assert_allclose(large.inputs[:16], expected, atol=1e-6)
    assert large.inputs.shape[1:] == (1, 32, 32) and large.inputs.dtype == np.float32
    np.testing.assert_array_equal(large.labels, digits.load_split("test").labels)


def test_packaged_calibration_sets_are_the_train_samples():
    small = default_calibration("digits")
    np.testing.assert_array_equal(np.load(small / "digits_calib.npy"), digits.calibration_inputs())
    np.testing.assert_array_equal(np.load(small / "digits_calib.npy"), np.load(REPO / "calib_data/digits/digits_calib.npy"))
    with np.load(default_calibration("digits32") / "digits32_calib.npz") as archive:
        np.testing.assert_array_equal(archive["input"], digits.calibration_inputs_large())
    assert default_calibration("pydoc-topics") is None and default_calibration(None) is None
    # drawn from train only: no calibration sample is a held-out test image
    test = {row.tobytes() for row in digits.load_split("test").inputs}
    assert not any(row.tobytes() in test for row in digits.calibration_inputs())


def test_digits_mobilenet_is_built_from_depthwise_separable_blocks():
    import torch
    from torch import nn

    from edgekit.models import build_model, get_spec, model_names

    assert "digits-mobilenet" in model_names()
    spec = get_spec("digits-mobilenet")
    assert spec.task["dataset"] == "digits32" and spec.input_spec(spec.config())[0].shape == (None, 1, 32, 32)
    model = build_model("digits-mobilenet").eval()
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    depthwise = [c for c in convs if c.groups == c.in_channels == c.out_channels and c.groups > 1]
    pointwise = [c for c in convs if c.kernel_size == (1, 1)]
    assert len(depthwise) == len(pointwise) == 5
    with torch.no_grad():
        assert model(torch.rand(2, 1, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match=r"\(N, 1, 32, 32\)"):
        model(torch.rand(2, 1, 8, 8))


def test_static_quantize_finds_its_calibration_data_from_any_folder(digits_checkpoint, tmp_path, monkeypatch):
    from edgekit.formats.artifacts import load_manifest
    from edgekit.quantize.api import quantize

    monkeypatch.chdir(tmp_path)  # nowhere near calib_data/
    out, _ = quantize(digits_checkpoint, "static", tmp_path / "q", "rpi4", formats=("onnx",))
    text = (Path(out) / "manifest.json").read_text()
    assert str(default_calibration("digits")) in text
    assert load_manifest(out)[1].files


def _row(variant, p50, ratio, interval=None, accuracy=0.98, gate="pass", fmt="onnx", size=100):
    from edgekit.pipeline.run import VariantRow

    return VariantRow(variant, fmt, "m", size, accuracy, p50, p50, 1.0, gate, 0.3, ratio, interval)


def test_not_paying_off_is_decided_on_the_interval():
    from edgekit.pipeline.verdict import slower_than_fp32

    assert not slower_than_fp32(_row("int8-a", 1, 1.3, (0.9, 1.8)))  # could be faster: undecided, no warning
    assert slower_than_fp32(_row("int8-a", 1, 1.3, (1.15, 1.45)))
    assert not slower_than_fp32(_row("int8-a", 1, 1.12, (1.05, 1.2)))  # slower, but not by 10 % for sure
    assert slower_than_fp32(_row("int8-a", 1, 1.2))  # no interval (one process): the point decides
    assert not slower_than_fp32(_row("fp32-onnx", 1, 3.0, (2.0, 4.0)))


def test_the_recommendation_is_the_fastest_int8_variant_within_the_accuracy_budget():
    from edgekit.pipeline.verdict import recommend

    rows = [
        _row("fp32-onnx", 1.0, 1.0, (1.0, 1.0)),
        _row("int8-fast-but-wrong", 0.2, 0.2, (0.18, 0.22), accuracy=0.95),
        _row("int8-failed-gate", 0.3, 0.3, (0.28, 0.32), gate="fail"),
        _row("int8-good", 0.4, 0.4, (0.35, 0.45)),
        _row("int8-slower", 0.5, 0.5, (0.45, 0.55)),
    ]
    best = recommend(rows, 0.98, 1.0)
    assert best["variant"] == "int8-good" and best["pays_off"] is True and best["p50_ratio_ci"] == [0.35, 0.45]
    assert best["accuracy_drop_points"] == pytest.approx(0.0)
    assert recommend(rows, 0.98, 5.0)["variant"] == "int8-fast-but-wrong"
    assert recommend(rows[:1], 0.98, 1.0) is None
    assert recommend([_row("int8-x", 0.9, 0.95, (0.8, 1.1))], 0.98, 1.0)["pays_off"] is False


def test_a_recommendation_that_is_not_faster_says_it_is_for_size_only():
    """Measured on a zoo ShuffleNet: the only int8 file within the fidelity budget was 8.65x fp32's
    p50; the line said "Recommended: ... 8.65x" next to a warning that int8 is not paying off."""
    from edgekit.pipeline.verdict import recommend, recommendation_line

    slow = recommend([_row("int8-slow", 8.65, 8.65, (6.7, 11.2))], 0.98, 1.0)
    line = recommendation_line(slow)
    assert slow["pays_off"] is False
    assert line.startswith("Recommended for its size only (not faster than fp32 here): int8-slow: 8.65x the p50")
    fast = recommendation_line(recommend([_row("int8-fast", 0.4, 0.4, (0.35, 0.45))], 0.98, 1.0))
    assert fast.startswith("Recommended: int8-fast: 0.40x the p50")
