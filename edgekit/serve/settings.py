"""The server's settings, checked when made (``ValueError`` naming the bad value).

A module of its own, light to import: ``edgekit serve`` checks its options with it before it
starts the start-up probe and imports FastAPI and the runtime meanwhile.

Standalone: the standard library only (copied into bundles).
"""

from __future__ import annotations

from dataclasses import dataclass

from .auth import key_error


@dataclass(frozen=True)
class ServeSettings:
    max_batch: int = 16
    max_wait_ms: float = 0.0  # 0: batch only what is already waiting (no added latency)
    queue_size: int = 256
    max_body_bytes: int = 8 << 20
    api_key: str | None = None
    allow_nonfinite: bool = False
    retry_after_s: int = 1
    max_generations: int = 4  # generations running or waiting; more get 503
    max_new_tokens: int = 1024
    max_prompt_chars: int = 1 << 16
    max_header_bytes: int = 32 << 10  # the request line and all headers together (431 beyond)
    max_headers: int = 100

    def __post_init__(self):
        if self.max_batch < 1 or self.queue_size < 1 or self.max_body_bytes < 1 or self.max_generations < 1:
            raise ValueError("max_batch, queue_size, max_body_bytes and max_generations must be >= 1")
        if not 1024 <= self.max_header_bytes <= 1 << 20 or not 8 <= self.max_headers <= 10_000:
            raise ValueError("max_header_bytes must be within 1024..1048576 and max_headers within 8..10000")
        if self.api_key is not None:
            why = key_error(self.api_key)
            if why:
                raise ValueError(why)
        if not 0 <= self.max_wait_ms <= 10_000:
            raise ValueError(f"max_wait_ms must be within 0..10000, got {self.max_wait_ms}")
