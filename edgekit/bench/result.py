"""The benchmark result: one versioned JSON schema for local, remote and on-device runs.

A bench document is ``{"schema": "edgekit.bench", "schema_version": 1, "results": [...]}``;
each entry of ``results`` is one model's measurement (``BenchResult.to_dict()``).
The standalone runner (``edgekit/bench/runner.py``) writes exactly this document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgekit.errors import InputFileError

BENCH_SCHEMA = "edgekit.bench"
BENCH_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ModelInfo:
    path: str
    format: str  # onnx | torchscript
    bytes: int
    sha256: str = ""
    precision: str = "fp32"  # fp32 | int8
    variant: str = ""  # e.g. "int8-static-onnx"; empty when unknown
    accuracy: float | None = None  # task metric of this model on held-out data (0..1)
    float_accuracy: float | None = None  # the same metric for the float model it came from


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
        return data

    @classmethod
    def from_dict(cls, data: dict, where: str = "result") -> "BenchResult":
        try:
            return cls(
                model=ModelInfo(**data["model"]),
                runtime=dict(data["runtime"]),
                input_shapes={str(k): [int(d) for d in v] for k, v in data["input_shapes"].items()},
                settings=dict(data["settings"]),
                timing=Timing(**data["timing"]),
                throughput_per_s=float(data["throughput_per_s"]),
                memory=Memory(**data["memory"]),
                host=dict(data["host"]),
                mode=str(data.get("mode", "local")),
                target=data.get("target"),
                created=str(data.get("created", "")),
                notes=tuple(str(n) for n in data.get("notes", ())),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputFileError(f"{where} is not a valid edgekit bench result: {exc}") from None


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
    from edgekit.fileio import read_json

    return from_document(read_json(path, "bench result file"), str(path))
