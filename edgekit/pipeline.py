"""``run_pipeline``: train -> quantize -> export -> bench -> gate, every stage through files on disk.

Layout of the output folder::

    checkpoint/                 float checkpoint artifact (edgekit train)
    quantized/<method>/         int8 artifacts (edgekit quantize)
    export/fp32/, export/int8-<method>/   verified model files (edgekit export)
    bench.json                  bench document (one result per variant)
    gate.json, gate.md, junit.xml
    pipeline.json, pipeline.md  the summary table
    report.html                 the same results as pictures (self-contained: inline SVG, no script)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from edgekit.errors import UsageError
from edgekit.fileio import make_dirs, prune_empty, write_json, write_text
from edgekit.pipeline_verdict import SLOWER_THAN_FP32, recommend, recommendation_line  # noqa: F401 - re-exported
from edgekit.outputs import claim_output

Progress = Callable[[str], None]
QUANT_METHODS = ("dynamic", "static", "qat")
DEFAULT_METHODS = ("dynamic", "static")
DEFAULT_MODEL = "digits-mobilenet"  # a MobileNet-style CNN at 32x32: what int8 is for
DEFAULT_PROCESSES = 4  # worker processes per variant in the bench (edgekit.bench.workers)


@dataclass(frozen=True)
class PipelineConfig:
    target: str = "rpi4"
    model: str = DEFAULT_MODEL
    out: Path = Path("runs/pipeline")
    epochs: int | None = None  # None: the model's default (ModelSpec.default_epochs)
    seed: int = 0
    calib: Path | None = None  # None: the calibration set edgekit ships for the model's dataset
    methods: tuple[str, ...] = DEFAULT_METHODS
    formats: tuple[str, ...] | None = None  # None: every format this host can write (edgekit.formats)
    threads: int | None = None
    warmup: int = 10
    min_runs: int = 50
    min_time_s: float = 0.5
    batch: int = 1
    budget_overrides: dict[str, str | float | None] = field(default_factory=dict)
    config_path: Path | None = None
    checkpoint: Path | None = None  # start from this checkpoint artifact instead of training
    force: bool = False  # go on when a model is estimated not to fit the target's RAM (edgekit.limits)
    processes: int = DEFAULT_PROCESSES
    reference: bool = True  # time the reference workload in every bench round (regression gates normalise by it)

    def __post_init__(self) -> None:
        """Every setting is checked here, before anything is trained or written."""
        import math

        for name, low in (("epochs", 1), ("min_runs", 1), ("warmup", 0), ("batch", 1), ("processes", 1)):
            value = getattr(self, name)
            if value is None and name == "epochs":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"{name.replace('_', '-')} must be an integer of at least {low}, got {value!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise UsageError(f"threads must be an integer of at least 1, got {self.threads!r}")
        from edgekit.bounds import check_runs, check_seed, check_threads

        check_threads(self.threads)
        check_seed(self.seed)
        check_runs(self.min_runs, "min-runs")
        if not (isinstance(self.min_time_s, (int, float)) and math.isfinite(self.min_time_s) and self.min_time_s >= 0):
            raise UsageError(f"min-time must be a number of seconds, 0 or more, got {self.min_time_s!r}")
        for method in self.methods:
            if method not in QUANT_METHODS:
                raise UsageError(f"unknown method {method!r}; choose from: {', '.join(QUANT_METHODS)}")
        from edgekit import formats

        if self.formats is None:
            object.__setattr__(self, "formats", formats.available_names())
        formats.check(self.formats)
        if "static" in self.methods and self.calib is not None and not Path(self.calib).exists():
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

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PipelineResult:
    out: Path
    rows: tuple[VariantRow, ...]
    gate_report: object  # edgekit.gates.results.GateReport
    float_accuracy: float | None
    recommended: dict | None = None  # edgekit.pipeline_verdict.recommend

    @property
    def passed(self) -> bool:
        return self.gate_report.passed

    @property
    def warnings(self) -> tuple[str, ...]:
        """int8 variants that are slower than their fp32 counterpart (decided on the ratio's confidence
        interval, edgekit.pipeline_verdict): the problem users hit most."""
        from edgekit.pipeline_verdict import slower_than_fp32, slower_warning

        return tuple(slower_warning(row) for row in self.rows if slower_than_fp32(row))


def run_pipeline(config: PipelineConfig, progress: Progress | None = None) -> PipelineResult:
    from edgekit.targets import load_target

    say = progress or (lambda message: None)
    target = load_target(config.target)
    config = _with_model_defaults(config)
    _check_before_work(config, target, say)  # budgets, sizes: refuse now, not after training
    inputs = [config.checkpoint, config.calib, config.config_path, target.source]
    with claim_output(config.out, "pipeline", inputs=inputs, force=config.force):
        created = make_dirs(config.out)
        try:
            marker = Path(config.out) / "pipeline.json"
            if not marker.exists():  # claims the folder for a rerun, should this run stop half-way
                write_json(marker, {"schema": "edgekit.pipeline", "schema_version": 1, "status": "incomplete"})
            return _run(config, target, say)
        except BaseException:
            if [p.name for p in Path(config.out).iterdir()] == ["pipeline.json"] and _incomplete(marker):
                marker.unlink()
            prune_empty(created)  # a run that failed before writing anything leaves no empty folder
            raise


def _incomplete(marker: Path) -> bool:
    try:
        return json.loads(marker.read_text()).get("status") == "incomplete"
    except (OSError, ValueError):
        return False


def _with_model_defaults(config: PipelineConfig) -> PipelineConfig:
    """Fill what the model decides: its training epochs and the calibration set shipped for its dataset."""
    from dataclasses import replace

    from edgekit.artifacts import load_manifest
    from edgekit.data.calibsets import default_calibration
    from edgekit.models import get_spec

    if config.checkpoint is not None:
        task, epochs = load_manifest(config.checkpoint)[1].task, config.epochs
    else:
        spec = get_spec(config.model)
        task, epochs = spec.task, config.epochs or spec.default_epochs
    calib = config.calib
    if calib is None and "static" in config.methods:
        calib = default_calibration(task.get("dataset"))
        if calib is None:
            raise UsageError(f"edgekit ships no calibration data for {config.model}; pass --calib FOLDER (.npy/.npz)")
    return replace(config, epochs=epochs, calib=calib)


def _check_before_work(config: PipelineConfig, target, say: Progress) -> None:
    from edgekit.artifacts import load_manifest
    from edgekit.gates.budgets import resolve_budgets
    from edgekit.limits import check_calibration_size, check_model_fits, float_parameter_bytes

    resolve_budgets(target, config.config_path, config.budget_overrides)
    if config.checkpoint is not None:
        folder, trained = load_manifest(config.checkpoint)
        if trained.kind != "checkpoint":
            raise UsageError(f"{folder} is a {trained.kind} artifact; --checkpoint takes a float checkpoint")
        name, model_config, inputs = trained.model["name"], trained.model.get("config"), trained.inputs
    else:
        from edgekit.models import get_spec

        spec = get_spec(config.model)
        name, model_config = config.model, None
        inputs = spec.input_spec(spec.config(None))
    float_bytes = float_parameter_bytes(name, model_config)
    for fmt in config.formats:
        warning = check_model_fits(target, float_bytes, fmt, f"the fp32 {fmt} model of {name}", config.force)
        if warning:
            say(f"Warning: {warning}")
    if "static" in config.methods:
        from edgekit.quantize.calibration.data import open_calibration

        warning = check_calibration_size(config.calib)
        if warning:
            say(f"Warning: {warning}")
        open_calibration(config.calib, inputs)  # its first batch is checked now: shape, dtype, finite values


def _quantize_runs(method: str, names: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """(label, formats) per quantize run: QAT fine-tunes once per quantization API, so formats
    of another API (torch.ao vs PT2E) get their own run, labelled ``qat-<first format>``."""
    if method != "qat":
        return [(method, tuple(names))]
    from edgekit import formats

    runs = list(formats.by_qat_api(names).values())
    return [(method if i == 0 else f"{method}-{group[0]}", tuple(group)) for i, group in enumerate(runs)]


def _run(config: PipelineConfig, target, say: Progress) -> PipelineResult:
    from edgekit.artifacts import load_manifest
    from edgekit.bench.api import bench
    from edgekit.bench.result import to_document
    from edgekit.export.api import export
    from edgekit.quantize.api import quantize
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    out = Path(config.out)
    if config.checkpoint is not None:
        checkpoint, trained = load_manifest(config.checkpoint)
        say(f"using checkpoint {checkpoint} ({trained.model['name']}, test accuracy {trained.metrics.get('accuracy', float('nan')):.4f})")
    else:
        say(f"train {config.model} ({config.epochs} epochs)")
        checkpoint, trained = train(TrainConfig(model=config.model, epochs=config.epochs, seed=config.seed),
                                    out / "checkpoint", progress=_epoch_lines(say))
        say(f"  test accuracy {trained.metrics['accuracy']:.4f}")

    exports = []
    say("export fp32")
    exports.append(export(checkpoint, out / "export" / "fp32", config.formats, target))
    for method in config.methods:
        for label, group in _quantize_runs(method, config.formats):
            say(f"quantize int8 {label}")
            options = {"calib": config.calib} if method == "static" else {}
            quantized, _ = quantize(checkpoint, method, out / "quantized" / label, target, formats=group, **options)
            say(f"export int8 {label}")
            exports.append(export(quantized, out / "export" / f"int8-{label}", group, target))

    model_paths = [folder / entry.path for folder, manifest in exports for entry in manifest.files]
    say(f"bench {len(model_paths)} variants on this machine ({config.processes} worker processes each, interleaved)")
    results = bench(
        model_paths,
        target=target,
        threads=config.threads,
        warmup=config.warmup,
        min_runs=config.min_runs,
        min_time_s=config.min_time_s,
        batch=config.batch,
        processes=config.processes,
        reference=config.reference,
    )
    write_json(out / "bench.json", to_document(results))

    say(f"gate against {target.name} budgets")
    report = _gate(results, target, config)
    rows = _rows(exports, results, report)
    result = PipelineResult(out, tuple(rows), report, trained.metrics.get("accuracy"))
    result = replace(result, recommended=recommend(rows, result.float_accuracy, _drop_budget(report)))
    _write_summary(result, config, target)
    _write_report(result, results, config, target)
    return result


def _epoch_lines(say: Progress):
    """Training progress for the pipeline's log: one line per evaluation (each epoch)."""

    def report(record: dict) -> None:
        if record.get("event") == "eval":
            metrics = ", ".join(f"{k[4:].replace('_', ' ')} {v:.4f}" for k, v in record.items()
                                if k.startswith("val_") and isinstance(v, float))
            say(f"  epoch {record['epoch']}/{record['epochs']}: {metrics}")

    return report


