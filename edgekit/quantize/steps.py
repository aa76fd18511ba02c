"""The steps every quantize run shares (``api.quantize``, ``auto.quantize_auto``, ``budget.fit_budget``):
resolve the source, open the job, write the reference, describe each produced file, finish the
manifest. Below those three modules, so their dependencies point one way."""

from __future__ import annotations

import shutil
from pathlib import Path

from edgekit.formats.artifacts import Manifest, carry_tokenizer, describe_file, finalize
from edgekit import formats
from edgekit.core.errors import ParityError
from edgekit.sources.model_source import hf_config_file, resolve_source, source_warnings
from edgekit.core.targets import Target
from edgekit.quantize.registry import precision as method_precision


def input_paths(source, options: dict, source_options: dict, target) -> list:
    """The files and folders a quantize run reads: its output may be none of them, nor hold one."""
    paths = [hf_config_file(source) if str(source).startswith("hf:") else source, options.get("calib"),
             source_options.get("state_dict"), options.get("tokenizer"), options.get("eval_data")]
    preprocess = options.get("calib_preprocess")
    if isinstance(preprocess, (str, Path)) and "=" not in str(preprocess):  # a TOML file
        paths.append(preprocess)
    if isinstance(target, Target) and target.source:
        paths.append(target.source)
    return paths


def resolve(source, source_options: dict):
    """The float model ``source`` names (``sources/model_source.py``), with the options for one from outside the zoo."""
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
    from edgekit.formats.evaluation import onnx_predictor
    from edgekit.formats.parity import every_output
    from edgekit.formats.reference import REFERENCE_FILE, float_outputs, read_reference
    from edgekit.formats.reference import write_reference as write_torch_reference
    from edgekit.quantize.search import accuracy

    path = job.work / REFERENCE_FILE
    model = job.reference_model if job.reference_model is not None else None
    if job.source.labelled:
        write_torch_reference(path, model if model is not None else job.float_model(), job.source.inputs, job.source.task)
    else:
        # every output of the float model goes into the file (the board's check compares them all)
        if model is not None or job.source.has_torch:
            torch_model = model if model is not None else job.float_model()
            predict = lambda inputs: float_outputs(torch_model, inputs)  # noqa: E731
        else:
            predict = every_output(onnx_predictor(job.float_onnx()))
        feed = calibration_feed(calib, job.source.inputs, job) if calib is not None else None
        accuracy.write_reference(path, predict, job.source.inputs, job.source.task, job.input_ranges(),
                                 feed or job.source.reference_feed)
    return read_reference(path)


REPORT_SAMPLES = 32


def error_report(job, path: Path, calib, cases: dict, ranges=None) -> dict:
    """Every quantized tensor's error in the int8 ONNX file ``path`` (``quantize/search/report.py``), on the
    calibration data (at most REPORT_SAMPLES samples; without calibration data, on the reference
    inputs), summarized for the manifest."""
    from edgekit.quantize.search.report import summarize, tensor_report
    from edgekit.quantize.toolkits.onnx_graphs import prepared_onnx

    if calib is not None:
        batches = job.open_calibration(calib, 8, REPORT_SAMPLES).feeds()
    else:
        batches = (inputs for _, (inputs, _) in sorted(cases.items()))
    return summarize(tensor_report(prepared_onnx(job), path, batches, ranges))


def calibration_feed(calib, specs, job=None):
    """``feed(batch)`` -> the first ``batch`` calibration rows (repeated when there are fewer)."""
    import numpy as np

    from edgekit.formats.reference import BATCH_SIZES
    from edgekit.userdata.sets import fixed_batch, open_calibration

    opened = (job.open_calibration(calib, max(BATCH_SIZES)) if job is not None else
              open_calibration(calib, specs, batch_size=max(BATCH_SIZES)))
    axes = dict(getattr(opened, "axes", ()))  # a state's samples are on its batch axis, not axis 0
    feeds = opened.feeds()
    first = next(feeds)
    if fixed_batch(specs, axes):  # the model takes only its own batch size: one calibration batch per case
        # a stream's later calls carry no state input (the model's own output is fed back): the stream's initial one
        cases = {size: {**first, **next(feeds, first)} if size != min(BATCH_SIZES) else first for size in BATCH_SIZES}
        return lambda batch: {name: np.ascontiguousarray(value) for name, value in cases.get(batch, first).items()}

    def feed(batch: int) -> dict:
        name, value = next(iter(first.items()))
        rows = np.arange(batch) % value.shape[axes.get(name, 0)]
        return {name: np.ascontiguousarray(np.take(value, rows, axis=axes.get(name, 0)) if np.ndim(value) else value)
                for name, value in first.items()}  # an input with no axes (a sample rate): its one value

    return feed


def describe_produced(job, item, cases: dict, variant: str, method: str, spec=None):
    """Check parity, measure accuracy (or fidelity), and describe the file for the manifest (``spec``:
    its format's entry, as the run resolved it; else looked up by ``item.format``)."""
    from edgekit.quantize.search import accuracy

    spec = spec if spec is not None else formats.get(item.format)
    predict = accuracy.predictor(job.dest / item.path, spec, item.details)

    precision = method_precision(method)  # what the method's files hold: the label everywhere they go
    label = f"{precision} {method} {item.format}"
    from edgekit.fidelity.assess import assess, with_legacy

    # every output, on the evidence, first: a refusal names the metric that binds for the output that
    # failed (a recognizer's symbol agreement), not the first output's cosine on the reference cases
    judged = assess(job, job.dest / item.path, item.format, item.details, cases, label)
    try:
        parity = accuracy.check(job.source, predict, cases, label)
    except ParityError as exc:
        from edgekit.fidelity.evidence import SYNTHETIC

        if judged.get("evidence") != SYNTHETIC:
            raise
        # made-up inputs can refuse a good file (PP-OCRv4's detector, dynamic: cosine 0.08 on noise at
        # 480x640, text-mask IoU 0.92 on rendered pages): say so, and what judges it on real ones
        raise ParityError(f"{exc} on synthetic inputs; --eval-data with real inputs judges it on those") from None
    measured = accuracy.measure(job.source, predict, cases)
    metrics = {
        "accuracy": measured.value if measured.metric == "accuracy" else None,
        "float_accuracy": job.source.float_accuracy,
        "accuracy_drop_points": round(measured.drop_points, 4),
        "fidelity": with_legacy(measured.fidelity, judged),
        "metric": measured.metric,
        "parity": parity,
    }
    details = {**item.details, "variant": variant}
    return describe_file(job.dest, item.path, spec, precision=precision, metrics=metrics, details=details)


def finish(job, files: list, quantization: dict) -> Manifest:
    src = job.source
    shutil.rmtree(job.work / ".scratch", ignore_errors=True)

    for line in source_warnings(src.model_info):  # random weights, a task head left out
        if line not in job.warnings:
            job.warnings.append(line)
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
        carry_tokenizer(src.parent, job.work)
    return finalize(result, job.work)


def stamp(folder: Path, entry, src, target: Target) -> None:
    """A manifest beside a candidate file, so the benchmark runner knows its inputs."""
    finalize(Manifest(kind="quantized", model=src.model_info, inputs=src.inputs, outputs=src.outputs,
                      files=(entry,), task=src.task, target=target.name), folder)
