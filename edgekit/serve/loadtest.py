"""Load-test a served model: N clients in a closed loop, or a fixed request rate, for a duration.

The result is a ``BenchResult`` (the versioned bench JSON ``edgekit gate`` reads): timing is the
latency of the requests that succeeded (2xx), ``throughput_per_s`` their rate over the test's
wall time, ``settings.status_counts`` every answer by HTTP status (and ``timeout`` /
``connection-error`` for none, ``not-sent`` for requests the rate called for while
``max(4 x concurrency, 256)`` already waited for a slot), ``settings.error_rate`` the share that did not succeed. With a
rate, latency counts from each request's scheduled send time, so a slow server cannot hide its
queueing (no coordinated omission). Requests in flight are bounded by ``concurrency``. Requests go
through ``httpload``'s lean keep-alive client, so the client's own cost stays well under the server's.
"""

from __future__ import annotations

import array
import asyncio
import collections
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import BenchError, InputFileError, UsageError

MAX_DURATION_S = 3600.0


@dataclass(frozen=True)
class LoadSettings:
    concurrency: int = 16
    duration_s: float = 10.0
    rate: float | None = None  # requests per second (open loop); None: closed loop
    timeout_s: float = 30.0
    warmup_requests: int = 5

    def __post_init__(self):
        if not 1 <= self.concurrency <= 10_000:
            raise UsageError(f"--concurrency must be within 1..10000, got {self.concurrency}")
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise UsageError(f"--duration must be within 0..{MAX_DURATION_S:g} s, got {self.duration_s}")
        if self.rate is not None and not (math.isfinite(self.rate) and 0 < self.rate <= 1e6):
            raise UsageError(f"--rate must be a positive number of requests per second, got {self.rate}")
        if not 0 < self.timeout_s <= 600:
            raise UsageError(f"--timeout must be within 0..600 s, got {self.timeout_s}")
        if not 0 <= self.warmup_requests <= 100_000:
            raise UsageError(f"--warmup must be within 0..100000, got {self.warmup_requests}")


def loadtest(url: str, settings: LoadSettings = LoadSettings(), *, input_file: str | Path | None = None,
             api_key: str | None = None):
    """Drive the server at ``url`` (its /v1/predict) and measure; returns a BenchResult."""
    import httpx

    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise UsageError(f"URL must start with http:// or https://, got {url!r}")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        summary = httpx.get(f"{base}/v1/model", headers=headers, timeout=settings.timeout_s)
    except httpx.HTTPError as exc:
        raise BenchError(f"cannot reach {base}: {exc}") from None
    if summary.status_code != 200:
        raise BenchError(f"{base}/v1/model answered {summary.status_code}: {summary.text[:200]}")
    info = summary.json()
    body, content_type, shapes = request_body(info, input_file)
    stats = asyncio.run(_drive(f"{base}/v1/predict", body, {**headers, "Content-Type": content_type}, settings))
    peak_rss = _server_peak_rss_mb(base, headers, settings.timeout_s)
    return _result(base, info, shapes, settings, stats, peak_rss)


def request_body(info: dict, input_file: str | Path | None) -> tuple[bytes, str, dict]:
    """The body every request sends: the --input .npz as is, else zeros of the inputs' shapes (JSON)."""
    import numpy as np

    if input_file is not None:
        path = Path(input_file)
        if not path.is_file():
            raise InputFileError(f"input file not found: {path}")
        try:
            with np.load(path, allow_pickle=False) as data:
                shapes = {name: list(data[name].shape) for name in data.files}
        except (OSError, ValueError) as exc:
            raise InputFileError(f"{path} is not a readable .npz: {exc}") from None
        return path.read_bytes(), "application/x-npz", shapes
    inputs = info.get("inputs") or []
    if not inputs or any(i.get("shape") is None for i in inputs):
        raise UsageError("the server does not say its input shapes; give --input file.npz")
    arrays = {i["name"]: np.zeros([1 if d is None else int(d) for d in i["shape"]], dtype=i.get("dtype", "float32"))
              for i in inputs}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue(), "application/x-npz", {k: list(v.shape) for k, v in arrays.items()}


@dataclass
class _Stats:
    latencies_ns: list
    statuses: collections.Counter
    wall_s: float
    first_ms: float


