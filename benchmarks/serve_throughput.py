"""`edgekit serve` under load: micro-batching vs none, server overhead, Ray Serve 2 replicas vs 1.

One run on this host, figures side by side:

1. Micro-batching at concurrency 16 (closed loop, `edgekit loadtest`'s client in this process):
   the same ONNX model behind servers started together, `--max-batch 16` and `--max-batch 1`
   (the same code path, one request per model call), load-tested in alternating rounds;
   throughput, p50/p99 under load and the server's CPU time per request. A third server, for
   reference and not an edgekit mode, skips the batcher and lets every request queue its own
   call on the inference thread (calls pipeline there): the strongest no-batching design we
   know for a tiny model, so the gain over it is also printed.
   Two models: the digits CNN (`digits-cnn`, the default training model, 1x1x8x8 input, a
   ~20 µs model: HTTP costs dominate) and the zoo transformer-lm at 128 tokens (a model whose
   own time dominates).
2. Server overhead: p50 of /v1/predict for the digits CNN, one request at a time (through the
   load test's lean client), minus the p50 of a bare `session.run` on the same file (1 thread),
   both measured here.
3. Ray Serve (`edgekit serve --ray`): 1 replica vs 2 replicas on a local Ray instance,
   concurrency 16 on the digits CNN (each replica 1 thread).

    .venv/bin/python benchmarks/serve_throughput.py [--duration 5] [--rounds 3] [--no-ray]
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def bare_p50_ms(model: Path, feed: dict, n: int = 3000) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    for _ in range(100):
        session.run(None, feed)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def sequential_p50_ms(url: str, body: bytes, n: int = 1000) -> float:
    """p50 round trip of /v1/predict, one request at a time, through loadtest's lean keep-alive client."""
    import asyncio

    from edgekit.serve.httpload import LoadClient

    async def measure() -> list:
        client = LoadClient(f"{url}/v1/predict", body, {"Content-Type": "application/x-npz"}, 30.0, 1)
        times = []
        try:
            for i in range(n + 50):
                start = time.perf_counter()
                status = await client.post()
                if i >= 50:
                    times.append(time.perf_counter() - start)
                assert status == "200", status
        finally:
            client.close()
        return times

    return statistics.median(asyncio.run(measure())) * 1e3


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mean_batch(url: str) -> float:
    import httpx

    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith(("edgekit_batch_size_sum", "edgekit_batch_size_count")):
            values[line.split()[0]] = float(line.split()[1])
    return values.get("edgekit_batch_size_sum", 0) / max(values.get("edgekit_batch_size_count", 0), 1)


def npz(path: Path, **arrays) -> Path:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def batching(name: str, artifact: Path, inputs: Path, args) -> dict:
    from edgekit.core import process
    from edgekit.serve.loadtest import LoadSettings, loadtest

    settings = LoadSettings(concurrency=args.concurrency, duration_s=args.duration)
    servers = {label: process.start(artifact, ["--threads", "1", "--max-batch", str(mb)])
               for label, mb in (("batched", 16), ("unbatched", 1))}
    servers["pipelined"] = process.spawn([sys.executable, __file__, "--serve-pipelined", str(artifact)])
    try:
        urls = {label: process.wait_ready(proc) for label, proc in servers.items()}
        runs: dict[str, list] = {label: [] for label in servers}
        cpu: dict[str, list] = {label: [] for label in servers}  # server CPU ms per request answered
        for _ in range(args.rounds):
            for label, url in urls.items():
                before = cpu_seconds(servers[label].pid)
                runs[label].append(loadtest(url, settings, input_file=inputs))
                answered = runs[label][-1].settings["requests"] + args.concurrency  # + the warm-up requests
                cpu[label].append((cpu_seconds(servers[label].pid) - before) * 1e3 / answered)
        batch_rows = mean_batch(urls["batched"])
    finally:
        for proc in servers.values():
            process.stop(proc)
    out = {}
    for label, results in runs.items():
        out[label] = {
            "throughput": statistics.median(r.throughput_per_s for r in results),
            "p50": statistics.median(r.timing.p50 for r in results),
            "p99": statistics.median(r.timing.p99 for r in results),
            "errors": sum(r.settings["requests"] - r.timing.runs for r in results),
            "cpu_ms": statistics.median(cpu[label]),
        }
    print(f"\n{name}: concurrency {args.concurrency}, {args.rounds} alternating rounds of {args.duration:g} s, "
          "medians (1 inference thread per server)")
    print(f"  {'server':<26}{'throughput /s':>12}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}{'server CPU ms/req':>19}")
    for label, title in (("batched", "batched (--max-batch 16)"), ("unbatched", "unbatched (--max-batch 1)"),
                         ("pipelined", "no batching, pipelined*")):
        row = out[label]
        print(f"  {title:<26}{row['throughput']:>12.1f}{row['p50']:>10.2f}{row['p99']:>10.2f}"
              f"{row['errors']:>8d}{row['cpu_ms']:>19.3f}")
    print(f"  batched server: {batch_rows:.1f} rows per model call on average")
    ratio = out["batched"]["throughput"] / out["unbatched"]["throughput"]
    print(f"  throughput, batched / unbatched: {ratio:.2f}x;  p99 under load, batched / unbatched: "
          f"{out['batched']['p99'] / out['unbatched']['p99']:.2f}x")
    print(f"  * not an edgekit mode, for reference: each request hands its own call to the inference thread "
          f"(run_in_executor, calls queue up there): batched / pipelined "
          f"{out['batched']['throughput'] / out['pipelined']['throughput']:.2f}x")
    return out


