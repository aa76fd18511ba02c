"""``quantize``: float model -> int8 artifact, with every file's accuracy (or fidelity) measured."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from edgekit.formats.artifacts import Manifest
from edgekit.core.errors import UsageError
from edgekit.core.outputs import commit_dir
from edgekit.quantize.steps import (
    describe_produced, error_report, finish, input_paths, new_job, resolve, write_reference,
)
from edgekit.core.targets import Target, load_target
from edgekit import formats, formats as table
from edgekit.data.calibsets import default_calibration
from edgekit.quantize.registry import formats_for, get_method, make_config, method_for_config, route_for
from edgekit.sources.model_source import ModelSource

# what --calib may name (quantize/calibration/data.py)
CALIB_KINDS = "FOLDER (.npy/.npz arrays, or images with --calib-preprocess) or FILE.txt (one text per line)"
SOURCE_OPTIONS = ("input_shapes", "input_dtypes", "dynamic_axes", "input_ranges", "state_dict", "random_init")


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

    Each requested format stands alone (``quantize/each_format``): one that fails leaves no file and
    is listed with its reason in the manifest's ``quantization["failed"]``; only a run where every
    format failed raises (the first failure).
    """
    source_options = {k: options.pop(k) for k in SOURCE_OPTIONS if k in options}
    from edgekit.fidelity.options import pop_evaluation

    method_spec = get_method(method)
    evaluation = pop_evaluation(method_spec.config_type.calibrated, options)  # --eval-data, --calib to judge on
    src = resolve(source, source_options)
    # calib None: the set shipped for this model's dataset (the config's own default is the digits set)
    options = _default_calibration(src, method_spec, options)
    options = _default_formats(src, options, method_spec)
    _check_calibrator_settings(method_spec, options)
    config = make_config(method, **options)
    return quantize_config(src, config, out, target, max_drop=max_drop, progress=progress, force=force,
                           with_report=with_report, source=source, source_options=source_options,
                           evaluation=evaluation)


