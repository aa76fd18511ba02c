"""Float model -> ONNX, with dynamic axes and provenance in ``metadata_props``.

Two exporter routes exist in torch: the TorchScript-based one (``dynamo=False``) and the
torch.export-based one (``dynamo=True``). ``auto`` (the default) takes the exporter its caller
prefers for the model (its family's measured choice, resolved by the stage that knows where the
model came from), else the TorchScript route. That route exports in a
fraction of the time, keeps LSTM weights as plain initializers that ONNX Runtime's quantizer can
reach, and its graphs ran as fast or faster. When it cannot export a model, auto falls back to
torch.export. The exporter used, and why, is recorded in the artifact.

Either exporter writes into a scratch folder first (over 2 GB the TorchScript route writes one
file per tensor); the model is then saved as ``model.onnx``, plus ``model.onnx.data`` when it
needs (or is asked for) external data: see ``edgekit.core.onnx_files``.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from edgekit.core.input_spec import InputSpec
from edgekit.core.errors import EdgekitError, UsageError, first_line, InputFileError
from edgekit.core import onnx_files

ROUTES = ("torchscript", "dynamo")
CHOICES = ("auto", *ROUTES)
MIN_OPSET, MAX_OPSET = 7, 23  # the range target profiles may ask for (edgekit.core.targets)
OTHER_WHY = "the TorchScript exporter first; torch.export when it cannot export the model"
DEFAULT_PREFERENCE = (ROUTES[0], OTHER_WHY)  # (exporter, why) "auto" tries first when the caller prefers none


@dataclass(frozen=True)
class OnnxExport:
    route: str  # the exporter that wrote the file
    choice: str  # why that one: "asked", a family's measured reason, or the fallback's cause
    data_files: list[str]  # external data files written beside the model


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No exporter chatter: warnings, prints, and torch.onnx's log lines (e.g. about torchvision)."""
    import logging

    # onnxscript logs a traceback when its version converter falls back, though the export succeeds
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), native_output_silenced():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@contextlib.contextmanager
def native_output_silenced() -> Iterator[None]:
    """File descriptors 1 and 2 to /dev/null: the TorchScript exporter's C++ side prints its whole
    IR graph when an export fails; the failure itself still arrives as an exception."""
    import os
    import sys

    saved = []
    try:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, ValueError, OSError):
                stream.flush()
        try:
            saved = [(fd, os.dup(fd)) for fd in (1, 2)]
        except OSError:  # no real descriptors (embedded, captured): nothing to silence
            yield
            return
        with open(os.devnull, "w") as devnull:
            for fd, _ in saved:
                os.dup2(devnull.fileno(), fd)
        yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)


def export_onnx(
    model,
    example_inputs: tuple,
    inputs: tuple[InputSpec, ...],
    outputs: tuple[str, ...],
    path: Path,
    opset: int,
    route: str = "auto",
    provenance: dict | None = None,
    external_data: bool | None = None,
    preferred: tuple[str, str] | None = None,
) -> OnnxExport:
    """Export to ``path`` with ``provenance`` (and the exporter used) in metadata_props.

    ``route`` "auto" tries ``preferred`` (exporter, why) first, else ``DEFAULT_PREFERENCE``, and
    falls back to the other exporter when it cannot export the model. External data files are written beside the
    model when it needs them (over 2 GB) or ``external_data`` asks for them.
    """
    check_route(route)
    check_opset(opset)
    if route != "auto":
        return OnnxExport(route, "asked", _export_checked(model, example_inputs, inputs, outputs, path, opset, route,
                                                          provenance, external_data))
    first, why = preferred or DEFAULT_PREFERENCE
    try:
        return OnnxExport(first, why, _export_checked(model, example_inputs, inputs, outputs, path, opset, first,
                                                      provenance, external_data))
    except UsageError:
        raise
    except EdgekitError as failed:
        other = next(r for r in ROUTES if r != first)
        try:
            written = _export_checked(model, example_inputs, inputs, outputs, path, opset, other, provenance, external_data)
        except EdgekitError:
            raise failed from None
        return OnnxExport(other, f"the {first} exporter failed ({str(failed).split(': ', 1)[-1]})", written)


def check_route(route: str) -> str:
    """``route`` when it names an exporter (or auto); a UsageError otherwise."""
    if route not in CHOICES:
        raise UsageError(f"unknown ONNX exporter {route!r}; choose one of: {', '.join(CHOICES)}")
    return route


def _export_checked(model, example_inputs, inputs, outputs, path, opset, route, provenance, external_data) -> list[str]:
    import tempfile


    try:
        with tempfile.TemporaryDirectory(prefix=".onnx-export-", dir=path.parent) as scratch:
            raw = Path(scratch) / path.name
            _export(model, example_inputs, inputs, outputs, raw, opset, route)
            exported = onnx_files.load(raw)
            stamp_metadata(exported, {**provenance, "onnx_exporter": route} if provenance else {})
            return onnx_files.save(exported, path, external_data)
    except EdgekitError:
        raise
    except Exception as exc:  # noqa: BLE001 - the exporters raise many types; name the first line
        first = _export_reason(exc)
        if "No module named 'onnxscript'" in first:
            first += " (torch's torch.export-based exporter needs it: pip install onnxscript)"
        if "opset" in first.lower() and "Exporting the operator" not in first:  # not an op missing at this opset
            raise UsageError(f"ONNX opset {opset} is not supported by this torch's exporter ({first})") from None
        raise EdgekitError(f"ONNX export ({route} exporter) failed: {first}") from None


def _export_reason(exc: BaseException) -> str:
    """One line on why an exporter failed: torch.export's 'Exception summary' names the cause."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    if not text:
        return type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "## Exception summary" in lines:
        summary = lines[lines.index("## Exception summary") + 1:]
        if summary:
            return re.sub(r"^<class '([\w.]+)'>: ", r"\1: ", summary[0])[:400]
    return lines[0][:400]


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
            # Positional, not by name: torch.export keys a dict by the forward's argument names,
            # which need not be the input names edgekit gives the graph.
            dims = tuple(
                {axis: torch.export.Dim(label) for axis, label in spec.dynamic_axes.items()} or None for spec in inputs
            )
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
    model, had = onnx_files.read(path)
    onnx_files.attach_data(model, path)
    stamp_metadata(model, provenance)
    external = external_data if external_data is not None else (True if had else None)
    written = onnx_files.save(model, path, external)
    for stale in set(had) - set(written):
        (path.parent / stale).unlink(missing_ok=True)
    return written


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


    onnx_files.data_files(path)  # external data outside the model's folder: refused by edgekit's rule first
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError, protobuf decode errors
        first = first_line(exc)
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
            raise EdgekitError(f"ONNX Runtime could not optimise {path.name}: {first_line(exc)}") from None
        for name in written:
            os.replace(out.parent / name, path.parent / name)
        os.replace(out, path)
        for stale in set(had) - set(written):
            (path.parent / stale).unlink(missing_ok=True)
    return level
