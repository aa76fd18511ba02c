"""A lean HTTP/1.1 client for load generation: one prepared request sent over keep-alive connections.

``edgekit loadtest`` measures a server, so its client must cost far less per request than the
server it drives: on a small host the two share the cores, and a client that needs 2 ms of CPU a
request (httpx's asyncio client does, here) caps the measured throughput at its own rate, whatever
the server could do. This client sends the same prepared bytes every time over an ``asyncio``
protocol and parses only what it must (the status line, ``Content-Length`` or chunked framing,
``Connection: close``): about 0.05-0.1 ms of CPU a request.

Every call answers a status string: the HTTP status (``"200"``), or ``"timeout"`` /
``"connection-error"``; a connection that fails or is closed is replaced by a fresh one. What a
response may make the client read is bounded (``MAX_HEAD``, ``MAX_HEADERS``, ``MAX_BODY``, chunk
framing; a body is counted, never kept): a response past a bound, or not HTTP/1.x at all, is that
request's failure, a ``"connection-error"`` (the connection is closed), and a load test in which
no request succeeded ends in one ``Error:`` line.
"""

from __future__ import annotations

import asyncio
import collections
import re
import ssl
from urllib.parse import urlsplit

from edgekit.core.errors import UsageError

# What one response may make the client hold or read. A server that passes a bound (or does not
# speak HTTP) costs that request: it counts as "connection-error" and the connection is closed.
MAX_HEAD = 64 << 10  # status line and headers
MAX_HEADERS = 100
MAX_BODY = 64 << 20  # /v1/predict answers are small; the body is counted and dropped, never kept
MAX_CHUNK_LINE = 1024  # a chunk's size line, extensions included
MAX_INTERIM = 16  # 1xx answers before the real one

_STATUS_LINE = re.compile(r"HTTP/1\.([01]) ([1-5][0-9]{2})(?: [^\r\n]*)?")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")


class _Connection(asyncio.Protocol):
    """One connection; ``waiter`` gets ``(status, keep_alive)`` once a whole response has arrived.

    The response is read as it arrives and its body dropped: the buffer holds at most the head (or a
    chunk's size line, or the trailers) being read, never the body."""

    def __init__(self):
        self.transport = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self._state = "head"  # head | length | chunk-size | chunk-data | chunk-end | trailers | close
        self._status, self._keep_alive, self._left, self._body, self._interim = 0, False, 0, 0, 0

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self._state == "close" and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self._status, False))  # a body delimited by the close
        elif self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("the server closed the connection"))

    def data_received(self, data):
        if self.closed:
            return
        self.buffer += data
        try:
            if self.waiter is None or self.waiter.done():
                raise ValueError("the server sent bytes nobody asked for")
            self._advance()
        except ValueError as exc:  # not HTTP, or past a bound
            self.closed = True
            self.buffer.clear()
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(ConnectionError(str(exc)))
            self.transport.close()

    def _advance(self) -> None:
        while self.waiter is not None and not self.waiter.done():
            state = self._state
            if state == "head":
                if not self._read_head():
                    return
            elif state in ("length", "chunk-data", "close"):
                taken = min(len(self.buffer), self._left) if state != "close" else len(self.buffer)
                del self.buffer[:taken]
                if state == "close":
                    self._count(taken)
                    return
                self._left -= taken
                if self._left:
                    return
                if state == "length":
                    self._finish()
                else:
                    self._state = "chunk-end"
            elif state == "chunk-end":
                if len(self.buffer) < 2:
                    return
                if self.buffer[:2] != b"\r\n":
                    raise ValueError("a chunk does not end with CRLF")
                del self.buffer[:2]
                self._state = "chunk-size"
            elif state == "chunk-size":
                end = self.buffer.find(b"\r\n", 0, MAX_CHUNK_LINE)
                if end < 0:
                    if len(self.buffer) >= MAX_CHUNK_LINE:
                        raise ValueError("a chunk size line passes the client's bound")
                    return
                size_text = bytes(self.buffer[:end]).split(b";")[0].strip(b" \t")
                if not _CHUNK_SIZE.fullmatch(size_text):
                    raise ValueError(f"bad chunk size {size_text[:20]!r}")
                del self.buffer[:end + 2]
                size = int(size_text, 16)
                self._count(size)
                self._state, self._left = ("trailers", 0) if size == 0 else ("chunk-data", size)
            elif state == "trailers":
                if self.buffer[:2] == b"\r\n":
                    del self.buffer[:2]
                    self._finish()
                    continue
                end = self.buffer.find(b"\r\n\r\n", 0, MAX_HEAD)
                if end < 0:
                    if len(self.buffer) >= MAX_HEAD:
                        raise ValueError("the response's trailers pass the client's bound")
                    return
                del self.buffer[:end + 4]
                self._finish()

    def _count(self, size: int) -> None:
        self._body += size
        if self._body > MAX_BODY:
            raise ValueError(f"the response body passes the client's {MAX_BODY}-byte bound")

    def _finish(self) -> None:
        status, keep_alive = self._status, self._keep_alive
        self._reset()
        self.waiter.set_result((status, keep_alive))

    def _read_head(self) -> bool:
        """Parse a complete head from the buffer (False: not all in yet) and set the body's framing."""
        end = self.buffer.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                raise ValueError("response headers too large")
            return False
        lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        del self.buffer[:end + 4]
        found = _STATUS_LINE.fullmatch(lines[0])
        if found is None:
            raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        if len(lines) - 1 > MAX_HEADERS:
            raise ValueError(f"the response has {len(lines) - 1} headers; the client reads at most {MAX_HEADERS}")
        status = int(found.group(2))
        keep_alive, length, chunked, framed = found.group(1) == "1", None, False, False
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"malformed header line {line[:60]!r}")
            name, value = name.lower(), value.strip().lower()
            if name == "content-length":
                if not re.fullmatch(r"[0-9]{1,19}", value) or length is not None and int(value) != length:
                    raise ValueError(f"bad Content-Length {value[:40]!r}")
                length = int(value)
            elif name == "transfer-encoding":
                framed = True
                chunked = value.split(",")[-1].strip() == "chunked"
            elif name == "connection":
                keep_alive = "close" not in value and (keep_alive or "keep-alive" in value)
        if 100 <= status < 200:
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise ValueError(f"more than {MAX_INTERIM} interim (1xx) answers")
            return True  # an interim answer; the real one follows
        self._status, self._keep_alive = status, keep_alive
        if status in (204, 304):
            self._finish()
        elif chunked:
            self._state = "chunk-size"
        elif framed or length is None:  # delimited by the close
            self._state, self._keep_alive = "close", False
        else:
            self._count(length)  # a huge Content-Length is refused before any of it is read
            self._state, self._left = "length", length
            if length == 0:
                self._finish()
        return True


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
