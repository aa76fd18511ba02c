"""Load-test a served model: N clients in a closed loop, or a fixed request rate, for a duration.

The result is a ``BenchResult`` (the versioned bench JSON ``edgekit gate`` reads): timing is the
latency of the requests that succeeded (2xx), ``throughput_per_s`` their rate over the test's
wall time, ``settings.status_counts`` every answer by HTTP status (and ``timeout`` /
``connection-error`` for none, ``not-sent`` for requests the rate called for while
``max(4 x concurrency, 256)`` already waited for a slot), ``settings.error_rate`` the share that did not succeed. With a
rate, latency counts from each request's scheduled send time, so a slow server cannot hide its
queueing (no coordinated omission). Requests in flight are bounded by ``concurrency``. Requests go
through ``httpload``'s lean keep-alive client, so the client's own cost stays well under the server's.

The server is not trusted: its model description (``/v1/model``, asked first) and ``/metrics`` are
read up to ``MAX_DESCRIPTION_BYTES`` (uncompressed, within the timeout), and the description's
values are checked before they shape a request (``describe``): an answer that is not one is a
one-line ``BenchError`` (exit 1). During the load, a response that breaks HTTP or the client's
bounds (``httpload``) is a failed request, counted as ``connection-error``.
"""

from __future__ import annotations

import array
import asyncio
import collections
import io
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import BenchError, InputFileError, UsageError
from edgekit.records.result import BenchResult, Memory, ModelInfo, Timing
from edgekit.board.facts import host_facts
from edgekit.board.stats import summarize_ns
from edgekit.serve.auth import key_error
from edgekit.serve.httpload import LoadClient

MAX_DURATION_S = 3600.0
MAX_DESCRIPTION_BYTES = 1 << 20  # /v1/model and /metrics answers
MAX_INPUT_BYTES = 256 << 20  # the body every request sends (--input, or the zeros of the described shapes)
MAX_INPUTS = 64
_INPUT_NAME = re.compile(r"[^\x00-\x1f\x7f/\\]{1,200}")
_DTYPES = ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")


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
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise UsageError(f"URL must start with http:// or https://, got {url!r}")
    why = key_error(api_key, "--api-key (or EDGEKIT_API_KEY)")
    if why:
        raise UsageError(why)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    status, text = bounded_get(f"{base}/v1/model", headers, settings.timeout_s)
    if status != 200:
        raise BenchError(f"{base}/v1/model answered {status}: {_printable(text[:200])}")
    info = describe(text, f"{base}/v1/model")
    body, content_type, shapes = request_body(info, input_file, base)
    stats = asyncio.run(_drive(f"{base}/v1/predict", body, {**headers, "Content-Type": content_type}, settings))
    peak_rss = _server_peak_rss_mb(base, headers, settings.timeout_s)
    return _result(base, info, shapes, settings, stats, peak_rss)


def bounded_get(url: str, headers: dict, timeout_s: float, limit: int = MAX_DESCRIPTION_BYTES) -> tuple[int, bytes]:
    """(status, body) of a GET, the body read uncompressed up to ``limit`` bytes within ``timeout_s``
    in all; a server past either, or not speaking HTTP, is a BenchError."""
    import httpx

    deadline = time.monotonic() + timeout_s
    try:
        with httpx.stream("GET", url, headers={**headers, "Accept-Encoding": "identity"}, timeout=timeout_s) as answer:
            if answer.headers.get("content-encoding", "identity").strip().lower() != "identity":
                raise BenchError(f"{url} answered with a compressed body ({answer.headers['content-encoding'][:40]!r}), "
                                 "which was not asked for")
            chunks, size = [], 0
            for chunk in answer.iter_raw():
                size += len(chunk)
                if size > limit:
                    raise BenchError(f"{url} answered more than {limit} bytes; a model description is far smaller")
                if time.monotonic() > deadline:
                    raise BenchError(f"{url} did not finish its answer within {timeout_s:g} s")
                chunks.append(chunk)
            return answer.status_code, b"".join(chunks)
    except httpx.HTTPError as exc:
        raise BenchError(f"cannot reach {url}: {_printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}") from None


def _printable(text) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:200]


