"""``run_pipeline``: train -> quantize -> export -> bench -> gate, every stage through files on disk.

The model is a zoo model trained here, a checkpoint artifact, or any model ``edgekit quantize``
takes (an ``.onnx`` file, ``package.module:factory``, ``hf:CONFIG``): ``edgekit.pipeline.plan``
decides what runs for it and what is skipped (each skip a row of the table, with its reason).

Layout of the output folder::

    checkpoint/                 float checkpoint artifact (edgekit train; zoo models only)
    quantized/<method>/         int8 artifacts (edgekit quantize)
    export/fp32/, export/int8-<method>/   verified model files (edgekit export)
    bench.json                  bench document (one result per variant)
    gate.json, gate.md, junit.xml
    pipeline.json, pipeline.md  the summary table
    report.html                 the same results as pictures (self-contained: inline SVG, no script)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from edgekit.core.errors import InputFileError, UsageError, BenchError, EdgekitError
from edgekit.core.fileio import make_dirs, prune_empty, write_json, write_text, read_json
from edgekit.core.outputs import claim_output
from edgekit.pipeline.plan import DEFAULT_MODEL, Skipped, make_plan, DEFAULT_METHODS, method_entry
from edgekit.pipeline.summary import ratio, summary_markdown  # noqa: F401 - re-exported
from edgekit.pipeline.verdict import SLOWER_THAN_FP32, recommend, recommendation_line  # noqa: F401 - re-exported
from edgekit.quantize.registry import QuantConfig, method_names
from edgekit import formats
from edgekit.records.result import to_document
from edgekit.bundle.build import build_bundle
from edgekit.formats.artifacts import load_manifest
from edgekit.core.bounds import check_field_types, check_runs, check_seed, check_threads
from edgekit.formats.limits import check_calibration_size, check_model_fits
from edgekit.core.targets import load_target
from edgekit.export.api import export
from edgekit.gates.budgets import resolve_budgets
from edgekit.gates.evaluate import gate_results
from edgekit.gates.report import to_json, to_junit_xml, to_markdown
from edgekit.native.toolchain import host_arch
from edgekit.pipeline.summary import write_report, write_summary
from edgekit.pipeline.target import apply_to_gate, python_costs, target_costs, target_ratios
from edgekit.pipeline.verdict import p50_ratio
from edgekit.pipeline.verdict import slower_than_fp32, slower_warning
from edgekit.quantize.api import SOURCE_OPTIONS, quantize_config
from edgekit.quantize.each_format import failed_rows, reason
from edgekit.sources.model_source import hf_config_file
from edgekit.sources.state_pairs import sample_axes

Progress = Callable[[str], None]
DEFAULT_PROCESSES = 4  # worker processes per variant in the bench (edgekit.bench.workers)


@dataclass(frozen=True)
class PipelineConfig:
    target: str = "rpi4"
    model: str = DEFAULT_MODEL
    out: Path = Path("runs/pipeline")
    epochs: int | None = None  # None: the model's default (ModelSpec.default_epochs)
    seed: int = 0
    calib: Path | None = None  # None: the calibration set edgekit ships for the model's dataset
    # how --calib is read, as quantize takes it: an image folder's preprocessing, a text file's tokenizer
    calib_preprocess: str | None = None
    tokenizer: Path | None = None
    # None: DEFAULT_METHODS, static skipped (and said) when there is no calibration data; asked for, it needs some.
    # Each a registered method's name or its config object (StaticConfig(calibrate_method="entropy")): its
    # settings are kept, its formats are the pipeline's, and a calib of None is the pipeline's (edgekit.pipeline.plan)
    methods: tuple[str | QuantConfig, ...] | None = None
    formats: tuple[str, ...] | None = None  # None: every format this host can write (edgekit.formats)
    threads: int | None = None
    warmup: int = 10
    min_runs: int = 50
    min_time_s: float = 0.5
    batch: int = 1
    budget_overrides: dict[str, str | float | None] = field(default_factory=dict)
    config_path: Path | None = None
    checkpoint: Path | None = None  # start from this checkpoint artifact instead of training
    # or from any model quantize takes: model.onnx, package.module:factory, hf:CONFIG, a checkpoint folder
    source: str | Path | None = None
    source_options: dict[str, Any] = field(default_factory=dict)  # input_shapes, ...: as quantize() takes them
    force: bool = False  # go on when a model is estimated not to fit the target's RAM (edgekit.formats.limits)
    processes: int = DEFAULT_PROCESSES
    reference: bool = True  # time the reference workload in every bench round (regression gates normalise by it)
    # count each .pte variant on the target's core under emulation and decide on that (edgekit.pipeline.target)
    emulate: bool = True
    eval_data: Path | None = None  # what every int8 variant is judged on (edgekit.fidelity; else --calib held out)
    require_eval_data: bool = False  # refuse to judge on synthetic inputs
    # input -> the axis that counts its samples in --calib/--eval-data, where it is not detected (--sample-axis)
    sample_axes: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every setting is checked here, before anything is trained or written."""
        import math


        check_field_types(self)

        for name, low in (("epochs", 1), ("min_runs", 1), ("warmup", 0), ("batch", 1), ("processes", 1)):
            value = getattr(self, name)
            if value is None and name == "epochs":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"{name.replace('_', '-')} must be an integer of at least {low}, got {value!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise UsageError(f"threads must be an integer of at least 1, got {self.threads!r}")

        check_threads(self.threads)
        check_seed(self.seed)
        check_runs(self.min_runs, "min-runs")
        if not (isinstance(self.min_time_s, (int, float)) and math.isfinite(self.min_time_s) and self.min_time_s >= 0):
            raise UsageError(f"min-time must be a number of seconds, 0 or more, got {self.min_time_s!r}")

        for method in self.methods or ():
            if isinstance(method, str) and method not in method_names():
                raise UsageError(f"unknown method {method!r}; choose from: {', '.join(method_names())}")
        if self.methods is not None and not self.methods:
            raise UsageError(f"methods is empty; choose from: {', '.join(method_names())}")
        entries = [method_entry(method) for method in self.methods or DEFAULT_METHODS]  # a config of no method: refused
        twice = sorted({name for name, _, _ in entries if [e[0] for e in entries].count(name) > 1})
        if twice:
            raise UsageError(f"methods names {', '.join(twice)} more than once; each method runs once "
                             f"(its files go to quantized/{twice[0]})")

        unknown = sorted(set(self.source_options) - set(SOURCE_OPTIONS))
        if unknown:
            raise UsageError(f"unknown source option(s) {', '.join(unknown)}; choose from: {', '.join(SOURCE_OPTIONS)}")

        if self.formats is None:
            object.__setattr__(self, "formats", formats.available_names())
        formats.check(self.formats)
        calibrated = any(config_type.calibrated for _, config_type, _ in entries)
        if calibrated and self.calib is not None and not Path(self.calib).exists():
            raise UsageError(
                f"calibration data {self.calib} not found (run from the edgekit checkout, or pass --calib)"
            )


