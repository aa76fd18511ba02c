"""Dynamic micro-batching with a bounded queue.

Requests wait in a queue of at most ``queue_size`` entries (a full queue is ``Overloaded``: the
app answers 503 with Retry-After, so memory never grows with the load). One worker task takes
the oldest request and every other one already waiting (up to ``max_batch`` rows, same shapes
past the batch axis), and with ``max_wait_s`` > 0 also those that arrive within that time; it
runs them as one call on the single inference thread and hands each request its rows back.
With the default ``max_wait_s`` 0 batching costs a lone request nothing: batches form from the
requests that arrive while the previous call runs, so they grow with the load. With ``max_batch`` 1 (or a model without a dynamic batch axis) every
request runs alone, through the same queue.

Standalone: the standard library and numpy only (copied into bundles).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import time
from typing import Callable

import numpy as np


class Overloaded(Exception):
    """The queue is full; try again later."""


class MicroBatcher:
    def __init__(self, run: Callable[[dict], list], *, max_batch: int = 16, max_wait_s: float = 0.0,
                 queue_size: int = 256, batchable: bool = True, on_batch: Callable[[int], None] | None = None):
        if max_batch < 1 or queue_size < 1 or max_wait_s < 0:
            raise ValueError("max_batch and queue_size must be >= 1 and max_wait_s >= 0")
        self.run = run
        self.max_batch = max_batch if batchable else 1
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self.on_batch = on_batch or (lambda rows: None)
        self._queue: asyncio.Queue | None = None
        self._held: collections.deque = collections.deque()  # taken but left for the next batch
        self._busy = 0  # requests in the batch being run
        self._worker: asyncio.Task | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgekit-infer")

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._queue = asyncio.Queue(maxsize=self.queue_size)
        self._worker = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Finish every accepted request (up to ``timeout_s``), then stop the worker."""
        deadline = time.monotonic() + timeout_s
        while self.depth and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=True)

    @property
    def depth(self) -> int:
        """Requests accepted and not yet answered (queued, held or running)."""
        queued = self._queue.qsize() if self._queue is not None else 0
        return queued + len(self._held) + self._busy

    async def call_in_thread(self, fn, *args):
        """Run ``fn`` on the inference thread (one model call at a time)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- requests ----------------------------------------------------------------------------------
    async def submit(self, feed: dict) -> list:
        """The model's outputs for ``feed``; ``Overloaded`` at once when the queue is full."""
        future = asyncio.get_running_loop().create_future()
        rows = int(next(iter(feed.values())).shape[0]) if feed and self.max_batch > 1 else 1
        try:
            self._queue.put_nowait((feed, rows, future))
        except asyncio.QueueFull:
            raise Overloaded(f"{self.queue_size} requests are queued") from None
        return await future

    # -- the worker --------------------------------------------------------------------------------
    async def _next(self, timeout: float | None):
        if self._held:
            return self._held.popleft()
        if timeout is None:
            return await self._queue.get()
        if timeout <= 0:
            return self._queue.get_nowait()
        return await asyncio.wait_for(self._queue.get(), timeout)

    async def _loop(self) -> None:
        while True:
            first = await self._next(None)
            batch = [first]
            rows = first[1]
            key = _signature(first[0])
            deadline = time.monotonic() + self.max_wait_s
            skipped = []
            while rows < self.max_batch:
                try:
                    item = await self._next(deadline - time.monotonic())
                except (asyncio.TimeoutError, asyncio.QueueEmpty):
                    break
                if _signature(item[0]) != key or rows + item[1] > self.max_batch:
                    skipped.append(item)
                    if rows + item[1] > self.max_batch:
                        break
                    continue
                batch.append(item)
                rows += item[1]
            self._held.extendleft(reversed(skipped))
            batch = [item for item in batch if not item[2].cancelled()]
            if batch:
                self._busy = len(batch)
                try:
                    await self._run(batch, rows)
                finally:
                    self._busy = 0

    async def _run(self, batch: list, rows: int) -> None:
        feeds = [item[0] for item in batch]
        if len(batch) == 1:
            feed = feeds[0]
        else:
            feed = {name: np.concatenate([f[name] for f in feeds], axis=0) for name in feeds[0]}
        self.on_batch(sum(item[1] for item in batch))
        try:
            outputs = await self.call_in_thread(self.run, feed)
        except Exception as exc:  # the model failed: every request of the batch gets the error
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for feed_i, count, future in batch:
            if not future.done():
                if len(batch) == 1:
                    future.set_result(outputs)
                else:
                    future.set_result([out[start:start + count] for out in outputs])
            start += count


def _signature(feed: dict) -> tuple:
    return tuple((name, array.dtype.str, array.shape[1:]) for name, array in feed.items())
