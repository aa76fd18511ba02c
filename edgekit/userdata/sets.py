"""Calibration data: what ``--calib`` names, streamed in batches and checked against the model.

Three kinds of source, told apart by what the path holds (``calibration_kind``):

* arrays: a folder of ``.npy``/``.npz`` files (or one such file), model-ready samples (below);
* images: a folder of JPEG/PNG/BMP/WebP images, through the preprocessing ``--calib-preprocess``
  declares (``images.py``);
* text: a ``.txt`` file, one sample per line, through the model's tokenizer (``text.py``).

Every kind yields the same batches (a dict of input name -> array) and never holds more than one
batch in memory. ``settings`` (images, text) is what the samples depend on besides the files'
contents: the range cache keys on it.

``.npy`` files are read batch by batch from disk (not memory-mapped: mapped pages would count as
resident memory as the pass goes on), so a large set is never held in memory at once; every batch is
checked for shape, dtype and finite values before it reaches a quantizer.

Layout: for a single-input model every array is a block of samples (``.npy``, or any array in an
``.npz``). For a model with several inputs each ``.npz`` holds one block with one array per input
name, all with the same number of samples. Dynamic axes (sequence length) may differ from block to
block: variable-length samples go in separate blocks, one length per block. An input with no axes (a
sample rate, a threshold) holds one value in each block, given to every call.

Samples are counted along each input's sample axis (``sources/state_pairs.sample_axes``: axis 0,
or the axis carrying the batch name, e.g. axis 1 of a (layers, batch, hidden) state). A model that
carries state between calls (``sources/state_pairs.state_pairs``) is calibrated on streams: each
block is one stream, fed in order a call at a time, and its state inputs are optional in the block
(the initial state; zeros when absent): later calls get the state the model returned.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from edgekit.core.input_spec import InputSpec
from edgekit.core.errors import InputFileError, UsageError
from edgekit.formats.limits import calibration_files
from edgekit.userdata.images import IMAGE_SUFFIXES, image_files, is_image, scan_images
from edgekit.userdata.text import is_text

SUFFIXES = (".npy", ".npz")


@dataclass(frozen=True)
class CalibrationSet:
    files: tuple[Path, ...]
    specs: tuple[InputSpec, ...]
    batch_size: int = 32
    max_samples: int | None = None
    axes: tuple[tuple[str, int], ...] = ()  # sample axis by input name, where not 0
    streams: tuple[tuple[str, str], ...] = ()  # (state input, output fed back into it)
    settings = None  # model-ready arrays: nothing but the files' contents

    @property
    def state_inputs(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.streams)

    @property
    def spec(self) -> InputSpec:
        return self.specs[0]

    def feeds(self) -> Iterator[dict[str, np.ndarray]]:
        """Yield model-ready batches by input name, at most ``max_samples`` samples in all."""
        remaining = self.max_samples if self.max_samples is not None else float("inf")
        axes, states = dict(self.axes), self.state_inputs
        fixed = fixed_batch(self.specs, axes, states)  # a model that takes exactly that many rows a call gets them so
        step = fixed or (1 if states else self.batch_size)  # a stream goes a call at a time, in order
        for path in self.files:
            for block in _blocks(path, self.specs, states):
                length = _check_block(block, self.specs, path, axes, states)
                for start in range(0, length, step):
                    if remaining <= 0:
                        return
                    take = int(min(step, remaining, length - start))
                    if fixed and take < fixed:  # rows left over that cannot make a whole batch
                        break
                    feed = {}
                    for spec in self.specs:
                        if not spec.shape:  # no axes: the block's one value, every call
                            feed[spec.name] = _scalar(block[spec.name], spec, path)
                            continue
                        if spec.name in states:
                            if start == 0:  # a stream begins: its initial state (the model's output after)
                                feed[spec.name] = _initial_state(block, spec, axes.get(spec.name, 0), take, path)
                            continue
                        batch = _rows(block[spec.name], axes.get(spec.name, 0), start, take, spec.dtype)
                        _check_values(batch, spec, path)
                        feed[spec.name] = batch
                    remaining -= take
                    yield feed

    def batches(self) -> Iterator[np.ndarray]:
        """Single-input models: the batches as plain arrays."""
        name = self.spec.name
        for feed in self.feeds():
            yield feed[name]

    def count(self) -> int:
        axes, states = dict(self.axes), self.state_inputs
        total = 0
        for path in self.files:
            for block in _blocks(path, self.specs, states):
                name = next(s.name for s in self.specs if s.shape and s.name not in states)
                total += block[name].shape[axes.get(name, 0)]
        return total if self.max_samples is None else min(total, self.max_samples)


def _rows(array, axis: int, start: int, take: int, dtype) -> np.ndarray:
    """Samples ``start`` to ``start + take`` along ``axis`` (a copy)."""
    if axis == 0:
        return np.array(array[start : start + take], dtype=dtype, copy=True)
    if isinstance(array, NpyFile):  # read from disk as it goes, never the whole file
        return array.along(axis, start, start + take).astype(dtype, copy=False)
    return np.array(array[(slice(None),) * axis + (slice(start, start + take),)], dtype=dtype, copy=True)


def _scalar(value, spec: InputSpec, path: Path) -> np.ndarray:
    """The one value of an input with no axes: a 0-d array, or a row of equal values (one per call)."""
    array = np.asarray(value[()] if np.ndim(value) == 0 else value[:])
    if array.size < 1 or (array.ndim and not (array == array.reshape(-1)[0]).all()):
        raise InputFileError(f"calibration data {path}: input {spec.name!r} takes one value (no axes); the file "
                             f"holds {array.size} different ones (shape {tuple(array.shape)})")
    scalar = np.array(array.reshape(-1)[0], dtype=spec.dtype)
    _check_values(scalar.reshape(1), spec, path)
    return scalar


def _initial_state(block, spec: InputSpec, axis: int, batch: int, path: Path) -> np.ndarray:
    """The state a stream starts from: the block's array for it, else zeros (``batch`` samples)."""
    free = spec.shape[axis] is None  # a fixed shape says the batch itself
    if spec.name in block:
        state = np.array(block[spec.name][:], dtype=spec.dtype, copy=True)
        if free and state.shape[axis] != batch:
            raise InputFileError(f"calibration data {path}: state input {spec.name!r} holds {state.shape[axis]} "
                                 f"sample(s) along axis {axis}; each stream is fed {batch} at a time")
        _check_values(state, spec, path)
        return state
    shape = list(spec.concrete_shape())
    if free:
        shape[axis] = batch
    return np.zeros(shape, dtype=spec.dtype)