@dataclass(frozen=True)
class VariantRow:
    variant: str
    format: str
    path: str
    size_bytes: int
    accuracy: float | None
    p50_ms: float
    p99_ms: float
    peak_rss_mb: float
    gate: str  # pass | fail | skip
    size_ratio: float | None = None  # vs the fp32 variant of the same format, same run
    p50_ratio: float | None = None
    p50_ratio_ci: tuple[float, float] | None = None  # 95 % interval across worker processes
    metric: str = "accuracy"  # what judges it: task accuracy, or fidelity to the float model (no labelled data)
    fidelity: dict | None = None  # cosine, top1_agreement (and sqnr_db) vs the float model on fixed inputs
    target: dict | None = None  # the variant's cost on the target's board (edgekit.pipeline.target.TargetCost)
    target_ratio: float | None = None  # that cost against the fp32 variant of the same format's, on the same basis
    # its Python bundle's cost on the target, where edgekit-run runs the format too (pipeline.target.python_costs)
    in_python: dict | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PipelineResult:
    out: Path
    rows: tuple[VariantRow, ...]
    gate_report: object  # edgekit.gates.results.GateReport
    float_accuracy: float | None
    recommended: dict | None = None  # edgekit.pipeline.verdict.recommend
    model: str = ""  # the model's own name (a zoo name, a checkpoint's model, onnx:FILE, module:..., hf:TYPE)
    metric: str = "accuracy"  # accuracy | fidelity: what the quality column holds
    skipped: tuple = ()  # edgekit.pipeline.plan.Skipped: rows that were not made, and why
    failed: tuple = ()  # those of ``skipped`` that were tried and failed (the run exits non-zero)
    target_name: str = ""  # the board the target column and the decisions are for
    runtime_choice: dict | None = None  # every variant ranked by its count on the target's core (pipeline.choice)

    @property
    def passed(self) -> bool:
        return self.gate_report.passed

    @property
    def warnings(self) -> tuple[str, ...]:
        """int8 variants that are slower than their fp32 counterpart (decided on the ratio's confidence
        interval, edgekit.pipeline.verdict): the problem users hit most."""
        return tuple(slower_warning(row, self.target_name) for row in self.rows if slower_than_fp32(row))


