"""The 8x8 handwritten-digits dataset (UCI, as shipped by scikit-learn), carried in this package.

Splits are fixed by a seeded permutation so every stage agrees on which samples are held out:
``test`` (360) is only ever used for reported accuracy, ``val`` (180) picks the best checkpoint,
``train`` is the rest. The calibration set in ``calib_data/digits`` is drawn from ``train``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

SPLIT_SEED = 20240607
TEST_SIZE = 360
VAL_SIZE = 180
CALIB_SIZE = 256
SPLITS = ("train", "val", "test")
INPUT_SHAPE = (1, 8, 8)
NUM_CLASSES = 10


@dataclass(frozen=True)
class ArraySplit:
    """Model-ready inputs (float32, N x 1 x 8 x 8, scaled to [0, 1]) and int64 labels."""

    inputs: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


@lru_cache(maxsize=1)
def _raw() -> tuple[np.ndarray, np.ndarray]:
    with resources.files("edgekit.data").joinpath("digits.npz").open("rb") as fh:
        with np.load(fh, allow_pickle=False) as data:
            return data["images"].copy(), data["labels"].copy()


def preprocess(images: np.ndarray) -> np.ndarray:
    """uint8 pixel counts 0..16 -> float32 in [0, 1] with a channel axis."""
    return (images.astype(np.float32) / 16.0)[:, None, :, :]


def split_indices() -> dict[str, np.ndarray]:
    images, _ = _raw()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(images))
    return {
        "test": order[:TEST_SIZE],
        "val": order[TEST_SIZE : TEST_SIZE + VAL_SIZE],
        "train": order[TEST_SIZE + VAL_SIZE :],
    }


def load_split(name: str) -> ArraySplit:
    if name not in SPLITS:
        raise ValueError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
    images, labels = _raw()
    idx = split_indices()[name]
    return ArraySplit(preprocess(images[idx]), labels[idx].astype(np.int64))


def calibration_inputs() -> np.ndarray:
    """The calibration samples: the first CALIB_SIZE of the (already shuffled) train split."""
    return load_split("train").inputs[:CALIB_SIZE]


# -- the same digits at an edge camera's resolution ------------------------------------------------

LARGE_SIZE = 32
LARGE_INPUT_SHAPE = (1, LARGE_SIZE, LARGE_SIZE)


def _interpolation_matrix(size_in: int, size_out: int) -> np.ndarray:
    """(size_out, size_in) weights of 1-D linear interpolation, pixel centres aligned
    (``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``)."""
    scale = size_in / size_out
    centres = np.clip((np.arange(size_out) + 0.5) * scale - 0.5, 0, size_in - 1)
    lo = np.floor(centres).astype(int)
    hi = np.minimum(lo + 1, size_in - 1)
    frac = centres - lo
    matrix = np.zeros((size_out, size_in), dtype=np.float64)
    matrix[np.arange(size_out), lo] += 1 - frac
    matrix[np.arange(size_out), hi] += frac
    return matrix


def upscale(inputs: np.ndarray, size: int = LARGE_SIZE) -> np.ndarray:
    """(N, 1, 8, 8) -> (N, 1, size, size) float32 by bilinear interpolation (deterministic)."""
    m = _interpolation_matrix(inputs.shape[-1], size)
    return np.einsum("oi,ncij,pj->ncop", m, inputs.astype(np.float64), m).astype(np.float32)


def load_split_large(name: str) -> ArraySplit:
    """A split of the digits upscaled to 32 x 32 (the same samples and labels as ``load_split``)."""
    split = load_split(name)
    return ArraySplit(upscale(split.inputs), split.labels)


def calibration_inputs_large() -> np.ndarray:
    return upscale(calibration_inputs())
