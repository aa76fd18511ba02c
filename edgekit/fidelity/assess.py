"""Judge one quantized file against the float model of a quantize job: every output, on the run's
evaluation data (``evidence.EvalSettings``), streams for a stateful model; the verdict and its evidence.

A file measured on real data whose binding metric misses its floor is refused (``ParityError``);
one measured on synthetic inputs is written, its figures labelled as no evidence of accuracy.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import numpy as np

from edgekit.core.errors import EdgekitError, InputFileError, ParityError, first_line
from edgekit.fidelity import evidence as ev
from edgekit.fidelity.compare import compare_batches, compare_streams
from edgekit.formats.metrics import headline
from edgekit import formats
from edgekit.board.errors import BoardError
from edgekit.board.runtimes import open_model
from edgekit.formats.limits import calibration_files
from edgekit.userdata.sets import SUFFIXES, CalibrationSet
from edgekit.sources.state_pairs import StatePair, stream_layout

SETTINGS_KEY = ("fidelity", "settings")  # where a job keeps its EvalSettings (job.memo)
SYNTHETIC_STREAMS = 4
SYNTHETIC_STEPS = 32
# --eval-data is judged one sample a call, as a board runs it: dynamic int8 scales each activation by
# the batch it sees (PP-OCR's orientation classifier: arg-max agreement 0.875 a sample at a time,
# 0.9375 in batches of 16)
EVAL_BATCH = 1


def settings_of(job) -> ev.EvalSettings:
    return job.memo.get(SETTINGS_KEY) or ev.EvalSettings()


def runtime_runner(fmt: str, path: Path, names: list[str], engine: str | None = None):
    """``run(feed) -> every output`` of the model file at ``path`` in the board's runtime for ``fmt``."""
    try:
        runtime = open_model(fmt, path, None, engine)  # threads as this process has them (torch trains here too)
    except BoardError as exc:
        raise InputFileError(f"{path} is not a loadable {fmt} model ({first_line(exc)})") from None

    def run(feed: dict) -> list:
        order = runtime.call_order(feed, names)
        with runtime.context():
            return [np.asarray(out) for out in runtime.run([np.ascontiguousarray(feed[n]) for n in order])]

    run.runtime = runtime
    return run


def float_runner(job):
    """The float model (torch when the source has it, else its float ONNX file), every output."""
    names = [spec.name for spec in job.source.inputs]
    if job.reference_model is not None or job.source.has_torch:
        import torch

        model = job.reference_model if job.reference_model is not None else job.float_model()

        def run(feed: dict) -> list:
            with torch.inference_mode():
                out = model(*(torch.from_numpy(np.ascontiguousarray(feed[n])) for n in names))
            return [o.float().numpy() for o in _tensors(out)]

        return run

    return runtime_runner(formats.by_suffix(".onnx").name, job.float_onnx(), names)


def _guarded(run, what: str, error: type):
    """``run`` whose failures (a runtime's own exception types) are one line: ``what`` and the reason."""
    def guarded(feed: dict) -> list:
        try:
            return run(feed)
        except EdgekitError:
            raise
        except Exception as exc:  # noqa: BLE001 - ORT, torch and ExecuTorch raise their own types
            from edgekit.formats.parity import _reason

            shapes = ", ".join(f"{name} {tuple(np.shape(value))}" for name, value in feed.items())
            raise error(f"{what} ({shapes}): {_reason(exc)}") from None

    return guarded