def run_pipeline(config: PipelineConfig, progress: Progress | None = None) -> PipelineResult:

    say = progress or (lambda message: None)
    target = load_target(config.target)
    plan = make_plan(config)  # what runs for this model, what is skipped and why: refused now if it cannot
    config = _with_model_defaults(config, plan)
    _check_before_work(config, target, say, plan)  # budgets, sizes: refuse now, not after training
    inputs = [config.checkpoint, config.calib, config.eval_data, config.config_path, target.source, *_source_paths(config)]
    for line in plan.source_warnings:  # random weights (--random-init), a task head left out
        say(f"Warning: {line}")
    for skip in plan.skipped:
        say(f"skip {', '.join(skip.variants)}: {skip.reason}")
    with claim_output(config.out, "pipeline", inputs=inputs, force=config.force):
        created = make_dirs(config.out)
        try:
            marker = Path(config.out) / "pipeline.json"
            if not marker.exists():  # claims the folder for a rerun, should this run stop half-way
                write_json(marker, {"schema": "edgekit.pipeline.run", "schema_version": 1, "status": "incomplete"})
            return _run(config, plan, target, say)
        except BaseException:
            if [p.name for p in Path(config.out).iterdir()] == ["pipeline.json"] and _incomplete(marker):
                marker.unlink()
            prune_empty(created)  # a run that failed before writing anything leaves no empty folder
            raise


def _incomplete(marker: Path) -> bool:
    try:
        return read_json(marker, "pipeline marker", max_bytes=1 << 20).get("status") == "incomplete"
    except InputFileError:
        return False


def _source_paths(config: PipelineConfig) -> list:
    """The files a --source model is read from: the pipeline's output may be none of them, nor hold one."""
    if config.source is None:
        return [config.source_options.get("state_dict")]

    text = str(config.source)
    return [hf_config_file(text) if text.startswith("hf:") else text, config.source_options.get("state_dict")]


def _with_model_defaults(config: PipelineConfig, plan=None) -> PipelineConfig:
    """Fill what the model decides: its training epochs and the calibration set shipped for its dataset."""
    if plan is None:
        plan = make_plan(config)
    epochs = config.epochs
    if plan.kind == "zoo":
        from edgekit.models import get_spec

        epochs = epochs or get_spec(config.model).default_epochs
    elif epochs is not None:
        raise UsageError(f"--epochs trains a zoo model (--model); {plan.name} is taken as it is")
    return replace(config, epochs=epochs, calib=plan.calib)


def _evaluation(config: PipelineConfig, plan, method_config):
    """What a method run's int8 files are judged on (``edgekit.fidelity.options.for_pipeline``)."""
    from edgekit.fidelity.options import for_pipeline

    calib = plan.calib if plan.calib is not None else config.calib
    return for_pipeline(config.eval_data, calib, method_config, config.require_eval_data, plan.labelled,
                        getattr(config, "calib_preprocess", None), plan.name, config.sample_axes)


