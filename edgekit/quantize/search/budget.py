"""Accuracy-aware quantization: keep the most sensitive layers in float until a budget is met.

1. Measure the fully quantized file. Within budget: done.
2. Sensitivity: for every weighted layer, rebuild with only that layer in float and measure the
   remaining drop (on the ``val`` split for labelled models, so the ranking is not tuned on the
   test split that is reported; on the reference inputs' fidelity otherwise).
3. Fall back the most sensitive layers one at a time (rebuilding each time) until the reported
   drop (``test`` split) is within budget. If even every layer in float misses it, raise
   ``AccuracyBudgetError`` with the report: no artifact is written.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.core.errors import GateFailed, EdgekitError
from edgekit.quantize.search import accuracy
from edgekit.quantize.produced import Produced
from edgekit.quantize.progress import report as report_progress
from edgekit.formats.artifacts import describe_file
from edgekit.data.datasets import load_split
from edgekit.formats.evaluation import task_accuracy
from edgekit.quantize.registry import layers_for
from edgekit.quantize.steps import stamp


@dataclass
class BudgetReport:
    format: str
    metric: str
    budget_points: float
    float_value: float
    int8_value: float  # everything quantized
    final_value: float
    met: bool
    float_layers: list[str] = field(default_factory=list)
    sensitivity: list[dict] = field(default_factory=list)  # [{"layer", "op", "drop_points"}], most sensitive first
    bytes_int8: int = 0
    bytes_final: int = 0
    latency_ms: dict = field(default_factory=dict)  # {"int8": p50, "final": p50}

    @property
    def int8_drop(self) -> float:
        return (self.float_value - self.int8_value) * 100.0

    @property
    def final_drop(self) -> float:
        return (self.float_value - self.final_value) * 100.0

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["int8_drop_points"] = round(self.int8_drop, 4)
        data["final_drop_points"] = round(self.final_drop, 4)
        return data

    def summary(self) -> str:
        if self.met and not self.float_layers:
            return f"{self.format}: drop {self.int8_drop:.2f} points is within the {self.budget_points:g}-point budget"
        if self.met:
            return (f"{self.format}: drop {self.int8_drop:.2f} -> {self.final_drop:.2f} points (budget {self.budget_points:g}) "
                    f"with {len(self.float_layers)} layer(s) in float: {', '.join(self.float_layers)}")
        return (f"accuracy budget not met for int8 {self.format}: drop {self.int8_drop:.2f} points fully quantized, "
                f"{self.final_drop:.2f} with all {len(self.float_layers)} weighted layer(s) in float; "
                f"budget {self.budget_points:g} points")


class AccuracyBudgetError(GateFailed):
    """The accuracy budget cannot be met; ``report`` says what was tried."""

    def __init__(self, report: BudgetReport):
        super().__init__(report.summary())
        self.report = report


def candidate_layers(job, config, fmt: str) -> list[tuple[str, str]]:
    """(layer, op) of every weighted layer the sensitivity search may keep in float: the format's own list."""
    return layers_for(fmt)(job, config)


