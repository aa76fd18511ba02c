"""Resource limits, checked before work starts: does a model fit the board's RAM, is a
calibration set unreasonably large. One place for the rules; the stages call it.

Model memory on the board is estimated as the model's bytes (the file, or a float model's
parameters) plus the resident footprint of the runtime that runs it: ``onnxruntime`` 64 MiB,
``torch`` (TorchScript) 256 MiB, round figures near the peak RSS ``edgekit bench`` measures for
the tiny digits model on x86-64 (about 70 MiB and 240 MiB). A model whose estimate exceeds the
target's ``cpu.ram_mb`` is refused with a ``ResourceLimitError`` (exit code 2); ``force`` turns the
refusal into a warning that the caller shows and records.

A calibration set whose files total more than ``CALIB_WARN_BYTES`` (1 GiB) on disk gets a warning:
calibration streams it in batches, so memory stays flat, but every sample is run through the model
(use ``--calib-max-samples``, or a few hundred representative samples, which is what static int8
needs).
"""

from __future__ import annotations

import os
from pathlib import Path

from edgekit.core.errors import UsageError, InputFileError
from edgekit.core.targets import Target
from edgekit.models import build_model

MIB = 1024 * 1024
TORCH_FOOTPRINT_MB = 256.0  # a checkpoint runs in torch; model formats give their own (edgekit.formats)
CALIB_WARN_BYTES = 1 << 30
CALIB_SUFFIXES = (".npy", ".npz")
# Counted with a scan that stops at the limit, before any per-file or per-line work starts: past
# these a calibration set is a mistake (a whole photo library, a corpus dump), and the work grows with it.
MAX_CALIB_FILES = 100_000
MAX_CALIB_LINES = 1_000_000  # --calib-max-samples N stops the count at N instead


class ResourceLimitError(UsageError):
    """The work would not fit where it has to run (exit code 2, like any other bad input)."""


# edgekit-run and its libraries resident (the digits models peak at ~7 MiB in all, measured with VmHWM)
NATIVE_FOOTPRINT_MB = 8.0


def model_memory_mb(model_bytes: int, fmt, native: bool = False) -> float:
    """Estimated resident memory (MiB) of running a model of ``model_bytes`` with ``fmt``'s runtime
    (``native``: the native runner, edgekit.native, instead of the format's Python runtime).
    ``fmt``: a format entry (``edgekit.formats.Format``), or a name (``checkpoint``: torch)."""
    return model_bytes / MIB + (NATIVE_FOOTPRINT_MB if native else _runtime(fmt)[1])


def _runtime(fmt) -> tuple[str, float]:
    """(the distribution that runs ``fmt`` on the board, its resident footprint in MiB)."""
    if isinstance(fmt, str):
        from edgekit import formats

        if fmt not in formats.names():  # a checkpoint runs in torch
            return "torch", TORCH_FOOTPRINT_MB
        fmt = formats.get(fmt)
    return fmt.board.runtime, fmt.board.footprint_mb


def check_model_fits(target: Target, model_bytes: int, fmt, what: str, force: bool = False,
                     native: bool = False) -> str | None:
    """None when the model fits ``target``'s RAM; else a warning (``force``) or ResourceLimitError."""
    return check_fits(target.ram_mb, target.name, model_bytes, fmt, what, force, native)


def check_fits(ram_mb: int, target_name: str, model_bytes: int, fmt, what: str, force: bool = False,
               native: bool = False) -> str | None:
    """``check_model_fits`` from the bare facts (a bundle records its target's ``ram_mb``)."""
    runtime, footprint = ("edgekit-run", NATIVE_FOOTPRINT_MB) if native else _runtime(fmt)
    need = model_bytes / MIB + footprint
    if need <= ram_mb:
        return None
    message = (
        f"{what} needs about {need:,.0f} MB of RAM ({_size(model_bytes)} model + "
        f"~{footprint:.0f} MB "
        f"for {runtime}), more than the {ram_mb:,} MB RAM of target {target_name!r}"
    )
    if force:
        return f"{message}; going ahead because of --force"
    raise ResourceLimitError(f"{message}; quantize it, pick a bigger board, or pass --force to go ahead anyway")


def float_parameter_bytes(model_name: str, config: dict | None = None) -> int:
    """Bytes of a zoo model's parameters and buffers in float32 (what an fp32 export carries)."""
    model = build_model(model_name, config)
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * 4 for t in tensors if t.is_floating_point())


def calibration_bytes(path: str | os.PathLike) -> int:
    """Total size on disk of the calibration files under ``path`` (a file or a folder)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in calibration_files(path))
    return 0


def calibration_files(folder: Path, suffixes: tuple[str, ...] = CALIB_SUFFIXES) -> tuple[Path, ...]:
    """The files of ``folder`` with one of ``suffixes``, sorted; refused once the folder is seen to
    hold more than ``MAX_CALIB_FILES`` entries (the scan stops there)."""
    found: list[Path] = []
    seen = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_CALIB_FILES:
                    raise InputFileError(f"calibration folder {folder} holds over {MAX_CALIB_FILES:,} entries; "
                                         "calibrate on a folder of a few hundred representative samples")
                if entry.name.endswith(suffixes) and entry.is_file():
                    found.append(Path(entry.path))
    except OSError as exc:
        raise InputFileError(f"cannot read calibration folder {folder}: {exc.strerror or exc}") from None
    return tuple(sorted(found))


def check_calibration_size(path: str | os.PathLike, limit: int = CALIB_WARN_BYTES) -> str | None:
    """A warning when the calibration set is huge (more than ``limit`` bytes on disk), else None."""
    total = calibration_bytes(path)
    if total <= limit:
        return None
    return (
        f"calibration data {path} is {_size(total)} on disk (over {_size(limit)}): every sample goes through the "
        "model, which takes long; a few hundred representative samples are enough (--calib-max-samples N)"
    )


def _size(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB"