def _check_before_work(config: PipelineConfig, target, say: Progress, plan=None) -> None:
    if plan is None:
        plan = make_plan(config)

    axes = sample_axes(plan.inputs, config.sample_axes)  # a --sample-axis the inputs do not have: refused now
    for run in plan.quant_runs:  # --require-eval-data without data is refused now, not as a row after training
        _evaluation(config, plan, run.config)
    resolve_budgets(target, config.config_path, config.budget_overrides)
    if getattr(plan, "source", None) is not None:  # free height/width it cannot run at: ask now, in one line
        from edgekit.sources.spatial_sizes import check_made_up_sizes

        check_made_up_sizes(plan.source, data_helps=False)  # the fp32 row is checked at those sizes
    float_bytes = _float_bytes(plan)
    for fmt, spec in plan.format_entries.items() if float_bytes is not None else ():
        warning = check_model_fits(target, float_bytes, spec, f"the fp32 {fmt} model of {plan.name}", config.force)
        if warning:
            say(f"Warning: {warning}")
    calib = plan.calib if plan.calib is not None else config.calib
    if any(type(run.config).calibrated for run in plan.quant_runs) and calib is not None:
        from edgekit.userdata.sets import open_calibration

        warning = check_calibration_size(calib)
        if warning:
            say(f"Warning: {warning}")
        # its first batch is checked now: shape, dtype, finite values (images and text as quantize reads them)
        open_calibration(calib, plan.inputs, preprocess=config.calib_preprocess, tokenizer=config.tokenizer, axes=axes)


def _float_bytes(plan) -> int | None:
    """The float model's weights in bytes (zoo models and checkpoints: built on the spot; an ONNX
    file: its tensors), or None when it is not known before the model is built (module:, hf:)."""
    if plan.kind in ("zoo", "checkpoint"):
        from edgekit.formats.limits import float_parameter_bytes

        return float_parameter_bytes(plan.name, plan.model_config)
    if plan.onnx_file:
        from edgekit.core import onnx_files

        return onnx_files.tensor_bytes(onnx_files.read(plan.source.onnx_path)[0])
    return None


def _run(config: PipelineConfig, plan, target, say: Progress) -> PipelineResult:
    from edgekit.bench.api import bench

    out = Path(config.out)
    plan, float_accuracy = _float_model(config, plan, out, say)
    source, options = plan.quantize_source, plan.source_options
    specs = plan.format_entries  # each format resolved once, by the plan: the stages are handed the entries

    exports = []
    say("export fp32")
    if plan.onnx_file:  # the file itself is the fp32 model: shipped as ONNX Runtime runs it, checked
        from edgekit.export.onnx_file import export_onnx_file

        exports.append(export_onnx_file(plan.source, out / "export" / "fp32", target))
    else:
        exports.append(export(source, out / "export" / "fp32", tuple(specs.values()), target, **options))
    failed = _failed_variants(exports[-1][1], "fp32")  # each a row with its reason; the others go on
    calibrated_exports = []
    for run in plan.quant_runs:
        precision = type(run.config).precision
        try:
            say(f"quantize {precision} {run.label}")
            quantized, made = quantize_config(source, run.config, out / "quantized" / run.label, target,
                                              source_options=options, evaluation=_evaluation(config, plan, run.config),
                                              format_entries=specs)
            say(f"export {precision} {run.label}")
            exported = export(quantized, out / "export" / f"{precision}-{run.label}",
                              tuple(specs.get(name, name) for name in made.formats()), target)
        except Exception as exc:  # noqa: BLE001 - a method that fails is its rows, with the reason
            from edgekit.quantize.each_format import reason

            say(f"  {precision} {run.label} failed: {reason(exc)}")
            failed.append(Skipped(tuple(f"{precision}-{run.label}-{fmt}" for fmt in run.config.formats),
                                  f"failed: {reason(exc)}"))
            continue
        failed += _failed_variants(made, f"{precision}-{run.label}") + _failed_variants(exported[1], f"{precision}-{run.label}")
        exports.append(exported)
        if type(run.config).calibrated:  # int8 activations too: what the native row runs
            calibrated_exports.append(exports[-1])

    native = _native_row(calibrated_exports, out, target, say, specs)
    if native is not None:
        exports.append(native)
    model_paths = [folder / entry.path for folder, manifest in exports for entry in manifest.files]
    say(f"bench {len(model_paths)} variants on this machine ({config.processes} worker processes each, interleaved)")
    settings = dict(target=target, threads=config.threads, warmup=config.warmup, min_runs=config.min_runs,
                    min_time_s=config.min_time_s, batch=config.batch, processes=config.processes,
                    reference=config.reference, format_entries=specs)
    results, unbenched = _bench_each_standing_alone(bench, model_paths, settings, say)
    if unbenched:
        names = {folder / e.path: e.details.get("variant", e.path) for folder, manifest in exports for e in manifest.files}
        exports = _without_files(exports, {path for path, _ in unbenched})
        failed += [Skipped((names[path],), f"failed: {why}") for path, why in unbenched]
    write_json(out / "bench.json", to_document(results))

    models = [(folder / entry.path, entry.format) for folder, manifest in exports for entry in manifest.files]
    costs = target_costs(models, results, target, emulate=config.emulate, threads=config.threads, progress=say)
    in_python = python_costs(models, costs, target, threads=config.threads, progress=say)

    say(f"gate against {target.name} budgets")
    report = _gate(results, target, config, costs)
    rows = _with_target(_rows(exports, results, report, plan.metric), costs, in_python)
    result = PipelineResult(out, tuple(rows), report, float_accuracy, model=plan.name, metric=plan.metric,
                            skipped=(*plan.skipped, *failed), failed=tuple(failed), target_name=target.name)
    result = replace(result, recommended=recommend(rows, result.float_accuracy, _drop_budget(report)))
    from edgekit.pipeline.choice import runtime_choice

    result = replace(result, runtime_choice=runtime_choice(rows, result.float_accuracy, _drop_budget(report), target))

    write_summary(result, config, target, plan)
    write_report(result, results, target)
    return result


