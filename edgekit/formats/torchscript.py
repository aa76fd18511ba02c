"""TorchScript: ``model.pt`` run by torch on the board (int8 through torch.ao, fp32 traced or scripted).

torch.jit is deprecated in favour of torch.export; everything that touches it is in
``torchscript_backend``.
"""

from __future__ import annotations

from edgekit.formats import Board, Files, Format, Host, Quantization, register, torchscript_backend
from edgekit.core.errors import InputFileError, UsageError

FORMAT = register(Format(
    name="torchscript",
    files=Files(file_name="model.pt", suffixes=(".pt", ".pth", ".ts", ".ptl", ".torchscript")),
    host=Host(backend="edgekit.formats.torchscript", modules=("torch",), extra="core", table_order=0),
    board=Board(
        runtime="torch",
        footprint_mb=256.0,
        # PyPI's torch wheels for aarch64 Linux pull CUDA libraries (hundreds of MB) a Pi cannot use;
        # PyTorch's CPU index carries CPU-only builds of the same versions (and numpy).
        index_url="https://download.pytorch.org/whl/cpu",
        preference=20,
    ),
    quantization=Quantization(packed_engine=True),
))

MODES = ("trace", "script")


def export_float(model, request) -> dict:
    mode = request.torchscript_mode
    if mode not in MODES:
        raise UsageError(f"unknown TorchScript mode {mode!r}; choose from: {', '.join(MODES)}")
    details = {"variant": "fp32-torchscript", "torchscript_mode": f"{mode}+freeze"}
    module = (torchscript_backend.trace(model, request.examples) if mode == "trace"
              else torchscript_backend.script(model, label=request.family or "model"))
    torchscript_backend.save(module, request.path, {**request.provenance, **details})
    return details


def copy_quantized(request) -> dict:
    module = torchscript_backend.load_torchscript(request.source, request.details.get("quantized_engine"))
    torchscript_backend.save(module, request.path, request.provenance)
    return dict(request.details)


def predictor(path, details: dict | None = None, threads: int = 1):
    """torch's thread settings are this process's: left as they are (the host trains here too)."""
    from edgekit.formats import evaluation

    return evaluation.board_predictor(FORMAT.name, path, None, (details or {}).get("quantized_engine"))


def check_file(path) -> None:
    import zipfile


    if not zipfile.is_zipfile(path):
        raise InputFileError(f"{path} is not a TorchScript model (not a zip archive)")