def describe(text: bytes, where: str) -> dict:
    """The server's model description, with only the values it may hold: input names, dtypes and
    shapes a request can be built from, and short strings/numbers for the result; BenchError else."""
    from edgekit.serve.inputs import parse_json

    def bad(why: str) -> BenchError:
        return BenchError(f"{where} is not a model description: {why}")

    try:
        doc = parse_json(text)
    except (ValueError, RecursionError) as exc:
        raise bad(f"not JSON ({_printable(str(exc))[:100]})") from None
    if not isinstance(doc, dict):
        raise bad(f"a JSON {type(doc).__name__}, not an object")
    raw_inputs = doc.get("inputs") or []
    if not isinstance(raw_inputs, list) or len(raw_inputs) > MAX_INPUTS:
        raise bad(f'"inputs" must be a list of at most {MAX_INPUTS} inputs')
    inputs = []
    for item in raw_inputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not _INPUT_NAME.fullmatch(item["name"]):
            raise bad("an input without a plain name (1-200 characters, no control characters or slashes)")
        dtype = item.get("dtype", "float32")
        if dtype not in _DTYPES:
            raise bad(f"input {item['name']!r} has dtype {_printable(str(dtype))[:40]!r}; one of {', '.join(_DTYPES)}")
        shape = item.get("shape")
        if shape is not None and (not isinstance(shape, list) or len(shape) > 32 or not all(
                d is None or (isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 2**31) for d in shape)):
            raise bad(f"input {item['name']!r} has shape {_printable(str(shape))[:60]}; a list of sizes (or null)")
        inputs.append({"name": item["name"], "dtype": dtype, "shape": shape})
    text_of = lambda key, default: doc[key][:200] if isinstance(doc.get(key), str) else default  # noqa: E731
    size = doc.get("bytes")
    batching = doc.get("batching")
    return {
        "inputs": inputs, "format": text_of("format", "http"), "precision": text_of("precision", "fp32"),
        "sha256": text_of("sha256", ""), "runtime": text_of("runtime", None),
        "bytes": size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0,
        "batching": {k[:60]: v for k, v in list(batching.items())[:16] if isinstance(k, str) and (
            v is None or isinstance(v, (bool, int, str)) or isinstance(v, float) and math.isfinite(v))}
        if isinstance(batching, dict) else None,
    }


def request_body(info: dict, input_file: str | Path | None, where: str = "the server") -> tuple[bytes, str, dict]:
    """The body every request sends: the --input .npz as is, else zeros of the inputs' shapes (.npz)."""
    import numpy as np

    if input_file is not None:
        from edgekit.serve.inputs import InputError, read_npz

        path = Path(input_file)
        if not path.is_file():
            raise InputFileError(f"input file not found: {path}")
        if path.stat().st_size > MAX_INPUT_BYTES:
            raise InputFileError(f"{path} is {path.stat().st_size} bytes; a request body of at most {MAX_INPUT_BYTES} is sent")
        data = path.read_bytes()
        try:
            arrays = read_npz(data, MAX_INPUT_BYTES)
        except InputError as exc:
            raise InputFileError(f"{path} is not a readable .npz: {exc}") from None
        return data, "application/x-npz", {name: list(a.shape) for name, a in arrays.items()}
    inputs = info.get("inputs") or []
    if not inputs or any(i.get("shape") is None for i in inputs):
        raise UsageError("the server does not say its input shapes; give --input file.npz")
    shapes = {i["name"]: [1 if d is None else d for d in i["shape"]] for i in inputs}
    total = sum(math.prod(shape) * np.dtype(i["dtype"]).itemsize for shape, i in zip(shapes.values(), inputs))
    if total > MAX_INPUT_BYTES:
        raise BenchError(f"{where} describes inputs of {total} bytes; a request body of at most {MAX_INPUT_BYTES} is sent "
                         "(give --input file.npz)")
    arrays = {i["name"]: np.zeros(shapes[i["name"]], dtype=i["dtype"]) for i in inputs}
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
    """The server's peak RSS from its /metrics (0 when it does not say, or says nonsense)."""
    try:
        status, body = bounded_get(f"{base}/metrics", headers, timeout_s)
    except BenchError:
        return 0.0
    if status != 200:
        return 0.0
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith("edgekit_peak_rss_bytes "):
            try:
                value = float(line.split()[1][:40]) / (1 << 20)
            except (IndexError, ValueError):
                return 0.0
            return value if math.isfinite(value) and 0 <= value <= 1 << 30 else 0.0
    return 0.0


def _result(base: str, info: dict, shapes: dict, settings: LoadSettings, stats: _Stats, peak_rss_mb: float):
    import datetime


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
