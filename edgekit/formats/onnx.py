"""ONNX: ``model.onnx`` run by ONNX Runtime (the board needs only numpy + onnxruntime)."""

from __future__ import annotations

from edgekit.formats import Board, Files, Format, Host, Quantization, register, onnx_export
from edgekit.core import onnx_files

FORMAT = register(Format(
    name="onnx",
    files=Files(file_name="model.onnx", suffixes=(".onnx",), external_data=True),
    host=Host(backend="edgekit.formats.onnx", modules=("onnxruntime", "onnx"), extra="core", needs_torch_model=False,
              table_order=10),
    board=Board(runtime="onnxruntime", footprint_mb=64.0, preference=0, standalone_server=True, counted_in_python=True),
    quantization=Quantization(layer_names="onnx", target_recipe=True),
))


def export_float(model, request) -> dict:
    details = {"variant": "fp32-onnx", "opset": request.opset}
    done = onnx_export.export_onnx(model, request.examples, request.inputs, request.outputs, request.path,
                                   request.opset, request.onnx_route, {**request.provenance, **details},
                                   request.external_data, preferred=request.onnx_preference)
    details.update(onnx_exporter=done.route, onnx_exporter_choice=done.choice)
    if done.data_files:
        details["external_data"] = done.data_files
    onnx_export.check_model(request.path)
    if request.optimize:
        details["ort_optimization"] = onnx_export.optimize_offline(request.path)
    return details


def copy_quantized(request) -> dict:
    details = dict(request.details)
    onnx_files.copy(request.source, request.path)
    written = onnx_export.add_metadata(request.path, request.provenance, request.external_data)
    details.pop("external_data", None)
    if written:
        details["external_data"] = written
    onnx_export.check_model(request.path)
    if request.optimize:
        details["ort_optimization"] = onnx_export.optimize_offline(request.path)
    return details


def predictor(path, details: dict | None = None, threads: int = 1):
    from edgekit.formats import evaluation

    return evaluation.board_predictor(FORMAT.name, path, threads)


def data_files(path) -> list[str]:
    """The external data files the graph names (beside it)."""
    return onnx_files.data_files(path)


def check_file(path) -> None:
    onnx_export.check_model(path)