def calibration_kind(path: Path) -> str:
    """``arrays`` | ``images`` | ``text``: what ``path`` holds (nothing is decoded)."""
    if path.is_file():
        if path.suffix in SUFFIXES:
            return "arrays"
        if is_text(path):
            return "text"
        if is_image(path):
            return "images"
        raise InputFileError(f"calibration file {path} must be .npy or .npz arrays, a .txt file (one text per line) "
                             f"or an image ({', '.join(IMAGE_SUFFIXES)})")
    if not path.is_dir():
        raise InputFileError(f"calibration data not found: {path}")

    if calibration_files(path, SUFFIXES):
        return "arrays"
    found, foreign = scan_images(path)
    if found:
        image_files(path)  # refuses a folder that mixes images with other files
        return "images"
    what = f"{foreign.relative_to(path)} is neither" if foreign is not None else "it is empty"
    raise InputFileError(f"calibration folder {path} holds no .npy or .npz files and no images "
                         f"({', '.join(IMAGE_SUFFIXES)}; {what}); text calibration is one .txt file, named itself")


def open_calibration(
    path: str | Path,
    spec: InputSpec | tuple[InputSpec, ...],
    batch_size: int = 32,
    max_samples: int | None = None,
    *,
    preprocess=None,
    tokenizer: str | Path | None = None,
    model_tokenizer: str | Path | None = None,
    max_length: int | None = None,
    axes: dict[str, int] | None = None,
    streams: tuple[tuple[str, str], ...] = (),
):
    """Open what ``path`` holds (``calibration_kind``) and check the first batch now.

    ``preprocess``: how images become model inputs (``--calib-preprocess`` text, a TOML path or an
    ``ImagePreprocess``). ``tokenizer``: the one ``--tokenizer`` names; ``model_tokenizer``: the one
    the model brings (an hf: folder's), used when none is named; ``max_length``: the model's
    longest sequence (its position table). Each is refused for a kind of data that does not use it.
    ``axes``: each input's sample axis where not 0; ``streams``: (state input, output) pairs of a
    stateful model (arrays only: each block is one stream)."""
    if batch_size < 1:
        raise UsageError(f"calibration batch size must be >= 1, got {batch_size}")
    if max_samples is not None and max_samples < 1:
        raise UsageError(f"calibration sample limit must be >= 1, got {max_samples}")
    specs = (spec,) if isinstance(spec, InputSpec) else tuple(spec)
    path = Path(path)
    kind = calibration_kind(path)
    if preprocess is not None and kind != "images":
        raise UsageError(f"--calib-preprocess applies to images; calibration data {path} is {kind}")
    if tokenizer is not None and kind != "text":
        raise UsageError(f"--tokenizer applies to text calibration (a .txt file); calibration data {path} is {kind}")
    if kind == "images":
        from edgekit.userdata.images import open_images

        calib = open_images(path, specs, preprocess, batch_size, max_samples)
    elif kind == "text":
        from edgekit.userdata.text import open_text

        chosen = tokenizer if tokenizer is not None else model_tokenizer
        calib = open_text(path, specs, Path(chosen) if chosen is not None else None, batch_size, max_samples,
                          max_length)
    else:
        from edgekit.formats.limits import calibration_files

        files = (path,) if path.is_file() else calibration_files(path, SUFFIXES)
        calib = CalibrationSet(files, specs, batch_size, max_samples,
                               tuple(sorted((n, a) for n, a in (axes or {}).items() if a)), tuple(streams))
    if next(calib.feeds(), None) is None:
        raise InputFileError(f"calibration data {path} holds no samples")
    return calib


