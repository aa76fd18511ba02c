"""Bounds on what a client may make uvicorn's HTTP layer hold, and a shutdown that slow clients
cannot stall.

uvicorn's httptools parser buffers a request's head (request line and headers) without limit
(246 MB on one connection took the server's memory up by 259 MB), and its h11 parser bounds it
only through ``h11_max_incomplete_event_size``. ``uvicorn_options`` gives both bounds: with
httptools, ``BoundedHttpTools`` counts the head's bytes as they arrive and answers 431 past
``max_head_bytes`` (and 408 to a head not complete within ``HEAD_TIMEOUT_S``); with h11 (the board:
bundles pin uvicorn without httptools), h11's own bound answers 400. The header count and the
head's size are checked once more for every request at the ASGI level (``app.Guard``: 431), the
body's size by the app as it reads it (413, chunked bodies included).

On shutdown uvicorn lets every connection finish its request, up to the grace period: a client
that sends half a body and stops would hold the server that long, then leave a cancelled task in
the log. Here a request whose body stops arriving for ``SHUTDOWN_IDLE_S`` once shutdown began is
dropped as disconnected (the app sees ``http.disconnect``); requests that are still uploading, or
whose body is in, finish.

Standalone: the standard library and uvicorn only (copied into bundles).
"""

from __future__ import annotations

import json

HEAD_TIMEOUT_S = 30.0
SHUTDOWN_IDLE_S = 1.0


class _DrainsOnShutdown:
    """Mixed into uvicorn's protocols: a request stalled mid-body does not hold a shutdown."""

    def data_received(self, data: bytes) -> None:
        self._last_data = self.loop.time()
        super().data_received(data)

    def shutdown(self) -> None:
        super().shutdown()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and cycle.more_body:
            self._last_data = getattr(self, "_last_data", self.loop.time())
            self.loop.call_later(SHUTDOWN_IDLE_S, self._drop_if_stalled)

    def _drop_if_stalled(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.more_body or self.transport.is_closing():
            return
        idle = self.loop.time() - self._last_data
        if idle < SHUTDOWN_IDLE_S:
            self.loop.call_later(SHUTDOWN_IDLE_S - idle, self._drop_if_stalled)
            return
        cycle.disconnected = True
        cycle.message_event.set()
        self.transport.close()


def _refusal(status: int, reason: bytes, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, reason, len(body))) + body


def uvicorn_options(max_head_bytes: int) -> dict:
    """``uvicorn.Config`` keyword arguments that bound a request's head to ``max_head_bytes``."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # no httptools: h11, which bounds the head itself
        from uvicorn.protocols.http.h11_impl import H11Protocol

        protocol = type("BoundedH11", (_DrainsOnShutdown, H11Protocol), {})
        return {"http": protocol, "h11_max_incomplete_event_size": max_head_bytes}

    class BoundedHttpTools(_DrainsOnShutdown, HttpToolsProtocol):
        """httptools, with the head's bytes counted as they arrive (431 past the bound, 408 past the time)."""

        limit = max_head_bytes

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._head_bytes, self._in_head, self._completed, self._head_timer = 0, False, False, None

        def data_received(self, data: bytes) -> None:
            if self.transport.is_closing():
                return
            self._completed = False
            super().data_received(data)
            if not self._in_head or self.parser is None or self.transport.is_closing():
                return
            if not self._completed:  # all of this chunk is the head (one that began after a pipelined
                self._head_bytes += len(data)  # request's end in the chunk counts from the next chunk on)
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)
            if self._head_bytes > self.limit:
                self._refuse(431, b"Request Header Fields Too Large",
                             f"the request line and headers pass the {self.limit}-byte limit")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head, self._head_bytes = True, 0

        def on_headers_complete(self) -> None:
            self._in_head = False
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._completed = True

        def connection_lost(self, exc) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._in_head and not self.transport.is_closing():
                self._refuse(408, b"Request Timeout", f"the request's head did not arrive within {HEAD_TIMEOUT_S:g} s")

        def _refuse(self, status: int, reason: bytes, message: str) -> None:
            if self.cycle is None or self.cycle.response_complete:
                self.transport.write(_refusal(status, reason, message))
            self.transport.close()

    return {"http": BoundedHttpTools}