def _write_report(result: PipelineResult, results, config: PipelineConfig, target) -> None:
    """report.html: each variant's latency distribution and the size-accuracy-latency trade-off."""
    from edgekit.bench.html_report import write_html

    verdict = "all budgets met" if result.passed else f"{len(result.gate_report.failures)} budget check(s) failed"
    write_html(result.out / "report.html", results, title=f"edgekit pipeline: {config.model} for {target.name}",
               subtitle=f"float test accuracy {_pct(result.float_accuracy)}; gate: {verdict}",
               gates={row.variant: row.gate for row in result.rows})


def _drop_budget(report) -> float | None:
    """The accuracy-drop budget in points the gate applied (the tightest), if any."""
    limits = [c.limit for c in report.checks if c.metric == "accuracy_drop" and c.unit == "pt" and c.limit is not None]
    return min(limits) if limits else None


def _gate(results, target, config: PipelineConfig):
    from edgekit.gates.evaluate import gate_results
    from edgekit.gates.report import to_json, to_junit_xml, to_markdown

    report = gate_results(results, target, config.budget_overrides, config.config_path)
    write_json(config.out / "gate.json", to_json(report))
    write_text(config.out / "gate.md", to_markdown(report))
    write_text(config.out / "junit.xml", to_junit_xml(report))
    return report


