"""``export``: checkpoint or quantized artifact -> verified TorchScript / ONNX files with provenance."""

from __future__ import annotations

import shutil
from pathlib import Path

from edgekit.formats.artifacts import (Manifest, ModelFile, carry_tokenizer, describe_file, finalize, load_manifest,
                                       parent_ref)
from edgekit.core.errors import InputFileError, UsageError, ParityError
from edgekit.formats import onnx_export
from edgekit.core.outputs import commit_dir
from edgekit.core.targets import Target, load_target
from edgekit import formats as table
from edgekit._version import __version__
from edgekit.formats.request import FloatExport, QuantizedCopy
from edgekit.quantize.each_format import Attempts
from edgekit.sources.model_source import resolve_source
from edgekit.sources.onnx_exporter import preferred_exporter
from edgekit.sources.torchscript_source import is_torchscript_path

TORCHSCRIPT_MODES = ("trace", "script")


def export(
    source: str | Path,
    out: str | Path,
    formats: tuple | None = None,
    target: str | Target | None = None,
    opset: int | None = None,
    onnx_route: str = "auto",
    torchscript_mode: str = "trace",
    optimize: bool = False,
    external_data: bool | None = None,
    force: bool = False,
    **source_options,
) -> tuple[Path, Manifest]:
    """Export ``formats`` from an artifact into ``out``; every file is reloaded and checked.

    ``torchscript_mode``: ``trace`` (default) or ``script`` (for models with data-dependent
    control flow); either way the module is frozen. ``optimize``: also run ONNX Runtime's offline
    graph optimisation (extended level: portable across CPUs, unlike the layout-specific level)
    and ship the optimised graph, re-checked for parity. ``external_data``: write ONNX weights
    to ``model.onnx.data`` beside the graph; None does so only for models over 2 GB, which
    cannot be one file.

    ``formats``: names, or the entries a command resolved once (``edgekit.formats.resolve``).
    ``source`` is an edgekit artifact folder, or a model from outside the zoo:
    ``package.module:factory`` or ``hf:CONFIG`` with ``source_options`` (``input_shapes``,
    ``input_dtypes``, ``dynamic_axes``, ``input_ranges``, ``state_dict``) as ``edgekit quantize``
    takes them. ``out`` is replaced only when it is an export edgekit wrote (else ``force``).
    """
    if torchscript_mode not in TORCHSCRIPT_MODES:
        raise UsageError(f"unknown TorchScript mode {torchscript_mode!r}; choose from: {', '.join(TORCHSCRIPT_MODES)}")
    onnx_export.check_route(onnx_route)  # a bad option value is refused before any format is tried
    if formats is not None:
        if not formats:
            table.check(())  # no format given: the one-line error with the choices
        formats = tuple(table.resolve(formats).values())  # each format resolved once, handed down as its entry
    if _outside_zoo(source):
        return _export_outside_zoo(source, out, formats, target, opset, onnx_route, torchscript_mode, optimize,
                                   external_data, source_options, force)
    if source_options:
        raise UsageError("--input-shape/--input-dtype/--dynamic-axes/--state-dict apply to models from outside the zoo")
    folder, manifest = load_manifest(source)
    if formats is None:
        formats = tuple(table.get(name) for name in (manifest.formats() if manifest.kind == "quantized"
                                                    else table.default_names()))
    if manifest.kind == "export":
        raise UsageError(f"{folder} is already an export; export a checkpoint or quantized artifact")
    target_name = target.name if isinstance(target, Target) else target or manifest.target or "rpi4"
    target = target if isinstance(target, Target) else load_target(target_name)
    opset = target.onnx_opset if opset is None else onnx_export.check_opset(opset)

    failed: list[dict] = []  # formats that failed, each with its reason (the others are written)
    with commit_dir(out, "export", inputs=[folder, _target_path(target_name)], force=force) as work:
        if manifest.kind == "checkpoint":
            from edgekit.sources.checkpoint import load_model_from_artifact

            model = load_model_from_artifact(folder, manifest)
            files = _export_float(model, manifest, work, formats, target, opset, onnx_route, torchscript_mode, optimize,
                                  external_data, failed)
        else:
            files = _export_quantized(folder, manifest, work, formats, target, optimize, external_data, failed)
        result = Manifest(
            kind="export",
            model=manifest.model,
            inputs=manifest.inputs,
            outputs=manifest.outputs,
            files=tuple(files),
            task=manifest.task,
            quantization=manifest.quantization,
            metrics={**manifest.metrics, **({"failed": failed} if failed else {})},
            parent=parent_ref(folder, manifest),
            target=target.name,
        )
        if manifest.task.get("type") == "language-modeling":  # generate/serve need the vocabulary
            carry_tokenizer(result.parent, work)
        result = finalize(result, work)
    return Path(out), result


