"""Regenerate the digits calibration sets from the dataset carried by edgekit (deterministic: the same arrays every time).

    python calib_data/make_digits.py

Writes the documented example ``calib_data/digits/digits_calib.npy`` and the sets that ship inside
the package (``edgekit/data/calib/``): the 8x8 digits (``digits-cnn``) and the digits upscaled to
32x32 (``digits-mobilenet``, the pipeline's default model).
"""

from pathlib import Path

import numpy as np

from edgekit.data.digits import calibration_inputs, calibration_inputs_large
from edgekit.core.fileio import atomic_path

HERE = Path(__file__).resolve().parent
PACKAGED = HERE.parent / "edgekit" / "data" / "calib"


def save_npy(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
    print(f"wrote {path}")


def save_npz(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, input=array)
    print(f"wrote {path}")


if __name__ == "__main__":
    small = calibration_inputs()
    save_npy(HERE / "digits" / "digits_calib.npy", small)
    save_npy(PACKAGED / "digits" / "digits_calib.npy", small)
    save_npz(PACKAGED / "digits32" / "digits32_calib.npz", calibration_inputs_large())