def fixed_batch(specs: tuple[InputSpec, ...], axes: dict[str, int] | None = None,
                states: frozenset[str] = frozenset()) -> int | None:
    """The batch size the model fixes, when every input declares the same fixed size on its sample
    axis (the ONNX model zoo's 1x3x224x224): calibration files still hold any number of samples, fed
    that many at a time. None when the batch axis is free."""
    axes = axes or {}
    sizes = {spec.shape[axes.get(spec.name, 0)] for spec in specs if spec.shape and spec.name not in states}
    return sizes.pop() if len(sizes) == 1 and None not in sizes else None


def _blocks(path: Path, specs: tuple[InputSpec, ...], states: frozenset[str] = frozenset()) -> Iterator[dict[str, np.ndarray]]:
    """Blocks of samples by input name (arrays stay memory-mapped / lazily loaded); a state input
    is in a block only when the file has it."""
    names = [s.name for s in specs]
    needed = [n for n in names if n not in states]
    try:
        if path.suffix == ".npy":
            if len(needed) > 1:
                raise InputFileError(
                    f"calibration file {path}: a model with several inputs ({', '.join(names)}) "
                    "takes .npz files holding one array per input name"
                )
            yield {needed[0]: NpyFile(path)}
            return
        _check_npz(path)
        with np.load(path, allow_pickle=False) as archive:
            keys = list(archive.files)
            if set(needed) <= set(keys):
                yield {name: archive[name] for name in names if name in keys}
            elif len(needed) == 1:
                for key in keys:
                    yield {needed[0]: archive[key]}
            else:
                missing = sorted(set(needed) - set(keys))
                raise InputFileError(f"calibration file {path} lacks array(s) for input(s): {', '.join(missing)}")
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputFileError(f"cannot read calibration file {path}: {str(exc).splitlines()[0]}") from None


NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
MAX_NPZ_MEMBERS = 4096
MEMORY_SHARE = 0.5  # one member is decompressed whole into memory


def _check_npz(path: Path) -> None:
    """``path`` is a zip of .npy members (by its first bytes and its directory), at most
    ``MAX_NPZ_MEMBERS`` of them, none declaring more bytes than half the memory available."""
    import psutil

    with open(path, "rb") as fh:
        head = fh.read(8)
    if not head.startswith(ZIP_MAGIC):
        what = "a .npy array" if head.startswith(NPY_MAGIC) else "not an .npz archive (a zip of .npy arrays) by its first bytes"
        raise InputFileError(f"cannot read calibration file {path}: it is named .npz but is {what}")
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        if len(members) > MAX_NPZ_MEMBERS:
            raise InputFileError(f"cannot read calibration file {path}: it holds {len(members):,} arrays (at most {MAX_NPZ_MEMBERS:,})")
        available = psutil.virtual_memory().available
        for member in members:
            if not member.filename.endswith(".npy"):
                raise InputFileError(f"cannot read calibration file {path}: it holds {member.filename[:80]!r}, not a .npy array")
            if member.file_size > MEMORY_SHARE * available:
                raise InputFileError(f"cannot read calibration file {path}: array {member.filename[:80]!r} unpacks to "
                                     f"{member.file_size / 2**30:.1f} GiB; this machine has {available / 2**30:.1f} GiB available")