async def _drive(url: str, body: bytes, headers: dict, settings: LoadSettings) -> _Stats:
    from edgekit.serve.httpload import LoadClient

    statuses: collections.Counter = collections.Counter()
    latencies = array.array("q")  # 8 bytes a request: an hour at 10k req/s stays under 300 MB
    client = LoadClient(url, body, headers, settings.timeout_s, settings.concurrency)
    try:

        async def one(scheduled_ns: int | None = None, record: bool = True) -> None:
            started = scheduled_ns or time.perf_counter_ns()
            status = await client.post()
            if record:
                statuses[status] += 1
                if status.startswith("2"):
                    latencies.append(time.perf_counter_ns() - started)

        first = time.perf_counter_ns()
        await one(record=False)
        first_ms = (time.perf_counter_ns() - first) / 1e6
        for _ in range(settings.warmup_requests):
            await one(record=False)
        start = time.perf_counter()
        end = start + settings.duration_s
        if settings.rate is None:
            async def worker():
                while time.perf_counter() < end:
                    await one()
            await asyncio.gather(*(worker() for _ in range(settings.concurrency)))
        else:
            slots = asyncio.Semaphore(settings.concurrency)
            tasks = set()

            async def scheduled(at_ns: int):
                async with slots:
                    await one(at_ns)

            backlog = max(4 * settings.concurrency, 256)  # requests waiting for a slot, at most
            start_ns = time.perf_counter_ns()
            interval_ns = 1e9 / settings.rate
            i = 0
            while True:
                at_ns = start_ns + int(i * interval_ns)
                if time.perf_counter() >= end or at_ns >= start_ns + settings.duration_s * 1e9:
                    break
                delay = (at_ns - time.perf_counter_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                i += 1
                if len(tasks) >= backlog:  # the server falls behind the rate: count, do not pile up
                    statuses["not-sent"] += 1
                    continue
                task = asyncio.create_task(scheduled(at_ns))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
        wall = time.perf_counter() - start
    finally:
        client.close()
    return _Stats(latencies, statuses, wall, first_ms)


def _server_peak_rss_mb(base: str, headers: dict, timeout_s: float) -> float:
    import httpx

    try:
        text = httpx.get(f"{base}/metrics", headers=headers, timeout=timeout_s).text
    except httpx.HTTPError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("edgekit_peak_rss_bytes "):
            try:
                return float(line.split()[1]) / (1 << 20)
            except (IndexError, ValueError):
                return 0.0
    return 0.0


def _result(base: str, info: dict, shapes: dict, settings: LoadSettings, stats: _Stats, peak_rss_mb: float):
    import datetime

    from edgekit.bench.result import BenchResult, Memory, ModelInfo, Timing
    from edgekit.bench.runner import host_facts, summarize_ns

    total = sum(stats.statuses.values())
    ok = len(stats.latencies_ns)
    if not ok:
        raise BenchError(f"no request to {base} succeeded in {settings.duration_s:g} s "
                         f"(answers: {json.dumps(dict(stats.statuses))})")
    timing = summarize_ns(stats.latencies_ns)
    timing = Timing(load=0.0, first_run=stats.first_ms, **{k: timing[k] for k in
                    ("p50", "p90", "p95", "p99", "mean", "std", "min", "max", "runs")}, total_s=stats.wall_s)
    model = ModelInfo(path=base, format=str(info.get("format", "http")), bytes=int(info.get("bytes") or 0),
                      sha256=str(info.get("sha256") or ""), precision=str(info.get("precision") or "fp32"),
                      variant=f"served-{info.get('format', 'model')}")
    counts = {k: stats.statuses[k] for k in sorted(stats.statuses)}
    return BenchResult(
        model=model,
        runtime={"name": "http", "server": info.get("runtime"), "url": base, "batching": info.get("batching")},
        input_shapes=shapes,
        settings={"loadtest": True, "concurrency": settings.concurrency, "rate": settings.rate,
                  "duration_s": settings.duration_s, "requests": total, "status_counts": counts,
                  "error_rate": round((total - ok) / total, 6) if total else 0.0, "warmup": settings.warmup_requests},
        timing=timing,
        throughput_per_s=ok / stats.wall_s if stats.wall_s > 0 else 0.0,
        memory=Memory(peak_rss=peak_rss_mb, rss_before_load=0.0, load_growth=0.0),
        host=host_facts(),
        mode="loadtest",
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        notes=(f"load test of {base}/v1/predict: "
               + (f"{settings.rate:g} requests/s, at most {settings.concurrency} in flight"
                  if settings.rate else f"{settings.concurrency} clients in a closed loop")
               + f" for {settings.duration_s:g} s; timing is the latency of the {ok} of {total} requests that succeeded; "
               "peak RSS is the server's",),
    )
