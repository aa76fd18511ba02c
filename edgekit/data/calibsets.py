"""Calibration sets shipped inside the package, so static int8 works from any folder.

One folder per dataset under ``edgekit/data/calib/``, in the layout ``calib_data/`` documents
(``.npy``/``.npz`` blocks of model-ready samples, first axis = samples). Every set is drawn from
the dataset's **train** split, never from the held-out ``val``/``test`` splits.
Regenerate them with ``python calib_data/make_digits.py``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

# dataset name -> folder under edgekit/data/calib
PACKAGED = {"digits": "digits", "digits32": "digits32"}


def default_calibration(dataset: str | None) -> Path | None:
    """The packaged calibration folder for ``dataset``, or None when edgekit ships none for it."""
    if dataset not in PACKAGED:
        return None
    path = Path(str(resources.files("edgekit.data").joinpath("calib", PACKAGED[dataset])))
    return path if path.is_dir() else None
