"""The benchmark result: one versioned JSON schema for local, remote and on-device runs.

A bench document is ``{"schema": "edgekit.bench", "schema_version": 1, "results": [...]}``;
each entry of ``results`` is one model's measurement (``BenchResult.to_dict()``).
The board's runner (``edgekit/board/runner.py``) writes exactly this document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgekit.records.instructions import read_section
from edgekit.records.stats import Spread
from edgekit.core.errors import InputFileError
from edgekit.core.fileio import read_json

BENCH_SCHEMA = "edgekit.bench"
BENCH_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ModelInfo:
    path: str
    format: str  # a name in the format table: onnx | torchscript | executorch
    bytes: int
    sha256: str = ""
    precision: str = "fp32"  # fp32 | int8
    variant: str = ""  # e.g. "int8-static-onnx"; empty when unknown
    accuracy: float | None = None  # task metric of this model on held-out data (0..1)
    float_accuracy: float | None = None  # the same metric for the float model it came from
    # per-output fidelity to the float model and its evidence (edgekit.board.manifest.fidelity_summary)
    fidelity: dict[str, Any] | None = None


@dataclass(frozen=True)
class Timing:
    """Milliseconds. ``load`` and ``first_run`` are measured once, apart from the steady state."""

    load: float
    first_run: float
    p50: float
    p90: float
    p95: float
    p99: float
    mean: float
    std: float
    min: float
    max: float
    runs: int
    total_s: float


@dataclass(frozen=True)
class Memory:
    """Megabytes (MiB) of resident memory of the benchmark process."""

    peak_rss: float
    rss_before_load: float
    load_growth: float


@dataclass(frozen=True)
class BenchResult:
    model: ModelInfo
    runtime: dict[str, Any]  # name, version, threads, engine, providers
    input_shapes: dict[str, list[int]]
    settings: dict[str, Any]  # warmup, min_runs, min_time_s, batch
    timing: Timing
    throughput_per_s: float
    memory: Memory
    host: dict[str, Any]
    mode: str = "local"  # local | remote | emulated
    target: str | None = None
    created: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    tokens_per_s: float | None = None  # language models: greedy generation rate (edgekit.llm.tokens_per_s)
    # Across worker processes (bench(processes=N), N >= 2): each process's median and the 95 %
    # confidence interval of their mean. None for a single process (older documents have none).
    spread: Spread | None = None
    # bench(reference=True): {"name": workload, "process_p50": [ms per round]} of the reference
    # workload timed in the same rounds (edgekit.bench.reference); None otherwise.
    reference: dict[str, Any] | None = None
    # bench --emulate: executed aarch64 instructions on the target's core (edgekit.records.instructions); None otherwise.
    emulated: dict[str, Any] | None = None

    @property
    def p50_interval(self) -> tuple[float, float, float] | None:
        """(centre, low, high) in ms of the p50 across processes; None without a spread of 2+ processes."""
        if self.spread is None or self.spread.processes < 2:
            return None
        return self.spread.center, self.spread.ci_low, self.spread.ci_high

    @property
    def accuracy_drop_points(self) -> float | None:
        if self.model.accuracy is None or self.model.float_accuracy is None:
            return None
        return (self.model.float_accuracy - self.model.accuracy) * 100.0

    @property
    def size_mb(self) -> float:
        return self.model.bytes / (1024 * 1024)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["notes"] = list(self.notes)
        if self.spread is None:
            del data["spread"]  # documents without one read as before
        else:
            data["spread"] = self.spread.to_dict()
        if self.reference is None:
            del data["reference"]
        if self.model.fidelity is None:
            del data["model"]["fidelity"]  # documents without one read as before
        if self.emulated is None:
            del data["emulated"]
        return data

    @classmethod
    def from_dict(cls, data: dict, where: str = "result") -> "BenchResult":
        """Read one result; wrong types, NaN/negative figures and unknown fields are InputFileErrors
        naming the field (a gate must never pass on a figure it cannot compare)."""
        try:
            if not isinstance(data, dict):
                raise ValueError(f"must be a JSON object, got {type(data).__name__}")
            model = ModelInfo(**_table(data, "model"))
            _check_model(model)
            timing = Timing(**_table(data, "timing"))
            for name in Timing.__dataclass_fields__:
                if name == "runs":
                    _count(timing.runs, "timing.runs", low=1)
                else:
                    _figure(getattr(timing, name), f"timing.{name}")
            memory = Memory(**_table(data, "memory"))
            for name in Memory.__dataclass_fields__:
                _figure(getattr(memory, name), f"memory.{name}", allow_negative=name == "load_growth")
            shapes = _table(data, "input_shapes")
            return cls(
                model=model,
                runtime=_table(data, "runtime"),
                input_shapes={str(k): [_count(d, f"input_shapes.{k}", low=0) for d in _list(v, f"input_shapes.{k}")]
                              for k, v in shapes.items()},
                settings=_table(data, "settings"),
                timing=timing,
                throughput_per_s=_figure(data["throughput_per_s"], "throughput_per_s"),
                memory=memory,
                host=_table(data, "host"),
                mode=str(data.get("mode", "local")),
                target=data.get("target") if isinstance(data.get("target"), (str, type(None))) else str(data["target"]),
                created=str(data.get("created", "")),
                notes=tuple(str(n) for n in _list(data.get("notes", []), "notes")),
                tokens_per_s=None if data.get("tokens_per_s") is None else _figure(data["tokens_per_s"], "tokens_per_s"),
                spread=None if data.get("spread") is None else _spread(data["spread"]),
                reference=None if data.get("reference") is None else _reference(data["reference"]),
                emulated=None if data.get("emulated") is None else read_section(data["emulated"]),
            )
        except KeyError as exc:
            raise InputFileError(f"{where} is not a valid edgekit bench result: missing field {exc}") from None
        except (TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise InputFileError(f"{where} is not a valid edgekit bench result: {exc!r:.200}") from None


def _spread(raw) -> Spread:
    """A ``spread`` entry, checked: consistent counts, finite positive figures, low <= centre <= high."""
    if not isinstance(raw, dict):
        raise ValueError(f"spread must be a JSON object, got {type(raw).__name__}")
    medians = tuple(_figure(v, "spread.process_p50") for v in _list(raw.get("process_p50"), "spread.process_p50"))
    processes = _count(raw.get("processes"), "spread.processes", low=1)
    if len(medians) != processes:
        raise ValueError(f"spread.process_p50 holds {len(medians)} values for {processes} processes")
    center, low, high = (_figure(raw.get(k), f"spread.{k}") for k in ("center", "ci_low", "ci_high"))
    if not (low <= center * (1 + 1e-9) and center <= high * (1 + 1e-9)):
        raise ValueError(f"spread interval [{low}, {high}] does not hold its centre {center}")
    confidence = _figure(raw.get("confidence", 0.95), "spread.confidence")
    if not 0 < confidence < 1:
        raise ValueError(f"spread.confidence must be within 0..1, got {confidence!r}")
    return Spread(processes, medians, center, low, high, confidence)


def _reference(raw) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ValueError("reference must be a JSON object with a name")
    medians = [_figure(v, "reference.process_p50") for v in _list(raw.get("process_p50"), "reference.process_p50")]
    if not medians or any(v <= 0 for v in medians):
        raise ValueError("reference.process_p50 must hold positive medians")
    return {"name": raw["name"], "process_p50": medians}


def _table(data: dict, key: str) -> dict:
    value = data[key]
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a JSON object, got {type(value).__name__}")
    return dict(value)


def _list(value, what: str) -> list:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    return value


# No measured figure comes near these (1e15 ms is 30,000 years; 2**62 bytes is 4 EiB): past them a
# number is damage or an attack, and would overflow the arithmetic and the tables that use it.
MAX_FIGURE = 1e15
MAX_COUNT = 1 << 62


def _figure(value, what: str, allow_negative: bool = False) -> float:
    """A measured number: finite and within ``MAX_FIGURE``, and not negative unless allowed."""
    low = -MAX_FIGURE if allow_negative else 0
    # the comparisons are false for NaN, and exact (no float conversion) for an integer of any size
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= MAX_FIGURE:
        raise ValueError(f"{what} must be a finite number{'' if allow_negative else ' >= 0'} "
                         f"of at most {MAX_FIGURE:g}, got {_shown(value)}")
    return float(value)


def _count(value, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
        raise ValueError(f"{what} must be an integer >= {low} (at most 2**62), got {_shown(value)}")
    return value


def _shown(value) -> str:
    """``repr`` of a bad value, cut short (a huge integer by its size: printing it would be slow)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_model(model: ModelInfo) -> None:
    for name in ("path", "format", "sha256", "precision", "variant"):
        if not isinstance(getattr(model, name), str):
            raise ValueError(f"model.{name} must be text, got {getattr(model, name)!r}")
    _count(model.bytes, "model.bytes")
    if model.fidelity is not None and not isinstance(model.fidelity, dict):
        raise ValueError(f"model.fidelity must be a table, got {_shown(model.fidelity)}")
    for name in ("accuracy", "float_accuracy"):
        value = getattr(model, name)
        if value is not None and not (0.0 <= _figure(value, f"model.{name}") <= 1.0):
            raise ValueError(f"model.{name} must be a fraction within 0..1, got {value!r}")


def to_document(results: list[BenchResult]) -> dict:
    return {
        "schema": BENCH_SCHEMA,
        "schema_version": BENCH_SCHEMA_VERSION,
        "results": [r.to_dict() for r in results],
    }


def from_document(doc: Any, where: str = "bench document") -> list[BenchResult]:
    if not isinstance(doc, dict) or doc.get("schema") != BENCH_SCHEMA:
        raise InputFileError(f"{where} is not an edgekit bench result (schema {BENCH_SCHEMA!r} expected)")
    version = doc.get("schema_version")
    if version != BENCH_SCHEMA_VERSION:
        raise InputFileError(
            f"{where} has bench schema version {version!r}; this edgekit reads version {BENCH_SCHEMA_VERSION}"
        )
    results = doc.get("results")
    if not isinstance(results, list) or not results:
        raise InputFileError(f"{where} holds no results")
    return [BenchResult.from_dict(r, f"{where} result #{i + 1}") for i, r in enumerate(results)]


def load_results(path: str | Path) -> list[BenchResult]:
    return from_document(read_json(path, "bench result file"), str(path))