def _provenance(manifest: Manifest, target: Target, **extra) -> dict:
    return {
        "edgekit_version": __version__,
        "model": manifest.model["name"],
        "target": target.name,
        "recipe": (manifest.quantization or {}).get("method", "fp32"),
        "inputs": [spec.to_dict() for spec in manifest.inputs],
        **extra,
    }


def _outside_zoo(source) -> bool:
    import re

    text = str(source)

    return text.startswith("hf:") or is_torchscript_path(Path(text)) or (not Path(text).exists() and re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z", text) is not None)


def _target_path(name) -> str | None:
    """A target given as a file path (an input to protect); None for a profile name."""
    return str(name) if name is not None and Path(str(name)).is_file() else None


def _export_outside_zoo(source, out, formats, target, opset, route, ts_mode, optimize, external_data, source_options,
                        force=False):
    """A user ``nn.Module`` factory or a transformers config: built here, exported like a checkpoint."""

    src = resolve_source(source, **source_options)
    formats = formats or tuple(table.get(name) for name in table.default_names())
    target_name = None if isinstance(target, Target) else target
    target = target if isinstance(target, Target) else load_target(target or "rpi4")
    opset = target.onnx_opset if opset is None else onnx_export.check_opset(opset)
    origin = Manifest(
        kind="checkpoint", model=src.model_info or {"name": src.label}, inputs=src.inputs, outputs=src.outputs,
        files=(), task=src.task,
    )
    inputs = [source_options.get("state_dict"), _target_path(target_name)]
    if str(source).startswith("hf:"):
        from edgekit.sources.model_source import hf_config_file

        inputs.append(hf_config_file(source))
    failed: list[dict] = []
    with commit_dir(out, "export", inputs=inputs, force=force) as work:
        files = _export_float(src.load_torch(), origin, work, formats, target, opset, route, ts_mode, optimize,
                              external_data, failed)
        result = Manifest(
            kind="export", model=origin.model, inputs=src.inputs, outputs=src.outputs, files=tuple(files),
            task=src.task, parent={"source": src.label, "kind": src.kind}, target=target.name,
            metrics={"failed": failed} if failed else {},
        )
        result = finalize(result, work)
    return Path(out), result


def _export_float(model, manifest, work, formats, target, opset, route, ts_mode, optimize,
                  external_data=None, failed: list | None = None) -> list[ModelFile]:
    """Each format exported and checked on its own: one that fails is added to ``failed`` with its
    reason and leaves no file (``quantize/each_format``); all failing raises the first failure."""
    from edgekit.formats.reference import REFERENCE_FILE, example_tensors, read_reference, write_reference

    write_reference(work / REFERENCE_FILE, model, manifest.inputs, manifest.task)
    cases = read_reference(work / REFERENCE_FILE, every_output=True)
    examples = example_tensors(manifest.inputs)
    float_accuracy = manifest.metrics.get("accuracy")
    family = manifest.model.get("name", "")

    files = []
    attempts = Attempts(work)
    for spec in formats:
        done = attempts.run(spec.name, "export", lambda spec=spec: _float_file(
            model, manifest, work, spec, target, opset, route, ts_mode, optimize, external_data, cases, examples,
            float_accuracy, family))
        if done is not None:
            files.append(done)
    attempts.raise_if_nothing_written(len(files))
    if failed is not None:
        failed.extend(attempts.summary())
    return files


def _float_file(model, manifest, work, spec, target, opset, route, ts_mode, optimize, external_data, cases, examples,
                float_accuracy, family) -> ModelFile:
    from edgekit.formats.evaluation import task_accuracy
    from edgekit.formats.parity import check_parity, every_output, predictor_for

    """``spec``: the format's entry."""
    fmt = spec.name
    path = work / spec.files.file_name
    request = FloatExport(path=path, examples=examples, inputs=manifest.inputs, outputs=manifest.outputs,
                          provenance=_provenance(manifest, target), family=family,
                          onnx_preference=preferred_exporter(family), opset=opset, onnx_route=route,
                          torchscript_mode=ts_mode, optimize=optimize, external_data=external_data)
    details = spec.ops().export_float(model, request)
    predict = predictor_for(path, spec, details)
    outputs = every_output(predict)
    parity = check_parity(outputs, cases, "fp32", f"fp32 {fmt} export",
                          names=outputs.output_names or list(manifest.outputs))
    metrics = {"accuracy": task_accuracy(manifest.task, predict), "float_accuracy": float_accuracy, "parity": parity}
    return describe_file(work, path.name, spec, precision="fp32", metrics=metrics, details=details)


def _export_quantized(folder, manifest, work, formats, target, optimize=False, external_data=None,
                      failed: list | None = None) -> list[ModelFile]:
    from edgekit.formats.reference import REFERENCE_FILE, read_reference

    if manifest.target and manifest.target != target.name:
        raise UsageError(
            f"{folder} was quantized for target {manifest.target!r}, not {target.name!r}; "
            "quantize again for this target"
        )
    if not (folder / REFERENCE_FILE).is_file():
        raise InputFileError(f"{folder / REFERENCE_FILE} is missing; quantize the model again to create it")
    shutil.copyfile(folder / REFERENCE_FILE, work / REFERENCE_FILE)
    cases = read_reference(work / REFERENCE_FILE, every_output=True)

    files = []
    attempts = Attempts(work)
    for spec in formats:
        done = attempts.run(spec.name, "export", lambda spec=spec: _quantized_file(
            folder, manifest, work, spec, target, optimize, external_data, cases))
        if done is not None:
            files.append(done)
    attempts.raise_if_nothing_written(len(files))
    if failed is not None:
        failed.extend(attempts.summary())
    return files


def _quantized_file(folder, manifest, work, spec, target, optimize, external_data, cases) -> ModelFile:
    from edgekit.formats.evaluation import task_accuracy
    from edgekit.formats.parity import check_parity, every_output, predictor_for

    """``spec``: the format's entry."""
    fmt = spec.name
    entry = manifest.file(fmt)
    path = work / spec.files.file_name
    request = QuantizedCopy(source=folder / entry.path, path=path, details=dict(entry.details),
                            provenance=_provenance(manifest, target, **entry.details), optimize=optimize,
                            external_data=external_data)
    details = spec.ops().copy_quantized(request)
    predict = predictor_for(path, spec, details)
    labelled = manifest.task.get("type") == "classification" and bool(manifest.task.get("dataset"))
    outputs = every_output(predict)
    parity = check_parity(outputs, cases, entry.precision, f"{entry.precision} {fmt} export", decisions=labelled,
                          names=outputs.output_names or list(manifest.outputs))
    accuracy = task_accuracy(manifest.task, predict)
    recorded = entry.metrics.get("accuracy")
    if recorded is not None and accuracy is not None and abs(accuracy - recorded) > 1e-9:
        raise ParityError(
            f"{entry.precision} {fmt} export: accuracy {accuracy:.4f} differs from the {recorded:.4f} recorded at quantization"
        )
    metrics = {**entry.metrics, "accuracy": accuracy, "parity": parity}
    return describe_file(work, path.name, spec, precision=entry.precision, metrics=metrics, details=details)
