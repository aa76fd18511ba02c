"""A lean HTTP/1.1 client for load generation: one prepared request sent over keep-alive connections.

``edgekit loadtest`` measures a server, so its client must cost far less per request than the
server it drives: on a small host the two share the cores, and a client that needs 2 ms of CPU a
request (httpx's asyncio client does, here) caps the measured throughput at its own rate, whatever
the server could do. This client sends the same prepared bytes every time over an ``asyncio``
protocol and parses only what it must (the status line, ``Content-Length`` or chunked framing,
``Connection: close``): about 0.05-0.1 ms of CPU a request.

Every call answers a status string: the HTTP status (``"200"``), or ``"timeout"`` /
``"connection-error"``; a connection that fails or is closed is replaced by a fresh one.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from urllib.parse import urlsplit

from edgekit.errors import UsageError

_MAX_HEAD = 64 << 10  # response headers larger than this: the server is not speaking HTTP


class _Connection(asyncio.Protocol):
    """One connection; ``waiter`` gets ``(status, keep_alive)`` once a whole response has arrived."""

    def __init__(self):
        self.transport = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self._head = None  # (status, keep_alive, length or -1 for chunked or None until close)

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self._head is not None and self._head[2] is None and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self._head[0], False))  # a body delimited by the close
        elif self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("the server closed the connection"))

    def data_received(self, data):
        self.buffer += data
        try:
            self._advance()
        except ValueError as exc:  # not HTTP
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(ConnectionError(str(exc)))
            self.transport.close()

    def _advance(self) -> None:
        while self.waiter is not None and not self.waiter.done():
            if self._head is None:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buffer) > _MAX_HEAD:
                        raise ValueError("response headers too large")
                    return
                lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
                del self.buffer[:end + 4]
                parts = lines[0].split(" ", 2)
                if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                    raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
                status = int(parts[1])
                keep_alive, length = parts[0] == "HTTP/1.1", None
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    name, value = name.strip().lower(), value.strip().lower()
                    if name == "content-length":
                        if not value.isdigit():
                            raise ValueError(f"bad Content-Length {value[:40]!r}")
                        length = int(value)
                    elif name == "transfer-encoding" and "chunked" in value:
                        length = -1
                    elif name == "connection":
                        keep_alive = "close" not in value and (keep_alive or "keep-alive" in value)
                if 100 <= status < 200:
                    continue  # an interim answer; the real one follows
                if status in (204, 304):
                    length = 0
                self._head = (status, keep_alive, length)
            status, keep_alive, length = self._head
            if length is None:
                self.buffer.clear()  # read until the server closes
                return
            if length == -1:
                if not self._skip_chunks():
                    return
            else:
                if len(self.buffer) < length:
                    return
                del self.buffer[:length]
            self._head = None
            self.waiter.set_result((status, keep_alive))

    def _skip_chunks(self) -> bool:
        """Drop complete chunks from the buffer; True once the last chunk (and trailers) is in."""
        while True:
            end = self.buffer.find(b"\r\n")
            if end < 0:
                return False
            size_text = bytes(self.buffer[:end]).split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ValueError(f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                trailer_end = self.buffer.find(b"\r\n\r\n", end)
                if trailer_end < 0 and self.buffer[end + 2:end + 4] != b"\r\n":
                    return False
                stop = end + 4 if self.buffer[end + 2:end + 4] == b"\r\n" else trailer_end + 4
                del self.buffer[:stop]
                return True
            if len(self.buffer) < end + 2 + size + 2:
                return False
            del self.buffer[:end + 2 + size + 2]


class LoadClient:
    """POST ``body`` to ``url`` again and again; at most ``connections`` open at once."""

    def __init__(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float, connections: int):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"URL must be http:// or https:// with a host, got {url!r}")
        for name, value in headers.items():
            if any(c in f"{name}{value}" for c in "\r\n\0"):
                raise UsageError(f"header {name!r} holds a line break")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = parts.netloc.rpartition("@")[2]
        head = [f"POST {path} HTTP/1.1", f"Host: {host_header}", "User-Agent: edgekit-loadtest",
                f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
        self.request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        self.timeout_s = timeout_s
        self.slots = asyncio.Semaphore(connections)
        self.idle: collections.deque = collections.deque()

    async def post(self) -> str:
        """One request: its HTTP status as a string, ``"timeout"`` or ``"connection-error"``."""
        async with self.slots:
            conn = None
            while self.idle and conn is None:
                conn = self.idle.pop()
                conn = None if conn.closed else conn
            if conn is not None:  # a kept-alive connection the server may have closed meanwhile
                status = await self._exchange(conn)
                if status != "connection-error":
                    return status
            return await self._exchange(None)

    async def _exchange(self, conn: _Connection | None) -> str:
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        timer = loop.call_later(self.timeout_s, _expire, waiter)
        try:
            if conn is None:
                connecting = asyncio.ensure_future(
                    loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl))
                await asyncio.wait((connecting, waiter), return_when=asyncio.FIRST_COMPLETED)
                if not connecting.done():
                    connecting.cancel()
                    waiter.exception()  # retrieved: the timeout is the answer
                    return "timeout"
                _, conn = connecting.result()
            conn.waiter = waiter
            conn.transport.write(self.request)
            status, keep_alive = await waiter
        except asyncio.TimeoutError:
            if conn is not None:
                conn.transport.close()
            return "timeout"
        except (OSError, ConnectionError, ssl.SSLError):
            if conn is not None:
                conn.transport.close()
            return "connection-error"
        finally:
            timer.cancel()
        conn.waiter = None
        if keep_alive and not conn.closed:
            self.idle.append(conn)
        else:
            conn.transport.close()
        return str(status)

    def close(self) -> None:
        while self.idle:
            self.idle.pop().transport.close()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())
