"""Float model -> ONNX, with dynamic axes and provenance in ``metadata_props``.

Two exporter routes exist in torch: the TorchScript-based one (``dynamo=False``) and the
torch.export-based one (``dynamo=True``). The TorchScript route is the default here: it is fast,
keeps LSTM weights as plain initializers that ONNX Runtime's quantizer can reach, and handles the
zoo models; the route used is recorded in the artifact.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path
from typing import Iterator

from edgekit.artifacts import InputSpec
from edgekit.errors import EdgekitError, UsageError

ROUTES = ("torchscript", "dynamo")
MIN_OPSET, MAX_OPSET = 7, 23  # the range target profiles may ask for (edgekit.targets)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def export_onnx(
    model,
    example_inputs: tuple,
    inputs: tuple[InputSpec, ...],
    outputs: tuple[str, ...],
    path: Path,
    opset: int,
    route: str = "torchscript",
) -> None:
    if route not in ROUTES:
        raise UsageError(f"unknown ONNX exporter route {route!r}; choose one of: {', '.join(ROUTES)}")
    check_opset(opset)
    try:
        _export(model, example_inputs, inputs, outputs, path, opset, route)
    except EdgekitError:
        raise
    except Exception as exc:  # noqa: BLE001 - the exporters raise many types; name the first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "opset" in first.lower():
            raise UsageError(f"ONNX opset {opset} is not supported by this torch's exporter ({first})") from None
        raise EdgekitError(f"ONNX export ({route} exporter) failed: {first}") from None


def check_opset(opset) -> int:
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise UsageError(f"ONNX opset must be an integer within {MIN_OPSET}..{MAX_OPSET}, got {opset!r}")
    return opset


def _export(model, example_inputs, inputs, outputs, path, opset, route) -> None:
    import torch

    names = [spec.name for spec in inputs]
    with quiet(), torch.no_grad():
        if route == "torchscript":
            dynamic_axes = {spec.name: dict(spec.dynamic_axes) for spec in inputs if spec.dynamic_axes}
            for out in outputs:
                dynamic_axes[out] = {0: "batch"}
            torch.onnx.export(
                model.eval(),
                example_inputs,
                str(path),
                input_names=names,
                output_names=list(outputs),
                dynamic_axes=dynamic_axes,
                opset_version=opset,
                do_constant_folding=True,
                dynamo=False,
            )
        else:
            dims = {}
            for spec in inputs:
                dims[spec.name] = {axis: torch.export.Dim(label) for axis, label in spec.dynamic_axes.items()}
            program = torch.onnx.export(
                model.eval(),
                example_inputs,
                input_names=names,
                output_names=list(outputs),
                dynamic_shapes=dims,
                opset_version=opset,
                dynamo=True,
            )
            program.save(str(path))


def add_metadata(path: Path, provenance: dict) -> None:
    """Embed provenance in the model's metadata_props (rewrites the file in place)."""
    import onnx

    model = load_onnx(path)
    stamp_metadata(model, provenance)
    onnx.save(model, str(path))


def load_onnx(path: Path):
    """``onnx.load`` with an InputFileError for a file that is not an ONNX model (cut, random, empty)."""
    import onnx

    from edgekit.errors import InputFileError

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputFileError(f"{path} is not a readable ONNX model ({first})") from None
    if not model.graph.node:
        raise InputFileError(f"{path} is not a readable ONNX model (no graph)")
    return model


def stamp_metadata(model, provenance: dict) -> None:
    existing = {prop.key: prop for prop in model.metadata_props}
    for key, value in provenance.items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        prop = existing.get(f"edgekit.{key}")
        if prop is None:
            prop = model.metadata_props.add()
            prop.key = f"edgekit.{key}"
        prop.value = text


def check_model(path: Path) -> None:
    """onnx.checker and shape inference must pass on every exported model."""
    import onnx

    from edgekit.errors import InputFileError

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError, protobuf decode errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputFileError(f"{path} fails the ONNX checker: {first}") from None


def optimize_offline(path: Path, level: str = "extended") -> str:
    """Rewrite ``path`` with ONNX Runtime's offline graph optimisations; return the level used.

    ``extended`` fusions are CPU-provider ops that every ORT CPU build (x86 and ARM) runs; the
    ``all`` level adds layout transforms tied to the exporting machine, so it is not offered.
    The result may use com.microsoft ops, so it is checked by loading it in ORT, not onnx.checker.
    """
    import os
    import tempfile

    import onnxruntime as ort

    from edgekit.errors import EdgekitError

    levels = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[level]
    options.log_severity_level = 3
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=path.parent)
    os.close(fd)
    try:
        options.optimized_model_filepath = tmp
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        ort.InferenceSession(tmp, providers=["CPUExecutionProvider"])  # the optimised file must load
        os.replace(tmp, path)
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        raise EdgekitError(f"ONNX Runtime could not optimise {path.name}: {str(exc).splitlines()[0]}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return level