def quantize_config(
    src,
    config,
    out: str | Path,
    target: str | Target = "rpi4",
    *,
    max_drop: float | None = None,
    progress: Callable | None = None,
    force: bool = False,
    with_report: bool = False,
    source: str | Path | None = None,
    source_options: dict | None = None,
    evaluation=None,
    format_entries: dict | None = None,
) -> tuple[Path, Manifest]:
    """The one door of a quantize run, with the method's config object itself: ``edgekit.api.quantize``,
    ``quantize`` (a method's name and its settings, as ``edgekit quantize`` passes them) and the pipeline
    all come here (``--auto``'s search is ``search/auto.py``). ``src``: a ``ModelSource``, or what
    ``quantize`` takes as ``source``;
    ``format_entries``: {name: entry} of formats the caller resolved already (the pipeline's)."""
    import dataclasses


    method_spec = method_for_config(config)  # a config of no registered method is refused with the choices
    source_options = dict(source_options or {})
    misplaced = sorted(set(source_options) - set(SOURCE_OPTIONS))
    if misplaced:
        raise UsageError(f"{', '.join(misplaced)}: set {'it' if len(misplaced) == 1 else 'them'} on the "
                         f"{type(config).__name__}, not as a keyword of quantize()")
    if not isinstance(src, ModelSource):
        source = src if source is None else source
        src = resolve(src, source_options)
    method = method_spec.name
    if config.calibrated and getattr(config, "calib", None) is None:
        config = dataclasses.replace(config, **_default_calibration(src, method_spec, {"calib": None}))
    specs = table.resolve(config.formats, format_entries)  # each format resolved once for the whole run
    _check_fit(src, method, config, specs)
    if getattr(config, "calib", None) is None and getattr(evaluation, "data", None) is None:
        from edgekit.sources.spatial_sizes import check_made_up_sizes

        check_made_up_sizes(src)  # no data to take an image's height/width from
    if method_spec.handler is None:
        for fmt in config.formats:
            route_for(type(config), fmt)  # a format the method has no route to is refused before any work
    target = target if isinstance(target, Target) else load_target(target)
    if max_drop is not None and not (isinstance(max_drop, (int, float)) and 0 <= max_drop <= 100):
        raise UsageError(f"max drop must be between 0 and 100 points, got {max_drop!r}")
    from edgekit.fidelity.options import plan
    from edgekit.quantize.job import calibration_reading, open_source_calibration

    # what the files are judged on (a held-out part of --calib may leave calibration); real data if required
    declared_states = dict(getattr(evaluation, "state", None) or {})  # --state: calibration runs those streams too
    declared_axes = dict(getattr(evaluation, "axes", None) or {})  # --sample-axis: calibration counts samples so too
    evaluation, config, eval_warning = plan(src, config, evaluation, lambda path, reading: open_source_calibration(
        src, path, reading=calibration_reading(config) if reading is None else reading, declared_states=declared_states,
        declared_axes=declared_axes))
    calibrated = config.calibrated
    options = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    options["eval_data"] = evaluation.data

    with commit_dir(out, "quantized", inputs=input_paths(source, options, source_options, target), force=force) as work:
        job = new_job(src, target, work, method, progress)
        from edgekit.fidelity.assess import SETTINGS_KEY

        job.memo[SETTINGS_KEY] = evaluation
        job.declared_states = declared_states
        job.declared_axes = declared_axes
        if eval_warning:
            job.warnings.append(eval_warning)
        job.calib_reading = calibration_reading(config)
        if getattr(config, "calib", None) is not None:
            # arrays, images or text: the first batch is checked before the model is even loaded
            job.calibration(config)
            from edgekit.formats.limits import check_calibration_size

            if warning := check_calibration_size(config.calib):
                job.warnings.append(warning)
        from edgekit.quantize.each_format import Attempts

        attempts = Attempts(job.dest)  # a format that fails is a row with its reason; the others are written
        produced = _run_each_format(job, config, method_spec, attempts)
        attempts.raise_if_nothing_written(len(produced))  # every format failed: the first failure, as before
        cases = write_reference(job, _reference_data(job, config, evaluation))
        files, budgets = [], []
        for item in produced:
            def check(item=item):
                report = None
                if max_drop is not None:
                    from edgekit.quantize.search.budget import fit_budget

                    item, report = fit_budget(job, config, method_spec, item, cases, max_drop)
                spec = specs.get(item.format)  # a method with one handler may write formats of its own
                if with_report and (spec or table.get(item.format)).quantization.onnx_graph:
                    from dataclasses import replace

                    from edgekit.quantize.toolkits.onnx_graphs import activation_ranges

                    found = error_report(job, job.dest / item.path, getattr(config, "calib", None), cases,
                                         activation_ranges(job, config) if calibrated else None)
                    item = replace(item, details={**item.details, "error_report": found})
                return describe_produced(job, item, cases, f"{method_spec.config_type.precision}-{method}-{item.format}",
                                         method, spec), report

            done = attempts.run(item.format, "check", check)
            if done is not None:
                files.append(done[0])
                if done[1] is not None:
                    budgets.append(done[1].to_dict())
        attempts.raise_if_nothing_written(len(files))
        quantization = {
            "method": method,
            "config": _jsonable(config),
            "calibration": job.calibration_info or None,
        }
        if budgets:
            quantization["budget"] = {"max_drop_points": max_drop, "files": budgets}
        if attempts.failures:
            quantization["failed"] = attempts.summary()
        result = finish(job, files, quantization)
    return Path(out), result


def _reference_data(job, config, evaluation):
    """The data the reference cases are cut from: --calib, else --eval-data (read as it says), so a
    model with free height/width is judged at the data's size, not one edgekit makes up (a stateful
    model: the first call of the first stream, from its initial state)."""
    if getattr(config, "calib", None) is not None or getattr(evaluation, "data", None) is None:
        return getattr(config, "calib", None)
    reading = {"preprocess": evaluation.preprocess, "tokenizer": evaluation.tokenizer}
    job.calib_reading = {key: value for key, value in reading.items() if value is not None}
    return evaluation.data


