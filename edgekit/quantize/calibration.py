"""Calibration data: a folder of .npy/.npz files streamed in batches and checked against the model.

Files are memory-mapped (``.npy``) so a large set is never held in memory at once; every batch is
checked for shape, dtype and finite values before it reaches a quantizer.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from edgekit.artifacts import InputSpec
from edgekit.errors import InputFileError, UsageError

SUFFIXES = (".npy", ".npz")


@dataclass(frozen=True)
class CalibrationSet:
    files: tuple[Path, ...]
    spec: InputSpec
    batch_size: int = 32
    max_samples: int | None = None

    def batches(self) -> Iterator[np.ndarray]:
        """Yield model-ready float batches, at most ``max_samples`` samples in all."""
        remaining = self.max_samples if self.max_samples is not None else float("inf")
        for path in self.files:
            for array in _arrays(path):
                _check(array, self.spec, path)
                for start in range(0, len(array), self.batch_size):
                    if remaining <= 0:
                        return
                    take = int(min(self.batch_size, remaining, len(array) - start))
                    batch = np.array(array[start : start + take], dtype=self.spec.dtype, copy=True)
                    if not np.isfinite(batch).all():
                        raise InputFileError(f"calibration data {path} contains NaN or Inf values")
                    remaining -= take
                    yield batch

    def count(self) -> int:
        total = sum(len(a) for p in self.files for a in _arrays(p))
        return total if self.max_samples is None else min(total, self.max_samples)


def open_calibration(path: str | Path, spec: InputSpec, batch_size: int = 32, max_samples: int | None = None) -> CalibrationSet:
    """Find the calibration files under ``path`` (a file or a folder) and check the first batch now."""
    if batch_size < 1:
        raise UsageError(f"calibration batch size must be >= 1, got {batch_size}")
    if max_samples is not None and max_samples < 1:
        raise UsageError(f"calibration sample limit must be >= 1, got {max_samples}")
    path = Path(path)
    if path.is_dir():
        files = tuple(sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file()))
        if not files:
            raise InputFileError(f"calibration folder {path} holds no .npy or .npz files")
    elif path.is_file():
        if path.suffix not in SUFFIXES:
            raise InputFileError(f"calibration file {path} must be .npy or .npz")
        files = (path,)
    else:
        raise InputFileError(f"calibration data not found: {path}")
    calib = CalibrationSet(files, spec, batch_size, max_samples)
    if next(calib.batches(), None) is None:
        raise InputFileError(f"calibration data {path} holds no samples")
    return calib


def _arrays(path: Path) -> Iterator[np.ndarray]:
    try:
        if path.suffix == ".npy":
            yield np.load(path, mmap_mode="r", allow_pickle=False)
            return
        with np.load(path, allow_pickle=False) as archive:
            for name in archive.files:
                yield archive[name]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputFileError(f"cannot read calibration file {path}: {str(exc).splitlines()[0]}") from None


def _check(array: np.ndarray, spec: InputSpec, path: Path) -> None:
    expected = spec.shape
    if array.ndim != len(expected):
        raise InputFileError(
            f"calibration data {path} has shape {tuple(array.shape)}; model input {spec.name!r} "
            f"expects {_layout(expected)}"
        )
    for axis, (got, want) in enumerate(zip(array.shape, expected)):
        if want is not None and got != want:
            raise InputFileError(
                f"calibration data {path} has shape {tuple(array.shape)}; model input {spec.name!r} "
                f"expects {_layout(expected)} (axis {axis} differs)"
            )
    if len(array) == 0:
        raise InputFileError(f"calibration data {path} holds zero samples")
    kind = np.dtype(spec.dtype).kind
    if kind == "f" and array.dtype.kind not in "fiu":
        raise InputFileError(f"calibration data {path} has dtype {array.dtype}; expected numbers ({spec.dtype})")
    if kind in "iu" and array.dtype.kind not in "iu":
        raise InputFileError(f"calibration data {path} has dtype {array.dtype}; expected integers ({spec.dtype})")


def _layout(shape) -> str:
    return "(" + ", ".join("N" if d is None else str(d) for d in shape) + ")"