def _failed_variants(manifest, prefix: str) -> list:
    """The formats a quantize or export run could not write (``quantize/each_format``), as rows."""
    return [Skipped((f"{prefix}-{row['format']}",), f"failed: {row['reason']}") for row in failed_rows(manifest)]


def _float_model(config: PipelineConfig, plan, out: Path, say: Progress):
    """(the plan with its checkpoint, the float model's test accuracy or None): a zoo model is
    trained here; a checkpoint or any other source is taken as it is."""
    if plan.kind == "zoo":
        from edgekit.train.config import TrainConfig
        from edgekit.train.loop import train

        say(f"train {config.model} ({config.epochs} epochs)")
        checkpoint, trained = train(TrainConfig(model=config.model, epochs=config.epochs, seed=config.seed),
                                    out / "checkpoint", progress=_epoch_lines(say))
        say(f"  test accuracy {trained.metrics['accuracy']:.4f}")
        return replace(plan, checkpoint=checkpoint), trained.metrics.get("accuracy")
    if plan.kind == "checkpoint":
        from edgekit.formats.artifacts import load_manifest

        _, trained = load_manifest(plan.checkpoint)
        accuracy = trained.metrics.get("accuracy")
        shown = "" if accuracy is None else f", test accuracy {accuracy:.4f}"
        say(f"using checkpoint {plan.checkpoint} ({plan.name}{shown})")
        return plan, accuracy
    say(f"using {plan.source.label} ({plan.name}; no labelled data: judged by fidelity to the float model)"
        if plan.metric == "fidelity" else f"using {plan.source.label} ({plan.name})")
    return plan, plan.source.float_accuracy


def _native_row(exports, out: Path, target, say: Progress, specs: dict):
    """The first ``exports`` file (int8 exports of calibrated methods: static) that a native runner
    runs, as a native bundle built for this host (``edgekit-run``, no Python): (its folder, its
    manifest) for the bench, or None when there is no such export or no compiler."""
    from dataclasses import replace as replace_fields


    for folder, manifest in exports:
        for entry in manifest.files:
            variant = (entry.details or {}).get("variant", "")
            spec = specs.get(entry.format) or formats.get(entry.format)
            if not spec.board.native_runner:
                continue
            host = replace_fields(target, arch=host_arch(), mcpu="", core="")  # budgets stay the target's
            say(f"bundle {variant} with the native runtime (edgekit-run) for this host")
            try:
                bundle = build_bundle(folder, host, out / "native" / variant, fmt=spec, runtime="native",
                                      archive=False, force=True, progress=say)
            except EdgekitError as exc:
                say(f"  skipped the native row: {str(exc).splitlines()[0]}")
                return None
            return load_manifest(bundle)
    return None


def _epoch_lines(say: Progress):
    """Training progress for the pipeline's log: one line per evaluation (each epoch)."""

    def report(record: dict) -> None:
        if record.get("event") == "eval":
            metrics = ", ".join(f"{k[4:].replace('_', ' ')} {v:.4f}" for k, v in record.items()
                                if k.startswith("val_") and isinstance(v, float))
            say(f"  epoch {record['epoch']}/{record['epochs']}: {metrics}")

    return report


