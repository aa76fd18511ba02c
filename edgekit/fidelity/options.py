"""A quantize run's evaluation options -> ``EvalSettings``: what it judges its files on.

``--eval-data`` is read like ``--calib`` (arrays, an image folder through ``--calib-preprocess``, a
text file through the tokenizer). A method that does not calibrate (dynamic) takes ``--calib`` as
data to judge on: the quantizer never sees it, so all of it is held out. A static run given
``--calib`` and no ``--eval-data`` keeps a part of it out of calibration to judge on
(``evidence.holdout``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from edgekit.core.errors import UsageError
from edgekit.fidelity import evidence as ev
from edgekit.formats.metrics import KINDS
from edgekit.sources.state_pairs import parse_sample_axes, parse_state_pairs, stream_layout

def pop_evaluation(calibrated: bool, options: dict) -> ev.EvalSettings:
    """The evaluation settings among ``options`` (removed from it; CLI-style values)."""
    data = options.pop("eval_data", None)
    require = bool(options.pop("require_eval_data", False))
    kinds = parse_output_kinds(options.pop("output_kinds", None))

    state = parse_state_pairs(options.pop("state_pairs", None))
    axes = parse_sample_axes(options.pop("sample_axes", None))
    kind = ev.EVAL_DATA
    if calibrated:
        preprocess, tokenizer = options.get("calib_preprocess"), options.get("tokenizer")
    else:
        calib = options.pop("calib", None)
        preprocess, tokenizer = options.pop("calib_preprocess", None), options.pop("tokenizer", None)
        if data is None and calib is not None:
            data, kind = calib, ev.CALIB_HOLDOUT
        if data is None and (preprocess is not None or tokenizer is not None):
            raise UsageError("--calib-preprocess and --tokenizer say how --calib or --eval-data is read; give one")
    return ev.EvalSettings(data=Path(data) if data is not None else None, kind=kind if data is not None else ev.SYNTHETIC,
                           preprocess=preprocess, tokenizer=Path(tokenizer) if tokenizer is not None else None,
                           require=require, kinds=kinds, state=state, axes=axes)


def parse_output_kinds(texts) -> dict[str, str]:
    """``--output-kind NAME=scalar|classes|sequence|tensor`` options -> {output: kind}."""
    out = {}
    for text in texts or ():
        name, sep, kind = str(text).partition("=")
        if not sep or not name.strip() or kind.strip() not in KINDS:
            raise UsageError(f"--output-kind takes OUTPUT=KIND with KIND one of {', '.join(KINDS)}, got {text!r}")
        out[name.strip()] = kind.strip()
    return out


def plan(src, config, settings: ev.EvalSettings | None, open_calibration) -> tuple[ev.EvalSettings, object, str | None]:
    """(settings, config, warning): a static run with --calib and no --eval-data holds a part of
    --calib out of calibration (its config's ``calib_max_samples`` set to the rest) and judges on it.
    ``open_calibration(path, reading=None)`` opens data for the model. Raises UsageError when real
    data is required and there is none, InputFileError for evaluation data the model cannot take."""
    settings = settings or ev.EvalSettings()
    warning = None

    # a --state or --sample-axis that names nothing, or an axis the input lacks: refused now
    streams = stream_layout(src, settings.axes or None, settings.state or None)[1]
    unknown = sorted(set(settings.kinds) - set(src.outputs)) if src.outputs else []
    if unknown:  # a declaration that decides nothing would pass silently
        raise UsageError(f"--output-kind {unknown[0]}=...: {src.label} has no output {unknown[0]!r} "
                         f"(outputs: {', '.join(src.outputs)})")
    if settings.data is not None:
        from edgekit.core.errors import InputFileError
        from edgekit.userdata.sets import calibration_kind

        if not settings.data.exists():
            raise InputFileError(f"evaluation data not found: {settings.data}")
        calibration_kind(settings.data)  # a path that holds no data is refused before any work
        if not streams:  # its first batch checked against the inputs now (streams: when they are read)
            try:
                open_calibration(settings.data, settings.reading)
            except InputFileError as exc:
                raise InputFileError(str(exc).replace("calibration data", "evaluation data", 1)) from None
    calib = getattr(config, "calib", None)
    if settings.data is None and config.calibrated and calib is not None and not src.labelled:
        count = open_calibration(calib, None).count()
        limit = getattr(config, "calib_max_samples", None)
        if limit is not None and count > limit:
            settings = dataclasses.replace(settings, data=Path(calib), kind=ev.CALIB_HOLDOUT, skip=limit,
                                           max_samples=min(ev.EVAL_MAX_SAMPLES, count - limit),
                                           batch_size=ev.HOLDOUT_BATCH)
        elif limit is None and (held := ev.holdout(count)):
            config = dataclasses.replace(config, calib_max_samples=count - held)
            settings = dataclasses.replace(settings, data=Path(calib), kind=ev.CALIB_HOLDOUT, skip=count - held,
                                           max_samples=held, batch_size=ev.HOLDOUT_BATCH)
        else:
            warning = (f"--calib {calib} holds {count} samples, all used to calibrate (a held-out part needs "
                       f"{ev.HOLDOUT_MIN_SAMPLES}); fidelity is {ev.SYNTHETIC_NOTE}: give --eval-data")
    if settings.require and settings.data is None and not src.labelled:
        raise UsageError(f"--require-eval-data: {src.label} would be judged on synthetic inputs; give --eval-data "
                         f"(or --calib{' with at least ' + str(ev.HOLDOUT_MIN_SAMPLES) + ' samples' if config.calibrated else ''})")
    return settings, config, warning


def for_pipeline(eval_data, calib, method_config, require: bool, labelled: bool, preprocess=None,
                 label: str = "the model", axes: dict | None = None) -> ev.EvalSettings:
    """The evaluation of one pipeline method run: its --eval-data; for a method that does not
    calibrate, the pipeline's --calib (which it never sees); else what ``plan`` makes of --calib.
    ``require`` with no data for a model without a labelled test split is refused (UsageError)."""
    if require and eval_data is None and calib is None and not labelled:
        raise UsageError(f"--require-eval-data: {label} would be judged on synthetic inputs; give --eval-data "
                         "(or --calib)")
    data, kind = eval_data, ev.EVAL_DATA
    if data is None and calib is not None and not method_config.calibrated:
        data, kind = calib, ev.CALIB_HOLDOUT
    return ev.EvalSettings(data=Path(data) if data is not None else None, kind=kind if data is not None else ev.SYNTHETIC,
                           preprocess=preprocess, require=require, axes=dict(axes or {}))
