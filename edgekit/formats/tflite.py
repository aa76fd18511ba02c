"""LiteRT (TensorFlow Lite): ``model.tflite``, converted by litert-torch, run by ai-edge-litert's interpreter.

litert-torch lowers a ``torch.export`` program through JAX and its own MLIR converter (no
TensorFlow). It cannot lower a flatten over a symbolic batch, so the program is converted at
batch 1 and the runtime runs a batch row by row. int8 files (``quantize/routes/tflite.py``)
take and give int8 tensors; the runtime quantizes inputs and dequantizes outputs with the
file's own scales. Language models are out of this format (litert-torch's LLM path needs
TensorFlow). The provenance lives in the manifest.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
from pathlib import Path

from edgekit.formats import Board, Files, Format, Host, register
from edgekit.core.errors import EdgekitError, first_line, InputFileError, UsageError
from edgekit.core.fileio import atomic_path
from edgekit.formats.onnx_export import native_output_silenced

FORMAT = register(Format(
    name="tflite",
    files=Files(file_name="model.tflite", suffixes=(".tflite",)),
    host=Host(backend="edgekit.formats.tflite", modules=("litert_torch", "ai_edge_litert"), extra="tflite",
              table_order=40, default=False),  # written when asked for (--format tflite) or by `pipeline --format all`
    board=Board(runtime="ai-edge-litert", footprint_mb=24.0, preference=40, check_wheel=True, counted_in_python=True),
))

FILE_IDENTIFIER = b"TFL3"  # flatbuffer file identifier at bytes 4..8


@contextlib.contextmanager
def quiet():
    """litert-torch's progress lines, absl/JAX logging and the converter's C++ output stay out of the terminal."""
    levels = {name: logging.getLogger(name).level for name in ("absl", "jax", "litert_torch", "torch._export")}
    for name in levels:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        # its progress lines are Python writes (to whatever sys.stdout is), the rest C++ writes to fds 1 and 2
        with native_output_silenced(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _check_inputs(inputs) -> None:
    for spec in inputs:
        if spec.dtype != "float32":
            raise UsageError(f"--format tflite takes float32 inputs; input {spec.name!r} is {spec.dtype}")


def single(examples) -> tuple:
    """The example inputs at batch 1 (the converted program's fixed batch)."""
    return tuple(example[:1].contiguous() for example in examples)


def convert(program_or_model, examples: tuple, inputs, path: Path, quant_config=None) -> dict:
    """``program_or_model`` converted at batch 1 and written as ``path``; the converter's facts."""
    import tempfile

    _check_inputs(inputs)
    with quiet():
        import litert_torch

        try:
            converted = litert_torch.convert(program_or_model, single(examples), quant_config=quant_config)
        except Exception as exc:  # noqa: BLE001 - export, JAX lowering and MLIR passes raise many types
            error = exc
        else:
            error = None
            with tempfile.TemporaryDirectory(prefix="edgekit-litert-") as tmp:
                converted.export(str(Path(tmp) / "model.tflite"))
                with atomic_path(path) as staged:
                    shutil.copyfile(Path(tmp) / "model.tflite", staged)
    if error is not None:
        raise EdgekitError(f"litert-torch cannot convert the model to .tflite: {first_line(error, 300)}") from None
    return {"converter": f"litert-torch {_version('litert-torch')}", "batch": 1}


def export_float(model, request) -> dict:
    details = {"variant": "fp32-tflite", "api": "litert-torch",
               **convert(model.eval(), request.examples, request.inputs, request.path)}
    check_file(request.path)
    return details


def copy_quantized(request) -> dict:
    check_file(request.source)
    with atomic_path(request.path) as tmp:
        shutil.copyfile(request.source, tmp)
    return dict(request.details)


def predictor(path, details: dict | None = None, threads: int = 1):
    from edgekit.formats import evaluation

    check_file(Path(path))
    return evaluation.board_predictor(FORMAT.name, path, threads)


def check_file(path) -> None:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if len(head) < 8 or head[4:8] != FILE_IDENTIFIER:
        raise InputFileError(f"{path} is not a LiteRT model (.tflite: no TFL3 file identifier)")


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