def fit_budget(job, config, method, item: Produced, cases: dict, budget: float, bench_latency: bool = True):
    """(Produced for the final file, BudgetReport). Raises AccuracyBudgetError when unmeetable."""
    fmt = item.format
    path = job.dest / item.path
    source = job.source
    if not config.keeps_layers_float():
        from edgekit.core.errors import UsageError
        from edgekit.quantize.registry import get_method, method_names

        takes = [name for name in method_names() if get_method(name).config_type.keeps_layers_float()]
        raise UsageError(f"method {method.name!r} cannot keep layers in float; --max-drop needs {' or '.join(takes)}")

    def test_measure(p: Path, details: dict) -> accuracy.Measurement:
        return accuracy.measure(source, accuracy.predictor(p, fmt, details), cases, "test")

    first = test_measure(path, item.details)
    report = BudgetReport(fmt, first.metric, budget, first.float_value, first.value, first.value, True,
                          bytes_int8=path.stat().st_size, bytes_final=path.stat().st_size)
    if first.drop_points <= budget:
        return item, report

    int8_copy = job.scratch / f"all-int8-{path.name}"
    shutil.copyfile(path, int8_copy)
    search_split, search_float, search_inputs, search_outputs = _search_reference(job, source, cases)

    def build(excluded: list[str]) -> Produced:
        rebuilt = method.run(job, dataclasses.replace(config, formats=(fmt,), exclude=tuple(excluded)))
        return rebuilt[0]

    def search_drop(produced: Produced) -> tuple[float, float]:
        """(drop in points, SQNR dB of the outputs vs float): accuracy ties are broken by SQNR."""
        p = accuracy.predictor(job.dest / produced.path, fmt, produced.details)
        m = accuracy.measure(source, p, cases, search_split, search_float)
        return m.drop_points, _sqnr(search_outputs, p(search_inputs)) if search_inputs is not None else m.fidelity["sqnr_db"]

    layers = candidate_layers(job, config, fmt)
    sensitivity = []
    report_progress(job.progress, "sensitivity", 0, len(layers), fmt)
    for index, (name, op) in enumerate(layers, 1):
        drop, sqnr = search_drop(build([name]))
        report_progress(job.progress, "sensitivity", index, len(layers), name)
        sensitivity.append({"layer": name, "op": op, "drop_points": round(drop, 4), "sqnr_db": round(sqnr, 3)})
    # the most sensitive layer: the lowest remaining drop with it in float, then the best SQNR
    sensitivity.sort(key=lambda s: (s["drop_points"], -s["sqnr_db"]))
    report.sensitivity = sensitivity

    excluded: list[str] = []
    final = item
    for entry in sensitivity:
        excluded.append(entry["layer"])
        report_progress(job.progress, "fallback", len(excluded), len(sensitivity), entry["layer"])
        final = build(excluded)
        measured = test_measure(job.dest / final.path, final.details)
        report.final_value = measured.value
        if measured.drop_points <= budget:
            break
    report.float_layers = list(excluded)
    report.met = report.final_drop <= budget
    final_path = job.dest / final.path
    report.bytes_final = final_path.stat().st_size
    if not report.met:
        raise AccuracyBudgetError(report)
    if bench_latency:
        report.latency_ms = _latency(job, int8_copy, final_path, fmt)
    details = {**final.details, "float_layers": list(excluded)}
    return Produced(final.path, fmt, details), report


def _search_reference(job, source, cases):
    """(split, float metric on it, inputs, float outputs) for the sensitivity ranking."""
    if not source.labelled:
        return "test", None, None, None

    float_predict = accuracy.float_predictor(job)
    for split in ("val", "test"):
        try:
            data = load_split(source.task["dataset"], split)
        except (ValueError, KeyError):
            continue
        inputs = data.inputs[:512]
        return split, task_accuracy(source.task, float_predict, split), inputs, float_predict(inputs)
    return "test", None, None, None


def _sqnr(reference, got) -> float:
    import numpy as np

    ref = np.asarray(reference, np.float64)
    noise = float(((ref - np.asarray(got, np.float64)) ** 2).sum())
    return float(10 * np.log10((ref**2).sum() / noise)) if noise > 0 else 200.0


def _latency(job, int8_path: Path, final_path: Path, fmt: str) -> dict:
    """p50 (ms) of the fully quantized and the final file, interleaved on this host."""
    from edgekit.bench.api import bench

    copies = []
    for label, path in (("int8", int8_path), ("final", final_path)):
        folder = job.scratch / f"bench-{label}"
        folder.mkdir(exist_ok=True)
        from edgekit import formats

        name = formats.get(fmt).files.file_name
        shutil.copyfile(path, folder / name)
        stamp(folder, describe_file(folder, name, fmt, precision="int8"), job.source, job.target)  # inputs for the runner
        copies.append(folder / name)
    try:
        results = bench(copies, target=job.target, warmup=5, min_runs=30, min_time_s=0.3)
    except EdgekitError as exc:
        return {"error": str(exc)}
    return {"int8": round(results[0].timing.p50, 4), "final": round(results[1].timing.p50, 4)}
