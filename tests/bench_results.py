"""A synthetic bench result for gate and bench tests (shared by tests/gates and tests/bench)."""

from __future__ import annotations

from edgekit.records.result import BenchResult, Memory, ModelInfo, Timing
from edgekit.gates.evaluate import Z90

MiB = 1024 * 1024


def make_result(
    variant: str = "int8",
    path: str | None = None,
    size_mb: float = 4.2,
    p50: float = 10.0,
    p99: float = 15.0,
    std: float = 0.5,
    runs: int = 200,
    peak_rss: float = 300.0,
    accuracy: float | None = 0.912,
    float_accuracy: float | None = 0.92,
    target: str | None = "rpi4",
) -> BenchResult:
    """A bench result whose p90 - p50 equals 1.2816 std, so both jitter estimates agree."""
    p90 = p50 + Z90 * std
    return BenchResult(
        model=ModelInfo(
            path=path or f"out/{variant}/model.onnx",
            format="onnx",
            bytes=round(size_mb * MiB),
            variant=variant,
            accuracy=accuracy,
            float_accuracy=float_accuracy,
        ),
        runtime={"name": "onnxruntime", "threads": 4},
        input_shapes={"input": [1, 3, 32, 32]},
        settings={"warmup": 10},
        timing=Timing(5.0, 20.0, p50, p90, p90, p99, p50, std, p50 * 0.9, p99 * 1.1, runs, runs * p50 / 1000),
        throughput_per_s=1000 / p50 if p50 else 0.0,
        memory=Memory(peak_rss, 100.0, 50.0),
        host={"machine": "aarch64"},
        target=target,
    )
