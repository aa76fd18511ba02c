"""``edgekit serve --ray``: the same FastAPI app as a Ray Serve deployment (``pip install 'edgekit-ml[ray]'``).

Each replica loads the model and builds the app (``serve.ingress()`` with
``__serve_build_asgi_app__``); Ray Serve's HTTP proxy spreads requests over the replicas, which
run on a local Ray instance or on the cluster at ``address`` (``ray start --head`` on one machine,
``ray start --address=HEAD:6379`` on the others). No cluster code of edgekit's own.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from edgekit.core.errors import UsageError
from edgekit.serve.loader import load_served_model

APP_NAME = "edgekit"


@dataclass(frozen=True)
class Scaling:
    replicas: int = 1
    min_replicas: int | None = None  # autoscaling when set
    max_replicas: int | None = None
    target_ongoing_requests: float = 8.0
    cpus_per_replica: float = 1.0

    def __post_init__(self):
        if self.replicas < 1:
            raise UsageError(f"--replicas must be >= 1, got {self.replicas}")
        if (self.min_replicas is None) != (self.max_replicas is None):
            raise UsageError("autoscaling needs both --min-replicas and --max-replicas")
        if self.min_replicas is not None and not 0 <= self.min_replicas <= self.max_replicas or \
                self.max_replicas is not None and self.max_replicas < 1:
            raise UsageError("--min-replicas must be within 0..--max-replicas, and --max-replicas >= 1")
        if self.cpus_per_replica <= 0:
            raise UsageError("--cpus-per-replica must be > 0")

    def options(self) -> dict:
        opts: dict = {"ray_actor_options": {"num_cpus": self.cpus_per_replica}}
        if self.min_replicas is None:
            opts["num_replicas"] = self.replicas
        else:
            opts["autoscaling_config"] = {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                                          "target_ongoing_requests": self.target_ongoing_requests}
        return opts


def _deployment():
    from ray import serve

    @serve.ingress()
    class EdgekitModel:
        def __init__(self, artifact: str, settings: dict, fmt: str | None, threads: int | None):
            from edgekit.serve.app import ServeSettings, create_app

            model = load_served_model(artifact, fmt, threads)
            self._app = create_app(model, ServeSettings(**settings), warmup_feed=model.example_feed())

        def __serve_build_asgi_app__(self):
            return self._app

    return serve.deployment(EdgekitModel)


def deploy(artifact: str | Path, settings, *, fmt: str | None = None, threads: int | None = None,
           scaling: Scaling = Scaling(), address: str | None = None, host: str = "127.0.0.1", port: int = 8000,
           announce: Callable[[str], None] = lambda line: None, stop: threading.Event | None = None) -> None:
    """Run the app on Ray Serve until SIGTERM/SIGINT (or ``stop`` is set), then shut Serve down."""
    try:
        import ray
        from ray import serve
    except ImportError:
        raise UsageError("--ray needs Ray Serve: pip install 'edgekit-ml[ray]'") from None

    artifact = str(Path(artifact).resolve())
    ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             configure_logging=False)
    stop = stop or threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        serve.start(http_options={"host": host, "port": port})
        app = _deployment().options(**scaling.options()).bind(artifact, asdict(settings), fmt, threads)
        serve.run(app, name=APP_NAME, route_prefix="/")
        announce(f"serving {Path(artifact).name} on http://{host}:{port} "
                 f"(Ray Serve, {_describe(scaling)}; Ray at {ray.get_runtime_context().gcs_address})")
        stop.wait()
    finally:
        try:
            if address:  # a shared cluster: remove only this application
                serve.delete(APP_NAME)
            else:
                serve.shutdown()
        finally:
            ray.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _describe(scaling: Scaling) -> str:
    if scaling.min_replicas is None:
        return f"{scaling.replicas} replica{'s' if scaling.replicas > 1 else ''}"
    return f"autoscaling {scaling.min_replicas}..{scaling.max_replicas} replicas"
