"""``edgekit serve``: an HTTP API for an exported model (FastAPI on uvicorn, or Ray Serve with --ray)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import handles_errors
from edgekit.core.bounds import check_threads
from edgekit.core.errors import EdgekitError, UsageError
from edgekit.core.threads import resolve_threads, target_of
from edgekit.serve.auth import bind_error
from edgekit.serve.loader import load_served_model, probe_served_model, served_entry
from edgekit.serve.settings import ServeSettings
from edgekit.serve.standalone import address as url_of, open_socket, serve_forever


@handles_errors
def serve_command(
    artifact: Path = typer.Argument(..., help="Artifact folder, model file in one, or bundle folder."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind. Anything but loopback needs an API key."),
    port: int = typer.Option(8000, "--port", help="Port (0: any free port; the address is printed)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="EDGEKIT_API_KEY", show_envvar=True,
                                          help="Key every request must carry (Authorization: Bearer KEY or X-API-Key)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="onnx, torchscript, executorch or checkpoint, when the artifact holds several."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Intra-op threads of the runtime (default: the artifact's target's, capped leaving one of this host's cores free, as bench and generate do)."),
    max_batch: int = typer.Option(16, "--max-batch", help="Micro-batching: most rows per model call (1: off)."),
    max_wait_ms: float = typer.Option(0.0, "--max-wait-ms", help="Micro-batching: also wait this long for more requests (0: batch what is already queued)."),
    queue_size: int = typer.Option(256, "--queue-size", help="Requests waiting at most; more get 503 + Retry-After."),
    max_body_mb: float = typer.Option(8.0, "--max-body-mb", help="Largest request body (413 beyond)."),
    allow_nonfinite: bool = typer.Option(False, "--allow-nonfinite", help="Accept NaN/Inf in float inputs (else 422)."),
    ray: bool = typer.Option(False, "--ray", help="Deploy on Ray Serve (pip install 'edgekit-ml[ray]')."),
    replicas: int = typer.Option(1, "--replicas", help="With --ray: fixed number of replicas."),
    min_replicas: Optional[int] = typer.Option(None, "--min-replicas", help="With --ray: autoscale from this many..."),
    max_replicas: Optional[int] = typer.Option(None, "--max-replicas", help="...to this many replicas."),
    cpus_per_replica: float = typer.Option(1.0, "--cpus-per-replica", help="With --ray: CPUs Ray reserves per replica."),
    address: Optional[str] = typer.Option(None, "--address", help="With --ray: an existing Ray cluster (e.g. HEAD:6379 or auto); default: a local instance."),
) -> None:
    """Serve a model over HTTP: /v1/predict (micro-batched), /v1/generate (language models, SSE), /metrics;
    a pretrained LLM (edgekit import gguf:...) also answers the OpenAI-compatible /v1/chat/completions
    and /v1/models (one generation at a time: requests queue).

    Binds 127.0.0.1 unless told otherwise. SIGTERM stops accepting, finishes accepted requests, exits 0.
    """
    why = bind_error(host, api_key)  # also a blank key, or one no client could send
    if why:
        raise UsageError(why)
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be within 0..65535, got {port}")

    check_threads(threads, "--threads")
    if not 0 < max_body_mb <= 4096:
        raise UsageError(f"--max-body-mb must be within 0..4096, got {max_body_mb}")
    if not 1 <= max_batch <= 65536 or not 1 <= queue_size <= 1_000_000:
        raise UsageError(f"--max-batch must be within 1..65536 and --queue-size within 1..1000000, got {max_batch} and {queue_size}")
    if not 1 <= replicas <= 10_000 or not 0 < cpus_per_replica <= 1024:
        raise UsageError("--replicas must be within 1..10000 and --cpus-per-replica within 0..1024")
    if not ray and (replicas != 1 or min_replicas is not None or max_replicas is not None or address):
        raise UsageError("--replicas, --min-replicas, --max-replicas and --address apply with --ray")
    import importlib.util

    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        raise UsageError("serving needs FastAPI and uvicorn: pip install 'edgekit-ml[serve]'")
    try:
        settings = ServeSettings(max_batch=max_batch, max_wait_ms=max_wait_ms, queue_size=queue_size,
                                 max_body_bytes=int(max_body_mb * (1 << 20)), api_key=api_key,
                                 allow_nonfinite=allow_nonfinite)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    say = lambda line: typer.echo(line, err=True)  # noqa: E731
    if ray:
        from edgekit.serve.ray_app import Scaling

        scaling = Scaling(replicas, min_replicas, max_replicas, cpus_per_replica=cpus_per_replica)

    probe_served_model(artifact, fmt)  # in a child first: a file that crashes its runtime must not take the server down
    threads = _threads(artifact, fmt, threads, say)
    if ray:
        from edgekit.serve.ray_app import deploy

        deploy(artifact, settings, fmt=fmt, threads=threads, scaling=scaling, address=address, host=host,
               port=port or 8000, announce=say)
        return
    from edgekit.serve.app import create_app

    model = load_served_model(artifact, fmt, threads)
    app = create_app(model, settings, warmup_feed=model.example_feed())
    try:
        sock = open_socket(host, port)
    except OSError as exc:
        raise EdgekitError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
    say(f"serving {model.summary['path']} ({model.summary['format']}, {model.summary['precision']}) on {url_of(sock)}")
    serve_forever(app, sock, max_head_bytes=settings.max_header_bytes)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)


def _threads(artifact, fmt, threads, say) -> int:
    """The one thread rule bench and generate follow (edgekit.core.threads), for the artifact's target."""
    _, manifest, _ = served_entry(artifact, fmt)
    chosen, notes = resolve_threads(threads, target_of(manifest))
    for note in notes:
        say(f"note: {note}")
    return chosen
