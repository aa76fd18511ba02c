"""loadtest's lean HTTP/1.1 client against a raw asyncio server that frames answers every way HTTP/1.1
allows (Content-Length, chunked, close-delimited, Connection: close, interim 100), stalls, or talks nonsense."""

from __future__ import annotations

import asyncio

import pytest

from edgekit.core.errors import UsageError
from edgekit.serve.httpload import LoadClient

ANSWERS = {
    b"/length": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"/chunked": (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n"),
    b"/close": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
    b"/until-close": b"HTTP/1.0 503 Busy\r\n\r\nno length: the close ends the body",
    b"/interim": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 422 Unprocessable\r\nContent-Length: 0\r\n\r\n",
    b"/garbage": b"SSH-2.0-OpenSSH\r\n\r\n",
}


async def serve(requests: list, connections: list):
    """A server that answers each request per its path (one byte at a time, to test reassembly)."""

    async def handle(reader, writer):
        connections.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
                body = await reader.readexactly(length)
                path = lines[0].split(b" ")[1]
                requests.append((lines, body))
                if path == b"/stall":
                    await asyncio.sleep(30)
                for i in range(len(ANSWERS[path])):
                    writer.write(ANSWERS[path][i:i + 1])
                    await writer.drain()
                if path in (b"/close", b"/until-close", b"/garbage"):
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def run_client(path: str, times: int, timeout_s: float = 10.0, headers=None):
    async def main():
        requests, connections = [], []
        server = await serve(requests, connections)
        port = server.sockets[0].getsockname()[1]
        client = LoadClient(f"http://127.0.0.1:{port}{path}", b"0123456789", headers or {"Content-Type": "x/y"},
                            timeout_s, 2)
        try:
            statuses = [await client.post() for _ in range(times)]
        finally:
            client.close()
            server.close()
        return statuses, requests, connections

    return asyncio.run(main())


@pytest.mark.parametrize("path, status, reused", [
    ("/length", "200", True), ("/chunked", "201", True), ("/close", "200", False),
    ("/until-close", "503", False), ("/interim", "422", True),
])
def test_every_framing_is_read_to_its_end_and_connections_are_kept_only_when_allowed(path, status, reused):
    statuses, requests, connections = run_client(path, 4)
    assert statuses == [status] * 4
    assert len(connections) == (1 if reused else 4)
    lines, body = requests[0]
    assert lines[0] == f"POST {path} HTTP/1.1".encode() and body == b"0123456789"
    assert b"Content-Type: x/y" in lines and b"Content-Length: 10" in lines


def test_a_stalled_server_is_a_timeout_and_nonsense_a_connection_error():
    assert run_client("/stall", 1, timeout_s=0.3)[0] == ["timeout"]
    assert run_client("/garbage", 2)[0] == ["connection-error"] * 2


def test_nobody_listening_is_a_connection_error():
    async def main():
        client = LoadClient("http://127.0.0.1:1/v1/predict", b"", {}, 5.0, 1)
        return await client.post()

    assert asyncio.run(main()) == "connection-error"


@pytest.mark.parametrize("url, headers", [
    ("ftp://127.0.0.1/x", {}), ("http:///x", {}), ("http://h/x", {"X-Api-Key": "a\r\nInjected: 1"}),
])
def test_bad_urls_and_header_injection_are_usage_errors(url, headers):
    with pytest.raises(UsageError):
        LoadClient(url, b"", headers, 1.0, 1)
