"""A TorchScript file (``torch.jit.save``'s zip archive, ``.pt``/``.ts``) as a model source.

Loading one runs the TorchScript code it carries (its ``code/`` members), so the user is told so
every time. Its inputs are not recorded in the file: they are given with ``--input-shape``. A
``.pt`` that is a zip archive without TorchScript code (a ``torch.save``'d state dict or pickled
model) is refused naming what to give instead.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.fileio import sha256_file
from edgekit.formats.torchscript_backend import check_file, load_torchscript

SUFFIXES = (".pt", ".ts", ".pth", ".jit", ".torchscript")
RUNS_CODE = ("loading a TorchScript file runs the TorchScript code inside it: use only files from a source you "
             "trust")
MAX_MEMBERS = 100_000


def is_torchscript_path(path: Path) -> bool:
    return path.suffix.lower() in SUFFIXES and path.is_file()


def check_torchscript_archive(path: Path) -> None:
    """``path`` is a zip archive holding TorchScript code, else one line saying what it is."""
    check_file(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputFileError(f"{path} is not a loadable TorchScript model ({exc})") from None
    if len(names) > MAX_MEMBERS:
        raise InputFileError(f"{path} holds {len(names):,} members (a TorchScript file holds far fewer)")
    if not any("/code/" in f"/{name}" for name in names):
        raise UsageError(f"{path} is a PyTorch archive without TorchScript code (a torch.save'd state dict or "
                         "pickled model): give the model's code as package.module:factory with --state-dict "
                         f"{path.name}")


def torchscript_model_info(path: Path) -> tuple[dict, dict]:
    """(the manifest's "model", the parent reference) of a TorchScript file, with the warning that
    loading it runs its code."""
    digest = sha256_file(path)
    about = {"name": f"torchscript:{path.name[:120]}", "source": str(path.resolve()),
             "weights": {"from": "torchscript", "sha256": digest, "warnings": [RUNS_CODE]}}
    return about, {"path": str(path.resolve()), "kind": "torchscript", "sha256": digest}


def load(path: Path):
    return load_torchscript(path)
