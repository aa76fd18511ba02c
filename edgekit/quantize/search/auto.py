"""``edgekit quantize --auto``: try the target's candidate recipes, keep the fastest within budget.

Every candidate is built, checked and measured like a normal quantization (accuracy on held-out
data, or fidelity), then all candidates and the float model are timed together on this host with
``edgekit.bench.api.bench`` (one process each, interleaved, the target's thread count) at the
user's shapes: the first calibration row (e.g. a 128-token padded sentence), else the reference
inputs at ``--input-shape``; the shapes go into the manifest (``quantization.bench_inputs``). Per
format, the fastest candidate whose drop is within the budget and that is faster than float
becomes the artifact's file (an int8 file slower than float is never chosen); the full table goes
into the manifest (``quantization.candidates``). Transformers (residual Add -> LayerNormalization
pairs) also get the graph layouts of ``fusion.py`` and SmoothQuant static as candidates.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from pathlib import Path
from typing import Callable

from edgekit import formats as table
from edgekit.formats.artifacts import Manifest, describe_file
from edgekit.core.errors import EdgekitError, GateFailed, ParityError, UsageError
from edgekit.core.outputs import commit_dir
from edgekit.quantize.api import CALIB_KINDS, _reference_data  # the data plain quantize cuts its cases from
from edgekit.quantize.progress import report
from edgekit.quantize.steps import (
    describe_produced, error_report, finish, input_paths, new_job, resolve, stamp, write_reference,
)
from edgekit.core.targets import Target, load_target
from edgekit.core import onnx_files
from edgekit.data.calibsets import default_calibration
from edgekit.formats.request import FloatExport
from edgekit.quantize.registry import calibrated, get_method, make_config
from edgekit.sources.onnx_exporter import preferred_exporter


@dataclass
class Candidate:
    name: str
    method: str
    format: str
    options: dict
    path: str = ""
    bytes: int = 0
    metric: str = ""
    value: float | None = None
    drop_points: float | None = None
    p50_ms: float | None = None
    meets_budget: bool = False
    chosen: bool = False
    error: str | None = None
    slower_than_float: bool = False  # never chosen: int8 that costs time is no int8 worth having
    skipped: str | None = None  # not built, and why (static recipes without calibration data)
    target: dict | None = None  # its cost on the target's emulated core (edgekit.quantize.search.target_choice)
    fidelity: dict | None = None  # the binding metric its fidelity leads with (edgekit/fidelity), verdict, evidence
    refused: str | None = None  # built, and refused: an output's binding metric misses its floor on real data

    def to_dict(self) -> dict:
        return asdict(self)

    def within(self, budget: float) -> bool:
        """Its drop is within ``budget`` points and fidelity did not refuse it (host or target speed aside)."""
        return self.drop_points is not None and self.drop_points <= budget and self.refused is None


class NoCandidateError(GateFailed):
    def __init__(self, message: str, candidates: list[Candidate], bench_inputs: dict | None = None):
        super().__init__(message)
        self.candidates = candidates
        self.bench_inputs = bench_inputs or {}


def candidate_recipes(src, has_calib: bool, formats: tuple[str, ...], transformer: bool = False) -> list[tuple[str, str, dict]]:
    """(name, method, options) in a stable order; static ones only with calibration data.

    ``transformer``: the model has residual Add -> LayerNormalization pairs; its graph layouts
    (``quantize/toolkits/fusion.py``: ORT's own session fusions, ORT's transformer optimizer) are candidates
    beside the default one."""
    out = [("dynamic", "dynamic", {})]
    onnx_graph = any(table.get(name).quantization.onnx_graph for name in formats)
    if transformer and onnx_graph:
        out.append(("dynamic-fused", "dynamic", {"fusion": "transformer"}))
        out.append(("dynamic-runtime", "dynamic", {"fusion": "runtime"}))
    if has_calib:
        out.append(("static-minmax", "static", {"calibrate_method": "minmax"}))
        out.append(("static-percentile", "static", {"calibrate_method": "percentile"}))
        out.append(("static-entropy", "static", {"calibrate_method": "entropy"}))
        out.append(("static-mse", "static", {"calibrate_method": "mse"}))
        # weights-heavy ops only (MatMul/Gemm/Conv): LayerNorm, Softmax, Add stay float; the usual
        # recipe for transformer encoders
        # (minmax: clipping a trained transformer's outlier channels costs more than the coarser step)
        out.append(("static-matmul", "static", {"calibrate_method": "minmax", "op_types": ("MatMul", "Gemm", "Conv", "Gather")}))
        if transformer and onnx_graph:  # outlier channels: migrate them into the weights first
            out.append(("static-smooth", "static", {"calibrate_method": "minmax", "op_types": ("MatMul", "Gather"),
                                                    "smooth": True}))
    return out


def quantize_auto(
    source: str | Path,
    out: str | Path,
    target: str | Target = "rpi4",
    *,
    calib: str | Path | None = None,
    formats: tuple[str, ...] | None = None,
    max_drop: float | None = None,
    progress: Callable | None = None,
    bench_settings: dict | None = None,
    force: bool = False,
    with_report: bool = False,
    calib_preprocess: str | None = None,
    tokenizer: str | Path | None = None,
    emulate: bool = True,
    eval_data: str | Path | None = None,
    require_eval_data: bool = False,
    output_kinds=None,
    state_pairs=None,
    sample_axes=None,
    **source_options,
) -> tuple[Path, Manifest, list[Candidate]]:
    """``calib``: the static recipes' calibration data, as ``--method static`` takes it (arrays,
    images with ``calib_preprocess``, text with the model's or ``tokenizer``'s tokenizer); None: the
    set edgekit ships for the model's dataset, and without one the static recipes are listed as
    skipped, with the reason. ``emulate``: compare .pte and ONNX candidates by their cost on the target's
    emulated core (``target_choice``) rather than by this host's timings.

    Every candidate is judged as ``--method static`` judges its file (``edgekit/fidelity``), on the same
    data: ``eval_data``, else the part of ``calib`` the static recipes leave out of calibration, else
    synthetic inputs (labelled so); one whose binding metric misses its floor on real data is refused.
    ``output_kinds`` (``OUTPUT=KIND`` strings) and ``state_pairs`` (``INPUT=OUTPUT``: streams, state fed
    back, for calibration too) and ``sample_axes`` (``INPUT=AXIS``) as ``quantize`` takes them;
    ``require_eval_data``: refuse synthetic inputs."""
    from edgekit.bench.api import bench
    from edgekit.quantize.job import calibration_reading
    from edgekit.quantize.toolkits import onnx_graphs

    src = resolve(source, source_options)
    given_calib = calib
    if calib is None:  # what --method static would use
        calib = default_calibration(src.task.get("dataset"))
    reading = {"calib_preprocess": calib_preprocess, "tokenizer": Path(tokenizer) if tokenizer is not None else None}
    reading = {k: v for k, v in reading.items() if v is not None}
    if reading and calib is None and eval_data is None:
        raise UsageError(f"{', '.join('--' + k.replace('_', '-') for k in reading)} describe(s) how --calib or --eval-data "
                         "is read; give --calib (or --eval-data)")
    if calib_preprocess is not None:
        from edgekit.userdata.images import parse_preprocess

        parse_preprocess(calib_preprocess)
    target = target if isinstance(target, Target) else load_target(target)
    budget = max_drop if max_drop is not None else float(target.budgets.get("max_accuracy_drop", 1.0))
    if not 0 <= budget <= 100:
        raise UsageError(f"max drop must be between 0 and 100 points, got {budget!r}")
    # an .onnx file has no torch model; transformers go the ONNX way
    formats = table.check(formats) if formats else table.default_names(need_torch=src.kind not in ("onnx", "hf"))
    specs = {name: table.get(name) for name in formats}  # each format resolved once for the whole search
    settings = {"warmup": 5, "min_runs": 30, "min_time_s": 0.5, **(bench_settings or {})}
    # bench settings: threads, warmup, min_runs, min_time_s, input_file (default: the reference inputs)

    evaluation, judged_as, eval_warning = _evaluation(src, calib, formats, reading, {
        "eval_data": eval_data, "require_eval_data": require_eval_data, "output_kinds": output_kinds,
        "state_pairs": state_pairs, "sample_axes": sample_axes})
    held_out = {"calib_max_samples": judged_as.calib_max_samples} if judged_as.calibrated else {}
    inputs = input_paths(source, {"calib": given_calib, "eval_data": eval_data, **reading}, source_options, target)
    with commit_dir(out, "quantized", inputs=inputs, force=force) as work:
        job = new_job(src, target, work, "auto", progress)
        from edgekit.fidelity.assess import SETTINGS_KEY

        job.memo[SETTINGS_KEY] = evaluation  # every candidate judged on the same data
        job.declared_states = dict(evaluation.state)
        job.declared_axes = dict(evaluation.axes)  # --sample-axis: calibration and judging count samples so
        if eval_warning:
            job.warnings.append(eval_warning)
        job.calib_reading = calibration_reading(SimpleNamespace(**reading))
        if calib is not None:  # arrays, images or text: the first batch is checked before the model is loaded
            job.open_calibration(calib)
        cases = write_reference(job, _reference_data(job, judged_as, evaluation))
        candidates: list[Candidate] = []
        built: list[tuple[Candidate, object]] = []
        plan = []
        transformer = (any(spec.quantization.onnx_graph for spec in specs.values())
                       and bool(onnx_graphs.fused_onnx(job, "no-skip-ln")[1].get("skip_layernorm_blocked")))
        for name, method, options in candidate_recipes(src, True, formats, transformer):
            for fmt in formats:
                onnx_graph = specs[fmt].quantization.onnx_graph
                if not src.has_torch and specs[fmt].host.needs_torch_model:
                    continue
                if not onnx_graph and "fusion" in options:
                    continue  # graph layouts are an ONNX matter
                if not onnx_graph and calibrated(method) and (options.get("calibrate_method") != "minmax" or "op_types" in options):
                    continue  # torch's quantizers have one observer recipe each; one candidate is enough
                plan.append((name, method, options, fmt))
        no_calib = (f"no calibration data: edgekit ships none for {src.label}; give --calib {CALIB_KINDS}"
                    if calib is None else None)
        for name, method, options, fmt in list(plan):
            if calibrated(method) and no_calib:  # listed, not built: the table says why
                label = name if specs[fmt].quantization.onnx_graph else f"{method}-{fmt}"
                candidates.append(Candidate(label, method, fmt, options, skipped=no_calib))
                plan.remove((name, method, options, fmt))
        for name, method, options, fmt in plan:
            extra = {"calib": calib, **reading, **held_out} if calibrated(method) else {}
            label = name if specs[fmt].quantization.onnx_graph else f"{method}-{fmt}"
            cand = Candidate(label, method, fmt, options)
            candidates.append(cand)
            report(progress, "auto", len(candidates) - 1, len(plan), f"building {label} ({fmt})")
            folder = job.scratch / f"cand-{len(candidates)}"
            folder.mkdir()
            job.out = folder
            item = None
            try:
                config = make_config(method, formats=(fmt,), **extra, **options)
                item = get_method(method).run(job, config)[0]
                entry = describe_produced(job, item, cases, f"int8-{method}-{fmt}", method)
            except ParityError as exc:  # it diverges from the float model: its row says where and by how much
                cand.refused = str(exc).splitlines()[0].split(": ", 1)[-1]  # less the file's label: the row names it
                cand.bytes = (folder / item.path).stat().st_size if item is not None else 0
                continue
            except EdgekitError as exc:
                cand.error = str(exc).splitlines()[0]
                continue
            finally:
                job.out = None
            stamp(folder, entry, src, target)
            cand.path = str(folder / entry.path)
            cand.bytes = entry.total_bytes
            _judged(cand, entry.metrics)
            cand.meets_budget = cand.within(budget)
            built.append((cand, entry))

        timed = [c for c, _ in built]
        floats = _float_files(job, specs)
        paths = [Path(c.path) for c in timed] + [p for _, p in floats]
        if settings.get("input_file") is None:  # time every candidate on the same batch-1 reference inputs
            import numpy as np

            settings["input_file"] = job.scratch / "bench-inputs.npz"
            np.savez(settings["input_file"], **cases[min(cases)][0])
        bench_inputs = _shapes(settings["input_file"])
        basis = None
        if paths:
            report(progress, "auto-bench", 0, len(paths), f"{len(paths)} files, interleaved")
            results = bench(paths, target=target, **settings)
            for cand, result in zip(timed, results):
                cand.p50_ms = round(result.timing.p50, 4)
            for (fmt, path), result in zip(floats, results[len(timed):]):
                ref = Candidate(f"fp32 {fmt}", "fp32", fmt, {}, str(path), path.stat().st_size, p50_ms=round(result.timing.p50, 4))
                candidates.append(ref)
                for cand in timed:
                    if cand.format == fmt and cand.p50_ms is not None and cand.p50_ms >= ref.p50_ms:
                        cand.slower_than_float = True
                        cand.meets_budget = False
            from edgekit.quantize.search.target_choice import decide_on_target

            basis = decide_on_target(timed, floats, target, budget, emulate=emulate,
                                     progress=lambda message: report(progress, "auto-target", 0, 1, message))

        files = []
        for fmt in formats:
            ok = [(c, e) for c, e in built if c.format == fmt and c.meets_budget]
            if not ok:
                continue
            from edgekit.quantize.search.target_choice import choice_key

            cand, entry = min(ok, key=lambda pair: choice_key(pair[0]))
            cand.chosen = True
            for rel in entry.paths():
                shutil.copyfile(Path(cand.path).parent / rel, work / rel)
            details = {**entry.details, "auto_recipe": cand.name}
            if with_report and specs[fmt].quantization.onnx_graph:
                ranges = None
                if calibrated(cand.method):
                    chosen = make_config(cand.method, calib=calib, formats=(fmt,), **reading, **held_out, **cand.options)
                    ranges = onnx_graphs.activation_ranges(job, chosen)
                details["error_report"] = error_report(job, Path(cand.path), calib, cases, ranges)
            from dataclasses import replace

            files.append(replace(entry, details=details))
        if not files:
            slow = sum(c.slower_than_float for c in timed)
            skipped = sum(c.skipped is not None for c in candidates)
            refused = sum(c.refused is not None for c in candidates)
            failed = len(candidates) - len(built) - len(floats) - skipped - refused
            raise NoCandidateError(
                f"no int8 candidate is within the {budget:g}-point accuracy budget and faster than float for "
                f"{target.name} ({len(built)} built, {failed} failed, {slow} slower than float"
                + (f", {refused} refused: diverging from the float model on {evaluation.kind}" if refused else "")
                + (f", {skipped} static skipped: no calibration data" if skipped else "")
                + ")", candidates, bench_inputs)
        for cand in candidates:
            if cand.path.startswith(str(work)):
                cand.path = Path(cand.path).name if cand.chosen else ""
        quantization = {
            "method": "auto",
            "config": {"calib": str(calib) if calib else None, "formats": list(formats), "max_drop_points": budget,
                       "eval_data": str(eval_data) if eval_data is not None else None,
                       "judged_on": evaluation.kind,
                       "calib_source": "given" if given_calib is not None else "packaged" if calib is not None else None,
                       **{k: str(v) for k, v in reading.items()}},
            "calibration": job.calibration_info or None,
            "candidates": [c.to_dict() for c in candidates],
            "bench_inputs": bench_inputs,
            "target_choice": basis,  # {"basis": what chose the candidates on the target} or {"not_counted": why}
        }
        result = finish(job, files, quantization)
    return Path(out), result, candidates


def _evaluation(src, calib, formats, reading: dict, options: dict):
    """(EvalSettings, the config the data was planned for, a warning or None): what every candidate is
    judged on, as ``quantize --method static`` plans it for this --calib (``fidelity/options.plan``: a
    held-out part of it the static recipes do not calibrate on), or as ``--method dynamic`` without one."""
    from edgekit.fidelity.options import plan, pop_evaluation
    from edgekit.quantize.job import calibration_reading, open_source_calibration

    settings = pop_evaluation(True, {**options, **reading})  # --eval-data is read as --calib is
    config = make_config("static", calib=calib, formats=formats, **reading) if calib is not None else \
        make_config("dynamic", formats=formats)
    states = dict(settings.state)  # --state: the static recipes calibrate on those streams too
    axes = dict(settings.axes)
    return plan(src, config, settings, lambda path, how: open_source_calibration(
        src, path, reading=calibration_reading(config) if how is None else how, declared_states=states,
        declared_axes=axes))


def _judged(cand: Candidate, metrics: dict) -> None:
    """The candidate's row leads with what decides it: accuracy for a labelled model, else the binding
    metric of its fidelity (the output closest to, or past, its floor), with its verdict and evidence."""
    fidelity = metrics.get("fidelity") or {}
    headline = fidelity.get("headline") or {}
    cand.drop_points = metrics["accuracy_drop_points"]
    if metrics["metric"] == "accuracy" or not headline:
        cand.metric = metrics["metric"]
        cand.value = metrics["accuracy"] if cand.metric == "accuracy" else fidelity.get("cosine")
    else:
        cand.metric, cand.value = headline["metric"], headline["value"]
    if headline:
        cand.fidelity = {"output": headline.get("output"), "metric": headline["metric"], "value": headline["value"],
                         "floor": headline.get("floor"), "verdict": fidelity.get("verdict"),
                         "evidence": fidelity.get("evidence"), "seconds": fidelity.get("seconds")}


def _shapes(path) -> dict:
    """Input name -> shape of the batch every candidate was timed on (the user's shapes)."""
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return {name: list(data[name].shape) for name in data.files}


def _float_files(job, specs: dict) -> list[tuple[str, Path]]:
    """The float model in each format of ``specs`` (name -> entry), each in a folder with a manifest, for the latency baseline."""
    out = []
    for fmt, entry in specs.items():
        if entry.host.needs_torch_model and not job.source.has_torch:
            continue
        folder = job.scratch / f"fp32-{fmt}"
        folder.mkdir()
        path = folder / entry.files.file_name
        if not entry.host.needs_torch_model:  # the float graph quantization started from
            onnx_files.copy(job.float_onnx(), path)
        else:
            entry.ops().export_float(job.float_model(), FloatExport(
                path=path, examples=job.example_inputs(), inputs=job.source.inputs, outputs=job.source.outputs,
                provenance={}, family=job.source.label, onnx_preference=preferred_exporter(job.source.label),
                opset=job.target.onnx_opset))
        stamp(folder, describe_file(folder, entry.files.file_name, fmt, precision="fp32"), job.source, job.target)
        out.append((fmt, path))
    return out