def _rows(exports, results, report) -> list[VariantRow]:
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
            )
        )
    return _with_ratios(rows, results)


def _with_ratios(rows: list[VariantRow], results) -> list[VariantRow]:
    """Size and p50 of each variant relative to the fp32 variant of the same format (p50 with its
    95 % interval across worker processes when the bench had several)."""
    from edgekit.pipeline_verdict import p50_ratio

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


def ratio(value: float | None) -> str:
    return "" if value is None else f" ({value:.2f}x)"


def summary_markdown(result: PipelineResult, target_name: str) -> str:
    lines = [
        f"# edgekit pipeline: {target_name}",
        "",
        f"Float model test accuracy: {_pct(result.float_accuracy)}. Benchmarked on this machine; "
        "ratios are against the fp32 variant of the same format, measured in the same run.",
        "",
        "| variant | format | size | accuracy | p50 ms | p99 ms | peak RSS | gate |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in result.rows:
        lines.append(
            f"| {row.variant} | {row.format} | {row.size_bytes / 1024:.1f} KB{ratio(row.size_ratio)} "
            f"| {_pct(row.accuracy)} | {row.p50_ms:.3f}{ratio(row.p50_ratio)} | {row.p99_ms:.3f} "
            f"| {row.peak_rss_mb:.0f} MB | {row.gate} |"
        )
    lines += ["", recommendation_line(result.recommended), ""]
    lines += [f"Gate: **{'PASSED' if result.passed else 'FAILED'}** (details in gate.md)", ""]
    lines += [f"- Warning: {warning}" for warning in result.warnings]
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _write_summary(result: PipelineResult, config: PipelineConfig, target) -> None:
    doc = {
        "schema": "edgekit.pipeline",
        "schema_version": 1,
        "target": target.name,
        "model": config.model,
        "float_accuracy": result.float_accuracy,
        "passed": result.passed,
        "variants": [row.to_dict() for row in result.rows],
        "recommended": result.recommended,
        "warnings": list(result.warnings),
    }
    write_json(result.out / "pipeline.json", doc)
    write_text(result.out / "pipeline.md", summary_markdown(result, target.name))
