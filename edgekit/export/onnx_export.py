"""Float model -> ONNX, with dynamic axes and provenance in ``metadata_props``.

Two exporter routes exist in torch: the TorchScript-based one (``dynamo=False``) and the
torch.export-based one (``dynamo=True``). The TorchScript route is the default here: it is fast,
keeps LSTM weights as plain initializers that ONNX Runtime's quantizer can reach, and handles the
zoo models; the route used is recorded in the artifact.

Either exporter writes into a scratch folder first (over 2 GB the TorchScript route writes one
file per tensor); the model is then saved as ``model.onnx``, plus ``model.onnx.data`` when it
needs (or is asked for) external data: see ``edgekit.onnx_files``.
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
    """No exporter chatter: warnings, prints, and torch.onnx's log lines (e.g. about torchvision)."""
    import logging

    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def export_onnx(
    model,
    example_inputs: tuple,
    inputs: tuple[InputSpec, ...],
    outputs: tuple[str, ...],
    path: Path,
    opset: int,
    route: str = "torchscript",
    provenance: dict | None = None,
    external_data: bool | None = None,
) -> list[str]:
    """Export to ``path`` with ``provenance`` in metadata_props; returns the external data file
    names written beside it (``external_data`` None: only when the model needs them)."""
    import tempfile

    from edgekit import onnx_files

    if route not in ROUTES:
        raise UsageError(f"unknown ONNX exporter route {route!r}; choose one of: {', '.join(ROUTES)}")
    check_opset(opset)
    try:
        with tempfile.TemporaryDirectory(prefix=".onnx-export-", dir=path.parent) as scratch:
            raw = Path(scratch) / path.name
            _export(model, example_inputs, inputs, outputs, raw, opset, route)
            exported = onnx_files.load(raw)
            stamp_metadata(exported, provenance or {})
            return onnx_files.save(exported, path, external_data)
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


def add_metadata(path: Path, provenance: dict, external_data: bool | None = None) -> list[str]:
    """Embed provenance in the model's metadata_props (rewrites the file in place); returns the
    external data file names. ``external_data`` None keeps the model's current layout."""
    from edgekit import onnx_files

    had = onnx_files.data_files(path)
    model = onnx_files.load(path)
    stamp_metadata(model, provenance)
    external = external_data if external_data is not None else (True if had else None)
    written = onnx_files.save(model, path, external)
    for stale in set(had) - set(written):
        (path.parent / stale).unlink(missing_ok=True)
    return written


def load_onnx(path: Path):
    """``onnx.load`` with an InputFileError for a file that is not an ONNX model (cut, random, empty)."""
    from edgekit import onnx_files

    return onnx_files.load(path)


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

    from edgekit import onnx_files
    from edgekit.errors import InputFileError

    onnx_files.data_files(path)  # external data outside the model's folder: refused by edgekit's rule first
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
    A model with external data keeps it (under the same name, written in a scratch folder first:
    ORT may map the original's data while it writes).
    """
    import os
    import tempfile

    import onnxruntime as ort

    from edgekit import onnx_files
    from edgekit.errors import EdgekitError

    levels = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}
    had = onnx_files.data_files(path)
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[level]
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix=".onnx-optimize-", dir=path.parent) as scratch:
        out = Path(scratch) / path.name
        options.optimized_model_filepath = str(out)
        if had:
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                             onnx_files.data_file_name(path))
            options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                             str(onnx_files.INLINE_TENSOR_BYTES))
        try:
            ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])  # the optimised file must load
            written = onnx_files.data_files(out)
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            raise EdgekitError(f"ONNX Runtime could not optimise {path.name}: {str(exc).splitlines()[0]}") from None
        for name in written:
            os.replace(out.parent / name, path.parent / name)
        os.replace(out, path)
        for stale in set(had) - set(written):
            (path.parent / stale).unlink(missing_ok=True)
    return level
