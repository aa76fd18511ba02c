"""Run the server: bind a socket, announce the address, serve until SIGTERM/SIGINT, drain, exit 0.

``main()`` is what a bundle's ``serve.py`` calls on a board: it serves the bundled ONNX model
(bundle.json names it) with no edgekit and no torch installed.

Standalone: the standard library, uvicorn and this package's standalone modules only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Callable

from .auth import API_KEY_ENV, bind_error
from .http_limits import uvicorn_options
from .startup_probe import ProbeFailed, probe

MAX_CONNECTIONS = 2048  # open connections and requests at once; more get 503 from uvicorn


def open_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.set_inheritable(True)
    return sock


def serve_forever(app, sock: socket.socket, graceful_timeout_s: float = 30.0, log_level: str = "warning",
                  max_head_bytes: int = 32 << 10, max_connections: int = MAX_CONNECTIONS) -> None:
    """Serve ``app`` on the bound ``sock``. On SIGTERM/SIGINT uvicorn stops accepting, finishes the
    requests it accepted (the app's shutdown drains its queue), and this returns normally. A request's
    head may not pass ``max_head_bytes`` (``http_limits``)."""
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=graceful_timeout_s,
                            access_log=False, lifespan="on", limit_concurrency=max_connections,
                            **uvicorn_options(max_head_bytes))
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal it caught once it has shut down; by then the work is done, so
    # the process's own handler (edgekit's turns SIGTERM into an interrupt, exit 130) must not run.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()


def address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def _board():
    """The board package: edgekit's own where edgekit is installed, else the copy a bundle carries
    beside serve.py (``edgekit_board/``)."""
    try:
        from edgekit.board import served
    except ImportError:
        from edgekit_board import served
    return served


def open_bundled(folder: str, model_name: str, fmt: str = "onnx", threads: int | None = 1):
    """The bundled model through the board package's runtime (also what the startup probe's child opens)."""
    from .inputs import spec_from_dict

    served = _board()
    return served.ServedModel.open(Path(folder) / model_name, served.read_manifest(Path(folder)), fmt, threads,
                                   spec_from_dict)


def main(argv: list[str] | None = None, folder: Path | None = None, announce: Callable[[str], None] | None = None) -> int:
    from .app import ServeSettings, create_app

    folder = Path(folder or Path(sys.argv[0]).resolve().parent)
    p = argparse.ArgumentParser(description="Serve this bundle's model over HTTP (FastAPI + uvicorn + onnxruntime).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; others need an API key)")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV) or None,  # an empty variable is unset
                   help=f"required by every request (or {API_KEY_ENV})")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--max-wait-ms", type=float, default=0.0)
    p.add_argument("--queue-size", type=int, default=256)
    p.add_argument("--max-body-mb", type=float, default=8.0)
    args = p.parse_args(argv)
    say = announce or (lambda line: print(line, file=sys.stderr, flush=True))
    if args.threads is not None and not 1 <= args.threads <= 4 * (os.cpu_count() or 1):
        say(f"Error: --threads must be within 1..{4 * (os.cpu_count() or 1)} (4x this board's cores), got {args.threads}")
        return 2
    if not 0 < args.max_body_mb <= 4096:
        say(f"Error: --max-body-mb must be within 0..4096, got {args.max_body_mb}")
        return 2
    why = bind_error(args.host, args.api_key)
    if why:
        say(f"Error: {why}")
        return 2
    info = json.loads((folder / "bundle.json").read_text()) if (folder / "bundle.json").is_file() else {}
    model_name = info.get("model", "model.onnx")
    if info.get("format", "onnx") != "onnx" or Path(model_name).name != model_name:
        say(f"Error: serve.py serves ONNX bundles; this one holds {info.get('format')!r}")
        return 2
    try:
        settings = ServeSettings(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, queue_size=args.queue_size,
                                 max_body_bytes=int(args.max_body_mb * (1 << 20)), api_key=args.api_key)
    except ValueError as exc:
        say(f"Error: {exc}")
        return 2
    try:  # first in a child process: a file that crashes onnxruntime must not take this one down
        probe("standalone:open_bundled", [str(folder), model_name], str(folder / model_name))
        model = open_bundled(str(folder), model_name, threads=args.threads)
    except ProbeFailed as exc:
        say(f"Error: {exc}")
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception family
        say(f"Error: {folder / model_name} cannot be served: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__}")
        return 2
    app = create_app(model, settings, warmup_feed=model.example_feed())
    try:
        sock = open_socket(args.host, args.port)
    except OSError as exc:
        say(f"Error: cannot bind {args.host}:{args.port}: {exc.strerror or exc}")
        return 1
    say(f"serving {model_name} on {address(sock)}")
    serve_forever(app, sock, max_head_bytes=settings.max_header_bytes)
    return 0