def _drop_budget(report) -> float | None:
    """The accuracy-drop budget in points the gate applied (the tightest), if any."""
    limits = [c.limit for c in report.checks if c.metric == "accuracy_drop" and c.unit == "pt" and c.limit is not None]
    return min(limits) if limits else None


def _gate(results, target, config: PipelineConfig, costs=()):
    report = apply_to_gate(gate_results(results, target, config.budget_overrides, config.config_path), costs, target)
    write_json(config.out / "gate.json", to_json(report))
    write_text(config.out / "gate.md", to_markdown(report))
    write_text(config.out / "junit.xml", to_junit_xml(report))
    return report


def _rows(exports, results, report, metric: str = "accuracy") -> list[VariantRow]:
    rows = []
    pairs = [(folder, entry) for folder, manifest in exports for entry in manifest.files]
    for (folder, entry), res, ref in zip(pairs, results, report.models):
        statuses = {c.status for c in report.checks_for(ref.name)}
        gate = "fail" if "fail" in statuses else "pass" if "pass" in statuses else "skip"
        rows.append(
            VariantRow(
                variant=entry.details.get("variant", entry.path),
                format=entry.format,
                path=str(folder / entry.path),
                size_bytes=entry.total_bytes,
                accuracy=entry.metrics.get("accuracy"),
                p50_ms=res.timing.p50,
                p99_ms=res.timing.p99,
                peak_rss_mb=res.memory.peak_rss,
                gate=gate,
                metric=metric,
                fidelity=_fidelity(entry.metrics) if metric == "fidelity" else None,
            )
        )
    return _with_ratios(rows, results)


def _with_target(rows: list[VariantRow], costs, in_python) -> list[VariantRow]:
    ratios = target_ratios([r.format for r in rows], [r.variant for r in rows], costs)
    return [replace(row, target=cost.to_dict(), target_ratio=ratio, in_python=python and python.to_dict())
            for row, cost, ratio, python in zip(rows, costs, ratios, in_python)]


def _fidelity(metrics: dict) -> dict | None:
    """Cosine and top-1 agreement to the float model: an int8 file's measured fidelity, an fp32
    file's parity check (the same two figures, on the export's reference inputs)."""
    found = metrics.get("fidelity") or metrics.get("parity") or {}
    picked = {key: found.get(key) for key in ("cosine", "top1_agreement", "sqnr_db", "evidence", "headline")
              if found.get(key) is not None}
    return picked or None


def _with_ratios(rows: list[VariantRow], results) -> list[VariantRow]:
    """Size and p50 of each variant relative to the fp32 variant of the same format (p50 with its
    95 % interval across worker processes when the bench had several)."""
    fp32 = {row.format: (row, res) for row, res in zip(rows, results) if row.variant.startswith("fp32")}
    out = []
    for row, res in zip(rows, results):
        if row.format not in fp32:
            out.append(row)
            continue
        base, base_res = fp32[row.format]
        value, low, high = p50_ratio(res, base_res) if base.p50_ms > 0 else (None, None, None)
        out.append(
            replace(
                row,
                size_ratio=row.size_bytes / base.size_bytes,
                p50_ratio=value,
                p50_ratio_ci=None if low is None else (low, high),
            )
        )
    return out


def _bench_each_standing_alone(bench, model_paths: list[Path], settings: dict, say: Progress):
    """(results, [(path, reason)]): every variant benched together, interleaved; when that fails
    (a variant that times out, a runner that dies), each one alone, so one variant's failure is its row."""
    try:
        return list(bench(model_paths, **settings)), []
    except BenchError as exc:
        say(f"  the interleaved bench failed ({reason(exc)}); benching each variant alone")
    results, unbenched = [], []
    for path in model_paths:
        try:
            results += bench([path], **settings)
        except BenchError as exc:
            say(f"  {path.parent.name}/{path.name}: {reason(exc)}")
            unbenched.append((path, reason(exc)))
    if not results:  # nothing could be benched: the run's error, not a table of failures
        raise BenchError(unbenched[0][1])
    return results, unbenched


def _without_files(exports, gone: set) -> list:
    return [(folder, replace(manifest, files=tuple(e for e in manifest.files if folder / e.path not in gone)))
            for folder, manifest in exports]