def serve_pipelined(artifact: str) -> None:
    """The reference no-batching server: edgekit's app with --max-batch 1, but each request calls the
    inference thread itself (no batcher worker between them), so model calls pipeline in the
    executor's queue instead of waiting for the event loop one by one. Unbounded: benchmarks only."""
    from edgekit.serve.app import ServeSettings, create_app
    from edgekit.serve.loader import load_served_model
    from edgekit.serve.standalone import address, open_socket, serve_forever

    model = load_served_model(artifact, None, 1)
    app = create_app(model, ServeSettings(max_batch=1), warmup_feed=model.example_feed())
    batcher = app.state.batcher

    async def submit(feed):
        return await batcher.call_in_thread(batcher.run, feed)

    batcher.submit = submit
    sock = open_socket("127.0.0.1", 0)
    print(f"serving {artifact} on {address(sock)}", file=sys.stderr, flush=True)
    serve_forever(app, sock)


def batching_ceiling(artifact: Path, inputs: Path, rows: int = 16) -> None:
    """What batching saves inside the runtime alone: ``rows`` batch-1 calls vs one batch-``rows`` call."""
    feed = dict(np.load(inputs))
    stacked = {k: np.concatenate([v] * rows) for k, v in feed.items()}
    one, many = [], []
    for _ in range(3):  # interleaved
        one.append(bare_p50_ms(artifact / "model.onnx", feed, 2000) * rows)
        many.append(bare_p50_ms(artifact / "model.onnx", stacked, 2000))
    a, b = statistics.median(one), statistics.median(many)
    print(f"  in the runtime alone (no HTTP): {rows} batch-1 calls {a:.3f} ms vs one batch-{rows} call {b:.3f} ms: "
          f"{a / b:.2f}x; the rest of a request's cost is HTTP, parsing and scheduling, which batching does not share")


def overhead(artifact: Path, inputs: Path) -> None:
    from edgekit.core import process

    feed = dict(np.load(inputs))
    body = inputs.read_bytes()
    with process.local_server(artifact, ["--threads", "1", "--max-batch", "1"]) as url:
        bare, served = [], []
        for _ in range(3):  # interleaved
            bare.append(bare_p50_ms(artifact / "model.onnx", feed))
            served.append(sequential_p50_ms(url, body))
    b, s = statistics.median(bare), statistics.median(served)
    print("\nserver overhead (digits CNN, one request at a time, loadtest's keep-alive client, .npz body):")
    print(f"  bare session.run p50 {b:.4f} ms | /v1/predict p50 {s:.3f} ms | overhead {s - b:.3f} ms")


def ray_replicas(artifact: Path, inputs: Path, args) -> None:
    from edgekit.core import process
    from edgekit.serve.loadtest import LoadSettings, loadtest

    settings = LoadSettings(concurrency=args.concurrency, duration_s=args.duration)
    found = {}
    for replicas in (1, 2):
        port = free_port()
        proc = process.spawn([sys.executable, "-m", "edgekit", "serve", str(artifact), "--ray", "--replicas",
                              str(replicas), "--port", str(port), "--threads", "1"])
        try:
            url = process.wait_ready(proc, 180)
            found[replicas] = [loadtest(url, settings, input_file=inputs) for _ in range(args.rounds)]
        finally:
            process.stop(proc, 120)
    print(f"\nRay Serve (local instance, {os.cpu_count()} logical cores), digits CNN, concurrency {args.concurrency}, "
          f"{args.rounds} rounds of {args.duration:g} s each, medians:")
    tput = {}
    for replicas, results in found.items():
        tput[replicas] = statistics.median(r.throughput_per_s for r in results)
        p99 = statistics.median(r.timing.p99 for r in results)
        print(f"  {replicas} replica{'s' if replicas > 1 else ' '}: {tput[replicas]:8.1f} requests/s   p99 {p99:8.2f} ms")
    print(f"  2 replicas / 1 replica: {tput[2] / tput[1]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--lm-steps", type=int, default=30)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--no-lm", action="store_true")
    parser.add_argument("--serve-pipelined", metavar="ARTIFACT", help=argparse.SUPPRESS)  # the reference server
    args = parser.parse_args()
    if args.serve_pipelined:
        return serve_pipelined(args.serve_pipelined)

    from edgekit.export.api import export
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        tmp = Path(tmp)
        ckpt, _ = train(TrainConfig(epochs=2, seed=0), tmp / "digits")
        digits, _ = export(ckpt, tmp / "digits-onnx", ("onnx",), target="x86-64")
        one = npz(tmp / "one.npz", input=np.random.default_rng(0).uniform(0, 16, (1, 1, 8, 8)).astype(np.float32))
        print(f"host: {os.cpu_count()} logical cores; load average {os.getloadavg()[0]:.2f} at start "
              "(other jobs on this host share the cores: compare ratios, not absolute figures)")
        batching("digits CNN ONNX (1x1x8x8 per request)", digits, one, args)
        batching_ceiling(digits, one)
        overhead(digits, one)
        if not args.no_lm:
            lm_ckpt, _ = train(TrainConfig(model="transformer-lm", max_steps=args.lm_steps, seed=0), tmp / "lm")
            lm, _ = export(lm_ckpt, tmp / "lm-onnx", ("onnx",), target="x86-64")
            tokens = npz(tmp / "tokens.npz", tokens=np.random.default_rng(0).integers(2, 90, (1, 128)).astype(np.int64))
            batching("transformer-lm ONNX (1x128 tokens per request)", lm, tokens, args)
            batching_ceiling(lm, tokens)
        if not args.no_ray:
            ray_replicas(digits, one, args)


if __name__ == "__main__":
    main()
