"""A TorchScript file (``torch.jit.save``'s zip archive, ``.pt``/``.ts``) as a model source.

Loading one runs the TorchScript code it carries (its ``code/`` members), so the user is told so
every time. Its inputs are not recorded in the file: they are given with ``--input-shape``. A
``.pt`` that is a zip archive without TorchScript code (a ``torch.save``'d state dict or pickled
model) is refused naming what to give instead.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from edgekit.errors import InputFileError, UsageError

SUFFIXES = (".pt", ".ts", ".pth", ".jit", ".torchscript")
RUNS_CODE = ("loading a TorchScript file runs the TorchScript code inside it: use only files from a source you "
             "trust")
MAX_MEMBERS = 100_000


def is_torchscript_path(path: Path) -> bool:
    return path.suffix.lower() in SUFFIXES and path.is_file()


def check_torchscript_archive(path: Path) -> None:
    """``path`` is a zip archive holding TorchScript code, else one line saying what it is."""
    from edgekit.formats.torchscript_backend import check_file

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


def torchscript_source(path: Path, state_dict, spec_args, build_specs, split_named):
    """The ``ModelSource`` of a TorchScript file (``model_source.resolve_source`` passes its spec helpers)."""
    from edgekit.fileio import sha256_file
    from edgekit.sources.model_source import ModelSource

    if state_dict is not None:
        raise UsageError("--state-dict applies to package.module:factory sources; a TorchScript file holds its weights")
    check_torchscript_archive(path)
    if not spec_args[0]:
        raise UsageError(f"{path} is a TorchScript model: give its input with --input-shape (e.g. 1x3x224x224)")
    shapes = split_named(spec_args[0], "--input-shape")
    if None in shapes and len(shapes) > 1:
        raise UsageError("several --input-shape values need names: NAME=1x3x224x224")
    names = [k if k is not None else "input" for k in shapes]
    from edgekit.sources.model_source import _named_single

    specs = build_specs(names, _named_single(spec_args, names))

    def load():
        from edgekit.formats.torchscript_backend import load_torchscript

        return load_torchscript(path)

    digest = sha256_file(path)
    about = {"name": f"torchscript:{path.name[:120]}", "source": str(path.resolve()),
             "weights": {"from": "torchscript", "sha256": digest, "warnings": [RUNS_CODE]}}
    return ModelSource(kind="torchscript", label=str(path), inputs=specs, outputs=("output",), model_info=about,
                       parent={"path": str(path.resolve()), "kind": "torchscript", "sha256": digest}, loader=load)
