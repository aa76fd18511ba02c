"""Regenerate calib_data/digits/digits_calib.npy from the dataset carried by edgekit.

    python calib_data/make_digits.py
"""

from pathlib import Path

import numpy as np

from edgekit.data.digits import calibration_inputs
from edgekit.fileio import atomic_path

if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "digits" / "digits_calib.npy"
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, calibration_inputs(), allow_pickle=False)
    print(f"wrote {out}")