def _check_block(block: dict[str, np.ndarray], specs: tuple[InputSpec, ...], path: Path,
                 axes: dict[str, int] | None = None, states: frozenset[str] = frozenset()) -> int:
    axes = axes or {}
    counts = {}
    fixed = fixed_batch(specs, axes, states)
    for spec in specs:
        if spec.name not in block or not spec.shape:  # no axes: one value, read by _scalar
            continue
        axis = axes.get(spec.name, 0)
        state = spec.name in states  # a stream's initial state: its own batch, not counted
        _check(block[spec.name], spec, path, samples_axis=fixed is not None and not state, axis=axis)
        if not state:
            counts[spec.name] = block[spec.name].shape[axis]
    if len(set(counts.values())) > 1:
        said = ", ".join(f"{name} {count} (axis {axes.get(name, 0)})" for name, count in counts.items())
        raise InputFileError(f"calibration data {path}: inputs have different sample counts ({said}); "
                             "a state or other input whose samples are not on axis 0 needs --sample-axis NAME=AXIS")
    return next(iter(counts.values()))


def _check(array: np.ndarray, spec: InputSpec, path: Path, samples_axis: bool = False, axis: int = 0) -> None:
    """``samples_axis``: the model fixes its batch size, so ``axis`` counts samples (any number)."""
    sample_axis = axis
    expected = spec.shape
    label = f"model input {spec.name!r}"
    if array.ndim != len(expected):
        raise InputFileError(
            f"calibration data {path} has shape {tuple(array.shape)}; {label} expects {_layout(expected)}"
        )
    for axis, (got, want) in enumerate(zip(array.shape, expected)):
        if want is not None and got != want and not (axis == sample_axis and samples_axis and got > want):
            raise InputFileError(
                f"calibration data {path} has shape {tuple(array.shape)}; {label} "
                f"expects {_layout(expected)} (axis {axis} differs)"
            )
    if array.shape[sample_axis] == 0:
        raise InputFileError(f"calibration data {path} holds zero samples")
    kind = np.dtype(spec.dtype).kind
    if kind == "f" and array.dtype.kind not in "fiu":
        raise InputFileError(f"calibration data {path} has dtype {array.dtype}; expected numbers ({spec.dtype})")
    if kind in "iu" and array.dtype.kind not in "iu":
        raise InputFileError(f"calibration data {path} has dtype {array.dtype}; expected integers ({spec.dtype})")


def _check_values(batch: np.ndarray, spec: InputSpec, path: Path) -> None:
    if batch.dtype.kind == "f" and not np.isfinite(batch).all():
        raise InputFileError(f"calibration data {path} contains NaN or Inf values")
    if spec.value_range is not None and batch.dtype.kind in "iu" and batch.size:
        low, high = spec.value_range
        a_min, a_max = int(batch.min()), int(batch.max())
        if a_min < low or a_max >= high:
            raise InputFileError(
                f"calibration data {path}: input {spec.name!r} holds values in [{a_min}, {a_max}], "
                f"outside [{int(low)}, {int(high)})"
            )


class NpyFile:
    """A .npy array read slice by slice with plain file reads (C order, no pickle)."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            self.header = fh.tell()
        if dtype.hasobject:
            raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
        if fortran and len(shape) > 1:
            raise ValueError("Fortran-ordered arrays are not supported; save with np.save of a C-ordered array")
        self.shape, self.dtype, self.ndim = tuple(shape), dtype, len(shape)
        row = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
        self.row_bytes = row * dtype.itemsize
        expected = self.header + (shape[0] if shape else 1) * self.row_bytes
        if path.stat().st_size < expected:
            raise ValueError(f"file is truncated ({path.stat().st_size} of {expected} bytes)")

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, _ = key.indices(len(self))
        count = max(0, stop - start)
        with open(self.path, "rb") as fh:
            fh.seek(self.header + start * self.row_bytes)
            data = np.fromfile(fh, dtype=self.dtype, count=count * self.row_bytes // max(self.dtype.itemsize, 1))
        return data.reshape((count, *self.shape[1:]))

    def along(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Indices ``start:stop`` of ``axis``: one contiguous read per index of the axes before it
        (a (C, N, F) file read along N: C reads of (stop - start) * F values)."""
        size = self.shape[axis]
        start, stop = min(start, size), min(stop, size)
        count = max(0, stop - start)
        outer = int(np.prod(self.shape[:axis], dtype=np.int64))
        inner = int(np.prod(self.shape[axis + 1:], dtype=np.int64))
        out = np.empty((outer, count * inner), dtype=self.dtype)
        with open(self.path, "rb") as fh:
            for index in range(outer):
                fh.seek(self.header + (index * size + start) * inner * self.dtype.itemsize)
                out[index] = np.fromfile(fh, dtype=self.dtype, count=count * inner)
        return out.reshape((*self.shape[:axis], count, *self.shape[axis + 1:]))


def _layout(shape) -> str:
    return "(" + ", ".join("N" if d is None else str(d) for d in shape) + ")"