def _run_each_format(job, config, method_spec, attempts) -> list:
    """The method's files: each requested format's route on its own (``each_format.Attempts``); a
    method with one handler for every format runs as one step."""
    if method_spec.handler is not None:
        return method_spec.run(job, config)

    produced = []
    for fmt in config.formats:
        produced.extend(attempts.run(fmt, "quantize", lambda fmt=fmt: route_for(type(config), fmt)(job, config)) or [])
    return produced


def _default_calibration(src, method_spec, options: dict) -> dict:
    """``options`` with ``calib`` filled in, for a calibrated method given none: the set edgekit
    ships for the model's dataset (a UsageError when there is none)."""
    if not method_spec.config_type.calibrated or options.get("calib") is not None:
        return options

    calib = default_calibration(src.task.get("dataset"))  # shipped in the package
    if calib is None:
        raise UsageError(f"{method_spec.config_type.called(method_spec.name)} of {src.label} needs calibration data: "
                         f"--calib {CALIB_KINDS}")
    return {**options, "calib": calib}


def _default_formats(src, options: dict, method_spec=None) -> dict:
    """``options`` with ``formats`` filled in when none is given: the default formats, less those the
    method has no route to (a method that writes only some formats is not refused for the others)."""
    import dataclasses


    if options.get("formats") is None:
        options = dict(options)
        options.pop("formats", None)
        # an .onnx file has no torch model; transformers and TorchScript files (torch.ao quantizes
        # no ScriptModule, torch.export takes none) go the ONNX way
        if src.kind in ("onnx", "hf", "torchscript"):
            options["formats"] = formats.default_names(need_torch=False)
        field = {f.name: f for f in dataclasses.fields(method_spec.config_type)}.get("formats") if method_spec else None
        if field is not None and method_spec.handler is None:
            given = options.get("formats") or (field.default_factory() if field.default_factory is not dataclasses.MISSING
                                                else field.default)
            routed = tuple(name for name in given if name in formats_for(method_spec.config_type))
            if routed and routed != tuple(given):
                options["formats"] = routed
    return options


def _check_calibrator_settings(method_spec, options: dict) -> None:
    """The calibration settings steer ONNX Runtime's calibrators; a format quantized with the target
    engine's torch.ao observers (TorchScript) does not use them: asked for there, they are refused
    rather than silently ignored."""
    chosen = [flag for flag, key in (("--calibrate-method", "calibrate_method"), ("--percentile", "percentile"),
                                     ("--calib-bins", "calib_bins")) if options.get(key) is not None]
    if not chosen or not method_spec.config_type.calibrated:
        return
    names = options.get("formats") or table.default_names()  # the configs' default
    observed = [name for name in names if table.get(name).quantization.packed_engine]
    if observed:
        onnx = ",".join(name for name in table.default_names() if table.get(name).quantization.onnx_graph)
        raise UsageError(f"{chosen[0]} applies to the ONNX path only (--format {observed[0]} uses the target engine's "
                         f"torch.ao observers); add --format {onnx}")


def _check_fit(src, method: str, config, specs: dict) -> None:
    if src.kind == "onnx":
        if config.trains:
            raise UsageError(f"{src.label} is an ONNX model: {config.called(method)} needs the PyTorch model and its training data")
        from edgekit import formats as table

        needs_torch = [name for name, spec in specs.items() if spec.host.needs_torch_model]
        if needs_torch:
            fit = ", ".join(table.default_names(need_torch=False))
            raise UsageError(f"{src.label} is an ONNX model: only --format {fit} applies "
                             f"(--format {needs_torch[0]} needs the PyTorch model)")
    if config.trains and not src.labelled:
        raise UsageError(f"{config.called(method)} needs a model with a labelled training set (a zoo classification task); {src.label} has none")


def _jsonable(config) -> dict:
    import dataclasses

    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
    return out
