"""The one module that talks to ``torch.jit`` (deprecated in favour of torch.export).

Trace/freeze/save/load live here so a torch.export/ExecuTorch backend can replace them later.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Iterator
from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.fileio import loads_json, signature_kind

PROVENANCE_KEY = "edgekit.json"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        try:
            from torch.jit import TracerWarning

            warnings.simplefilter("ignore", TracerWarning)
        except ImportError:  # pragma: no cover - older/newer torch
            pass
        yield


def trace(model, example_inputs: tuple, freeze: bool = True):
    import torch

    with quiet(), torch.no_grad():
        traced = torch.jit.trace(model.eval(), example_inputs, check_trace=False)
        return torch.jit.freeze(traced) if freeze else traced


def script(model, freeze: bool = True, label: str = "model"):
    """``torch.jit.script`` (keeps data-dependent control flow that tracing would bake in)."""
    import torch


    try:
        with quiet():
            scripted = torch.jit.script(model.eval())
    except Exception as exc:  # noqa: BLE001 - the TorchScript frontend raises many types
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        reason = lines[0] if lines else type(exc).__name__
        raise UsageError(f"cannot script {label}: {reason[:200]}; export with --torchscript-mode trace") from None
    with quiet():
        return torch.jit.freeze(scripted) if freeze else scripted


def save(module, path: Path, provenance: dict) -> None:
    import io

    import torch

    # Into memory first: torch's C++ file writer aborts the whole process (std::terminate in its
    # destructor) when the disk fills up; a Python write reports ENOSPC as the OSError it is.
    buffer = io.BytesIO()
    with quiet():
        torch.jit.save(module, buffer, _extra_files={PROVENANCE_KEY: json.dumps(provenance, sort_keys=True)})
    Path(path).write_bytes(buffer.getbuffer())


def load_torchscript(path, engine: str | None = None):
    """Load a TorchScript file on CPU; ``engine`` must be set before int8 weights are unpacked."""
    import torch


    check_file(path)
    if engine:
        torch.backends.quantized.engine = engine
    try:
        with quiet():
            module = torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputFileError(f"{path} is not a loadable TorchScript model ({first})") from None
    return module.eval()


def check_file(path) -> None:
    """A TorchScript file is a zip archive: anything else (a GGUF, a pickle, an image named .pt) is
    refused naming what it is before torch's reader is handed it."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
        other = signature_kind(path)
    except OSError as exc:
        raise InputFileError(f"cannot read TorchScript model {path}: {exc.strerror or exc}") from None
    if head != b"PK\x03\x04":
        shown = f"it is {other}" if other else "its first bytes are not a zip archive's"
        raise InputFileError(f"{path} is not a loadable TorchScript model: {shown}")


def read_provenance(path) -> dict:
    import torch

    check_file(path)
    extra = {PROVENANCE_KEY: ""}
    with quiet():
        torch.jit.load(str(path), map_location="cpu", _extra_files=extra)

    return loads_json(extra[PROVENANCE_KEY] or "{}", f"provenance of {path}")