def _tensors(out) -> list:
    """Every tensor a module returned, in order (a tensor, tuples/lists, dicts, transformers' outputs)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    return []


def assess(job, path: Path, fmt: str, details: dict | None, cases: dict, label: str) -> dict:
    """The fidelity record of the file at ``path`` (for the manifest's ``metrics.fidelity``)."""
    started = time.monotonic()
    settings = settings_of(job)
    names = [spec.name for spec in job.source.inputs]
    float_run = _guarded(float_runner(job), f"{label}: the float model fails on the evaluation inputs", InputFileError)
    candidate_run = _guarded(runtime_runner(fmt, path, names, (details or {}).get("quantized_engine")),
                             f"{label}: the file fails on the evaluation inputs", ParityError)
    outputs = list(job.source.outputs)
    # each input's sample axis (--sample-axis, else detected); state inputs fed back from outputs (by name,
    # and by the ONNX file's output shapes where it has them)
    axes, found = stream_layout(job.source, settings.axes or None, settings.state or None)
    pairs = [StatePair(i, o) for i, o in found]
    kind = settings.kind if settings.data is not None else (ev.TEST_SPLIT if job.source.labelled else ev.SYNTHETIC)
    labelled = job.source.labelled
    streams = None
    if pairs:
        initial = _initial_state(job.source.inputs, pairs)
        comparison, streams, samples = compare_streams(
            float_run, candidate_run, _streams(job, settings, pairs, axes), outputs, pairs, initial,
            settings.kinds, labelled, axes)
    else:
        counted = _Counted(_feeds(job, settings, cases, axes), axes)
        comparison = compare_batches(float_run, candidate_run, counted, outputs, settings.kinds, labelled, axes)
        samples = counted.samples
    results = comparison.results()
    if not results:
        raise ParityError(f"{label}: no evaluation samples were read from {settings.data}")
    ok = all(r["ok"] for r in results)
    record = {
        "evidence": kind,
        "evidence_note": ev.describe(kind, settings.data, samples, streams),
        "data": str(settings.data) if settings.data is not None else None,
        "samples": samples,
        "streams": streams,
        "state_pairs": [p.to_dict() for p in pairs],
        "sample_axes": axes,  # the axis of each input that counts samples
        "sample_axes_declared": sorted(settings.axes),  # by --sample-axis (the others detected)
        "notes": comparison.notes,
        "outputs": results,
        "headline": headline(results),
        "ok": ok,
        "verdict": ("pass" if ok else "fail") if kind in ev.REAL else "unverified",
        "seconds": round(time.monotonic() - started, 3),
    }
    if kind in ev.REAL and not ok:
        bad = next(r for r in results if not r["ok"])
        why = next((b for b in bad["binding"] if not b["ok"]), None)
        what = (f"{why['metric']} {why['value']} {'<' if why['sense'] == 'min' else '>'} {why['floor']}" if why
                else "non-finite values")
        raise ParityError(f"{label}: output {bad['output']!r} ({bad['kind']}) diverges from the float model: "
                          f"{what} ({record['evidence_note']})")
    return record


def with_legacy(legacy: dict, record: dict) -> dict:
    """``record`` beside the older figures (the first output's cosine, SQNR and top-1 agreement on
    the reference cases), less a top-1 agreement where the first output is not class scores: the
    arg-max of one number or of a feature vector is no decision, and its "top-1" would mislead."""
    merged = {**legacy, **record}
    first = (record.get("outputs") or [{}])[0]
    if first.get("kind") not in ("classes", "sequence"):
        merged.pop("top1_agreement", None)
    return merged


class _Counted:
    def __init__(self, feeds, axes: dict | None = None):
        self.feeds, self.samples, self.axes = feeds, 0, axes or {}

    def __iter__(self):
        for feed in self.feeds:
            self.samples += _samples(feed, self.axes)
            yield feed


def _samples(feed: dict, axes: dict) -> int:
    """How many samples ``feed`` holds, counted on the sample axis of its first input with axes."""
    for name, value in feed.items():
        if np.ndim(value):
            return int(np.shape(value)[axes.get(name, 0)])
    return 1


def _take(value: np.ndarray, axis: int, start: int, stop: int) -> np.ndarray:
    """Samples ``start:stop`` of ``value`` along its sample axis ``axis`` (an input with no axes, a
    sample rate: its one value, every call)."""
    return value[(slice(None),) * axis + (slice(start, stop),)] if np.ndim(value) else value


def _feeds(job, settings: ev.EvalSettings, cases: dict, axes: dict | None = None) -> Iterator[dict]:
    if settings.data is None:  # the reference cases: the test split, or synthetic inputs
        for _, (inputs, _) in sorted(cases.items()):
            yield inputs
        return
    batch = min(EVAL_BATCH, settings.batch_size or EVAL_BATCH)
    calib = job.open_calibration(settings.data, batch, settings.skip + settings.max_samples, settings.reading)
    skip = settings.skip
    if skip and hasattr(calib, "skipping"):  # images: the calibrated files are passed over, not decoded
        calib, skip = calib.skipping(skip), 0
    axes = {**(axes or {}), **dict(getattr(calib, "axes", ()))}
    for feed in calib.feeds():
        rows = _samples(feed, axes)
        if skip >= rows:
            skip -= rows
            continue
        if skip:
            feed = {name: _take(value, axes.get(name, 0), skip, None) for name, value in feed.items()}
            skip = 0
        yield feed


def _initial_state(specs, pairs) -> dict:
    """Zeros of each state input's shape (a dynamic axis: 1, one stream at a time)."""
    by_name = {spec.name: spec for spec in specs}
    return {p.input: np.zeros(by_name[p.input].concrete_shape(), dtype=by_name[p.input].dtype) for p in pairs}


def _streams(job, settings: ev.EvalSettings, pairs, axes: dict | None = None):
    """Streams of per-call feeds of the inputs that are not state: each array file of the data is one
    stream, its rows the calls in order; synthetic streams when there is no data."""
    states = {p.input for p in pairs}
    specs = tuple(spec for spec in job.source.inputs if spec.name not in states)
    if settings.data is None:
        for index in range(SYNTHETIC_STREAMS):
            yield _synthetic_stream(specs, np.random.default_rng(1000 + index))
        return

    path = Path(settings.data)
    files = (path,) if path.is_file() else calibration_files(path, SUFFIXES)
    if not files or any(f.suffix not in SUFFIXES for f in files):
        from edgekit.core.errors import UsageError

        raise UsageError(f"evaluation data {path} for a stateful model must be .npy/.npz arrays: each file one "
                         f"stream, its rows the calls in order")
    # a held-out part of --calib: the steps after those calibration ran (``skip``), from the initial state
    skip, left = settings.skip, settings.max_samples
    axes = {name: axis for name, axis in (axes or {}).items() if axis and name not in states}
    for file in files:
        if left <= 0:
            return
        steps, seen = [], 0
        for step in _rows(CalibrationSet((file,), specs, 1, skip + left, tuple(sorted(axes.items())))):
            seen += 1
            if seen > skip:
                steps.append(step)
        skip, left = max(0, skip - seen), left - len(steps)
        if steps:
            yield iter(steps)


def _rows(calib) -> Iterator[dict]:
    """One call per row: a model that takes one sample a call gets each row with its batch axis."""
    axes = dict(calib.axes)
    for feed in calib.feeds():
        for i in range(_samples(feed, axes)):
            yield {name: _take(value, axes.get(name, 0), i, i + 1) for name, value in feed.items()}


def _synthetic_stream(specs, rng) -> Iterator[dict]:
    """SYNTHETIC_STEPS calls of one made-up signal: float inputs drift slowly (frames of one signal,
    not fresh noise every call), integer inputs (token ids) stay inside their value range."""
    last: dict = {}
    for _ in range(SYNTHETIC_STEPS):
        step = {}
        for spec in specs:
            shape = spec.concrete_shape(batch=1, sequence=16)
            if np.dtype(spec.dtype).kind in "iu":
                low, high = spec.value_range or (0, 2)
                step[spec.name] = rng.integers(int(low), int(high), size=shape).astype(spec.dtype)
            else:
                fresh = rng.standard_normal(shape)
                value = fresh if spec.name not in last else 0.8 * last[spec.name] + 0.6 * fresh
                step[spec.name] = value.astype(spec.dtype)
        last = step
        yield step
