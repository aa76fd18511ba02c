"""Read PyTorch files without ever running code from them.

``torch.load(weights_only=True)`` unpickles tensors, containers and plain numbers only; a file
that would build any other object (a ``__reduce__`` payload calling ``os.system``, a class from
some module) is refused before anything in it runs. This module turns torch's refusal, whose
text suggests retrying with ``weights_only=False`` (exactly what a hostile file wants), into one
line of our own that names what was refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from edgekit.core.errors import InputFileError, first_line
from edgekit.core.fileio import signature_kind

_GLOBAL = re.compile(r"GLOBAL ([\w.<>]+)")
_OPERAND = re.compile(r"Unsupported operand (\d+)")


def refused_content(message: str) -> str:
    """What torch's weights-only unpickler refused, in a few words (never its retry advice)."""
    found = _GLOBAL.search(message)
    if found:
        return f"unsupported global {found.group(1)}"
    found = _OPERAND.search(message)
    if found:
        return f"unsupported pickle opcode {found.group(1)}"
    return "content other than plain tensors"


def check_pytorch_file(path: Path, what: str = "checkpoint") -> None:
    """``path`` starts as a PyTorch file does (a zip archive, or a legacy pickle) before torch reads
    it; a GGUF, safetensors file, image or script is refused naming what its first bytes show."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
        other = signature_kind(path)
    except OSError as exc:
        raise InputFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if head.startswith(b"PK\x03\x04") or other == "a Python pickle":
        return
    if other is not None:
        raise InputFileError(f"{what} {path} is {other}, not a PyTorch file")
    raise InputFileError(f"{what} {path} is corrupt or truncated, or not a PyTorch file "
                         "(its first bytes are neither a zip archive nor a pickle)")


def load_plain(path: str | Path, what: str = "checkpoint") -> Any:
    """``torch.load(path, weights_only=True)`` on CPU, with one-line InputFileErrors.

    Missing file, truncated or random bytes, or pickled code/objects: each is an InputFileError
    naming ``path``. A pickle payload is never executed.
    """
    import pickle
    import warnings

    import torch

    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{what} not found: {path}")
    check_pytorch_file(path, what)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on pickle protocols is not the user's business
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if _GLOBAL.search(str(exc)):  # a reference to code: a class or function to call while unpickling
            raise InputFileError(
                f"refusing to load {path}: it holds pickled objects or code ({refused_content(str(exc))}), "
                "not plain tensors; edgekit never unpickles code"
            ) from None
        detail = refused_content(str(exc)) if "Weights only load failed" in str(exc) else first_line(exc, limit=160)
        raise InputFileError(f"{what} {path} is corrupt or truncated, or not a plain-tensor PyTorch file ({detail})") from None
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch raises many types for damaged files (KeyError, UnicodeDecodeError...)
        raise InputFileError(f"{what} {path} is corrupt or truncated, or not a PyTorch file ({first_line(exc, limit=160)})") from None
