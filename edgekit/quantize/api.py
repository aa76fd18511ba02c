"""``quantize``: float model -> int8 artifact, with every file's accuracy (or fidelity) measured."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from edgekit.artifacts import Manifest, describe_file, finalize
from edgekit.errors import UsageError
from edgekit.outputs import commit_dir
from edgekit.targets import Target, load_target

SOURCE_OPTIONS = ("input_shapes", "input_dtypes", "dynamic_axes", "input_ranges", "state_dict")


def quantize(
    source: str | Path,
    method: str,
    out: str | Path,
    target: str | Target = "rpi4",
    *,
    max_drop: float | None = None,
    progress: Callable | None = None,
    force: bool = False,
    with_report: bool = False,
    **options,
) -> tuple[Path, Manifest]:
    """Quantize ``source`` with ``method`` for ``target``; write an artifact to ``out``.

    ``source``: a checkpoint artifact folder, an ``.onnx`` file, ``package.module:factory`` or
    ``hf:CONFIG``. ``options`` are the method's config fields (``calib=...``,
    ``formats=("onnx",)``, ``calibrate_method="entropy"``...) plus, for sources from outside the
    zoo, ``input_shapes``/``input_dtypes``/``dynamic_axes``/``input_ranges`` (lists of CLI-style
    strings) and ``state_dict``. ``max_drop`` (points): keep the most sensitive layers in float
    until the drop is within it, or raise ``AccuracyBudgetError``. ``progress`` receives
    ``CalibrationProgress`` during calibration.
    """
    from edgekit.quantize.methods import get_method, make_config

    source_options = {k: options.pop(k) for k in SOURCE_OPTIONS if k in options}
    method_spec = get_method(method)
    src = _resolve(source, source_options)
    if method == "static" and options.get("calib") is None:
        from edgekit.data.calibsets import default_calibration

        options["calib"] = default_calibration(src.task.get("dataset"))  # shipped in the package
        if options["calib"] is None:
            raise UsageError(f"static quantization of {src.label} needs calibration data: --calib FOLDER (.npy/.npz)")
    config = make_config(method, **_default_formats(src, method, options))
    _check_fit(src, method, config)
    target = target if isinstance(target, Target) else load_target(target)
    if max_drop is not None and not (isinstance(max_drop, (int, float)) and 0 <= max_drop <= 100):
        raise UsageError(f"max drop must be between 0 and 100 points, got {max_drop!r}")

    with commit_dir(out, "quantized", inputs=input_paths(source, options, source_options, target), force=force) as work:
        job = new_job(src, target, work, method, progress)
        if getattr(config, "calib", None) is not None:
            from edgekit.limits import check_calibration_size

            if warning := check_calibration_size(config.calib):
                job.warnings.append(warning)
        produced = method_spec.handler(job, config)
        cases = write_reference(job, getattr(config, "calib", None))
        files, budgets = [], []
        for item in produced:
            if max_drop is not None:
                from edgekit.quantize.budget import fit_budget

                item, report = fit_budget(job, config, method_spec, item, cases, max_drop)
                budgets.append(report.to_dict())
            if with_report and item.format == "onnx":
                from dataclasses import replace

                found = error_report(job, job.dest / item.path, getattr(config, "calib", None), cases,
                                     job.activation_ranges(config) if method == "static" else None)
                item = replace(item, details={**item.details, "error_report": found})
            files.append(describe_produced(job, item, cases, f"int8-{method}-{item.format}", method))
        quantization = {
            "method": method,
            "config": _jsonable(config),
            "calibration": job.calibration_info or None,
        }
        if budgets:
            quantization["budget"] = {"max_drop_points": max_drop, "files": budgets}
        result = finish(job, files, quantization)
    return Path(out), result


# ---------------------------------------------------------------------------------------------
# pieces shared with ``auto.py``


def input_paths(source, options: dict, source_options: dict, target) -> list:
    """The files and folders a quantize run reads: its output may be none of them, nor hold one."""
    paths = [hf_config_file(source) if str(source).startswith("hf:") else source, options.get("calib"),
             source_options.get("state_dict")]
    if isinstance(target, Target) and target.source:
        paths.append(target.source)
    return paths


def hf_config_file(source) -> Path:
    """``hf:FOLDER`` reads FOLDER/config.json, ``hf:FILE`` the file: the one input to protect."""
    path = Path(str(source)[3:])
    return path / "config.json" if path.is_dir() else path


def _resolve(source, source_options):
    from edgekit.quantize.sources import resolve_source

    return resolve_source(source, **source_options)


def new_job(src, target: Target, work: Path, method: str, progress=None):
    from edgekit.quantize.job import QuantJob

    provenance = {"edgekit_method": method, "target": target.name, "model": src.model_info.get("name", src.label)}
    return QuantJob(src, target, work, provenance, progress)


def write_reference(job, calib=None) -> dict:
    """reference.npz: the float model (QAT: the network it trained) on fixed inputs.

    A model from outside the zoo with calibration data is held to the user's own inputs: the
    reference cases are calibration rows (their shapes, e.g. 128-token padded sentences), not
    random ones."""
    from edgekit.evaluation import onnx_predictor, torch_predictor
    from edgekit.export.reference import REFERENCE_FILE, read_reference, write_reference as write_torch_reference
    from edgekit.quantize import accuracy

    path = job.work / REFERENCE_FILE
    model = job.reference_model if job.reference_model is not None else None
    if job.source.labelled:
        write_torch_reference(path, model if model is not None else job.float_model(), job.source.inputs, job.source.task)
    else:
        if model is not None:
            predict = torch_predictor(model)
        elif job.source.has_torch:
            predict = torch_predictor(job.float_model())
        else:
            predict = onnx_predictor(job.float_onnx())
        feed = calibration_feed(calib, job.source.inputs) if calib is not None else None
        accuracy.write_reference(path, predict, job.source.inputs, job.source.task, job.input_ranges(),
                                 feed or job.source.reference_feed)
    return read_reference(path)


REPORT_SAMPLES = 32


def error_report(job, path: Path, calib, cases: dict, ranges=None) -> dict:
    """Every quantized tensor's error in the int8 ONNX file ``path`` (``quantize/report.py``), on the
    calibration data (at most REPORT_SAMPLES samples; without calibration data, on the reference
    inputs), summarized for the manifest."""
    from edgekit.quantize.report import summarize, tensor_report

    if calib is not None:
        from edgekit.quantize.calibration import open_calibration

        batches = open_calibration(calib, job.source.inputs, 8, REPORT_SAMPLES).feeds()
    else:
        batches = (inputs for _, (inputs, _) in sorted(cases.items()))
    return summarize(tensor_report(job.prepared_onnx(), path, batches, ranges))


def calibration_feed(calib, specs):
    """``feed(batch)`` -> the first ``batch`` calibration rows (repeated when there are fewer)."""
    import numpy as np

    from edgekit.export.reference import BATCH_SIZES
    from edgekit.quantize.calibration import open_calibration

    first = next(open_calibration(calib, specs, batch_size=max(BATCH_SIZES)).feeds())

    def feed(batch: int) -> dict:
        rows = np.arange(batch) % len(next(iter(first.values())))
        return {name: np.ascontiguousarray(value[rows]) for name, value in first.items()}

    return feed


def describe_produced(job, item, cases: dict, variant: str, method: str):
    """Check parity, measure accuracy (or fidelity), and describe the file for the manifest."""
    from edgekit.quantize import accuracy

    predict = accuracy.predictor(job.dest / item.path, item.format, item.details)
    label = f"int8 {method} {item.format}"
    parity = accuracy.check(job.source, predict, cases, label)
    measured = accuracy.measure(job.source, predict, cases)
    metrics = {
        "accuracy": measured.value if measured.metric == "accuracy" else None,
        "float_accuracy": job.source.float_accuracy,
        "accuracy_drop_points": round(measured.drop_points, 4),
        "fidelity": measured.fidelity,
        "metric": measured.metric,
        "parity": parity,
    }
    details = {**item.details, "variant": variant}
    return describe_file(job.dest, item.path, item.format, precision="int8", metrics=metrics, details=details)


def finish(job, files: list, quantization: dict) -> Manifest:
    src = job.source
    shutil.rmtree(job.work / ".scratch", ignore_errors=True)
    if job.warnings:
        quantization["warnings"] = list(job.warnings)
    result = Manifest(
        kind="quantized",
        model=src.model_info,
        inputs=src.inputs,
        outputs=src.outputs,
        files=tuple(files),
        task=src.task,
        quantization=quantization,
        metrics={"float_accuracy": src.float_accuracy} if src.labelled else {"float_accuracy": None, "metric": "cosine"},
        parent=src.parent,
        target=job.target.name,
    )
    if src.task.get("type") == "language-modeling":  # generate/serve need the vocabulary
        from edgekit.models.lm_runtime import carry_tokenizer

        carry_tokenizer(src.parent, job.work)
    return finalize(result, job.work)


def _default_formats(src, method: str, options: dict) -> dict:
    if options.get("formats") is None:
        options = dict(options)
        options.pop("formats", None)
        if src.kind in ("onnx", "hf"):
            options["formats"] = ("onnx",)
    return options


def _check_fit(src, method: str, config) -> None:
    formats = getattr(config, "formats", ())
    if src.kind == "onnx":
        if method == "qat":
            raise UsageError(f"{src.label} is an ONNX model: QAT needs the PyTorch model and its training data")
        if "torchscript" in formats:
            raise UsageError(f"{src.label} is an ONNX model: only --format onnx applies (ONNX Runtime path)")
    if method == "qat" and not src.labelled:
        raise UsageError(f"QAT needs a model with a labelled training set (a zoo classification task); {src.label} has none")


def _jsonable(config) -> dict:
    import dataclasses

    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
    return out
