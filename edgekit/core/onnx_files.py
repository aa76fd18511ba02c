"""ONNX model files on disk, including external data for models past protobuf's 2 GB limit.

A protobuf message cannot exceed 2 GiB, so a bigger model keeps its tensors in a second file:
``model.onnx`` holds the graph and ``model.onnx.data`` the weights (ONNX's external data,
referenced by file name from the graph). edgekit writes at most that one data file per model,
beside it, and treats the pair as one model: checksummed, copied, bundled and sized together.

A data file's name comes from the (untrusted) graph, so every location is checked to be a
plain file name in the model's own folder before anything opens it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from edgekit.core.errors import InputFileError, first_line
from edgekit.core.fileio import signature_kind

PROTOBUF_LIMIT = (1 << 31) - 1
# Above this the graph plus weights no longer fit one protobuf message with room to spare.
EXTERNAL_DATA_THRESHOLD = PROTOBUF_LIMIT - (64 << 20)
# Tensors under this size stay inside the graph file (scales, zero points, shapes).
INLINE_TENSOR_BYTES = 1024


def data_file_name(path: str | os.PathLike) -> str:
    return f"{Path(path).name}.data"


def tensor_bytes(model) -> int:
    """Bytes of tensor payload in ``model`` (initializers and constants, subgraphs included)."""
    return sum(_payload(t) for t in _tensors(model))


def needs_external_data(model) -> bool:
    return tensor_bytes(model) > EXTERNAL_DATA_THRESHOLD


def save(model, path: str | os.PathLike, external: bool | None = None) -> list[str]:
    """Write ``model`` to ``path``; returns the data file names written beside it (0 or 1).

    ``external`` None: only when the model would not fit one protobuf message. The tensors are
    moved out of ``model`` in memory when written externally.
    """
    import onnx

    path = Path(path)
    data = path.with_name(data_file_name(path))
    if data.exists() or data.is_symlink():  # onnx appends to an existing data file
        data.unlink()
    if external is None:
        external = needs_external_data(model)
    if not external:
        onnx.save_model(model, str(path))
        return []
    onnx.save_model(
        model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
        location=data.name, size_threshold=INLINE_TENSOR_BYTES, convert_attribute=True,
    )
    if not data.exists():
        return []
    os.chmod(data, path.stat().st_mode & 0o777)  # onnx creates it owner-only; match the graph file
    return [data.name]


def load(path: str | os.PathLike, load_data: bool = True):
    """``onnx.load`` with checked external data locations; a file that is not ONNX is an InputFileError.

    ``load_data`` False leaves external tensors as references (the graph alone: small, and
    fine for shape inference); ``attach_data`` reads them later.
    """
    path = Path(path)
    model, names = read(path)
    if not model.graph.node:
        raise InputFileError(f"{path} is not a readable ONNX model (no graph)")
    if names and load_data:
        attach_data(model, path)
    return model


def attach_data(model, path: str | os.PathLike) -> None:
    """Read the external tensors of ``model`` (loaded from ``path`` without them) into memory."""
    from onnx.external_data_helper import load_external_data_for_model

    path = Path(path)
    if not _locations(model, path):
        return
    try:
        load_external_data_for_model(model, str(path.parent))
    except Exception as exc:  # noqa: BLE001 - a cut data file, a length past its end
        raise InputFileError(f"{path}: its external data cannot be read ({first_line(exc)})") from None


def data_files(path: str | os.PathLike) -> list[str]:
    """Names of the external data files ``path`` refers to, each checked to be a regular file
    beside it (no folders, links or absolute paths); sorted, empty for a self-contained model."""
    return read(path)[1]


def read(path: str | os.PathLike):
    """(the model without its external tensors' data, the checked data file names); ``attach_data``
    reads the data later."""
    import onnx


    path = Path(path)
    try:
        other = signature_kind(path)
    except OSError as exc:
        raise InputFileError(f"cannot read ONNX model {path}: {exc.strerror or exc}") from None
    if other is not None:
        raise InputFileError(f"{path} is not an ONNX model: its first bytes show it is {other}")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise InputFileError(f"{path} is not a readable ONNX model ({first_line(exc)})") from None
    return model, _locations(model, path)


def _locations(model, path: Path) -> list[str]:
    """The checked external data file names of ``model`` (loaded from ``path``)."""
    import onnx

    names = set()
    for tensor in _tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        names.add(_checked_location(path, location, tensor.name))
    return sorted(names)


def _checked_location(path: Path, location: str, tensor: str) -> str:
    if (not location or location in (".", "..") or "/" in location or "\\" in location or "\x00" in location
            or location != location.strip()):
        raise InputFileError(
            f"{path}: tensor {tensor!r} points at external data {location!r}, which is not a file beside the model"
        )
    data = path.parent / location
    if data.is_symlink() or not data.is_file():
        raise InputFileError(f"{path}: external data file {location!r} is missing (or not a regular file) beside the model")
    return location


def initializer_inputs(model) -> list[str]:
    """Names of the graph inputs that an initializer backs: weights, not inputs to feed.

    IR version 3 (the ONNX model zoo's older files) lists every initializer among the graph
    inputs; from IR 4 on such an input is an initializer a caller may override. Either way
    edgekit treats it as a constant: its model inputs are ``model_inputs``."""
    weights = {init.name for init in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name in weights]


def model_inputs(model) -> list:
    """The graph inputs (ValueInfos) a caller feeds: those no initializer backs, in graph order."""
    weights = {init.name for init in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in weights]


def unused_initializers(model) -> list[str]:
    """Initializers that no node reads (subgraphs included) and no graph output names."""
    used = {name for graph in _graphs(model.graph) for node in graph.node for name in node.input}
    used |= {vi.name for vi in model.graph.output}
    return [init.name for init in model.graph.initializer if init.name not in used]


def _graphs(graph):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def drop_initializer_inputs(model) -> list[str]:
    """Remove the initializer-backed graph inputs from ``model`` (in memory), so runtimes and
    graph optimisers see constants; IR 3 models move to IR 4, the first version that allows an
    initializer outside the inputs. Returns the names removed."""
    dropped = initializer_inputs(model)
    if not dropped:
        return []
    kept = model_inputs(model)
    del model.graph.input[:]
    model.graph.input.extend(kept)
    if model.ir_version < 4:
        model.ir_version = 4
    return dropped


def copy(source: str | os.PathLike, dest: str | os.PathLike) -> list[str]:
    """Copy a model file and its external data files into ``dest``'s folder; returns the data names.

    The data files keep their names: the graph refers to them by name.
    """
    source, dest = Path(source), Path(dest)
    names = data_files(source)
    shutil.copyfile(source, dest)
    for name in names:
        shutil.copyfile(source.parent / name, dest.parent / name)
    return names


def _payload(tensor) -> int:
    import onnx

    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return next((int(e.value) for e in tensor.external_data if e.key == "length" and e.value.isdigit()), 0)
    if tensor.raw_data:
        return len(tensor.raw_data)
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * 4  # typed fields (float_data, int64_data...): an estimate is enough here


def _tensors(model):
    """Every TensorProto of the model: initializers and tensor attributes, through subgraphs."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _node_tensors(node)


def _graph_tensors(graph):
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node):
    for attr in node.attribute:
        if attr.HasField("t"):
            yield attr.t
        yield from attr.tensors
        if attr.HasField("g"):
            yield from _graph_tensors(attr.g)
        for graph in attr.graphs:
            yield from _graph_tensors(graph)
