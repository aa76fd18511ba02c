"""Start ``edgekit serve`` in a child process on 127.0.0.1 and a free port; stop it with SIGTERM.

Used by ``edgekit loadtest --serve`` (and the tests and benchmarks): the child announces its
address on stderr; this waits for ``/readyz`` and, on leaving, asks it to shut down gracefully.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

from edgekit.core.errors import BenchError
from edgekit.core.children import popen_kwargs

_ADDRESS = re.compile(r" on (http://\S+)")


@contextlib.contextmanager
def local_server(artifact: str | Path, extra: list[str] = (), *, host: str = "127.0.0.1", api_key: str | None = None,
                 start_timeout_s: float = 120.0, stop_timeout_s: float = 60.0) -> Iterator[str]:
    """Yield the base URL of ``edgekit serve ARTIFACT`` running in a child process."""
    proc = start(artifact, extra, host=host, api_key=api_key)
    try:
        yield wait_ready(proc, start_timeout_s, api_key)
    finally:
        stop(proc, stop_timeout_s)


def start(artifact, extra=(), *, host: str = "127.0.0.1", api_key: str | None = None, port: int = 0) -> subprocess.Popen:
    argv = [sys.executable, "-m", "edgekit", "serve", str(artifact), "--host", host, "--port", str(port), *extra]
    env = dict(os.environ)
    if api_key:
        env["EDGEKIT_API_KEY"] = api_key
    return spawn(argv, env)


def spawn(argv: list[str], env: dict | None = None) -> subprocess.Popen:
    """Start a server command line that announces "... on http://HOST:PORT" on stderr."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=False, **popen_kwargs())  # dies with this process
    proc.lines = []  # stderr lines, collected by a reader thread
    proc.address = None
    ready = threading.Event()

    def read():
        for line in proc.stderr:
            proc.lines.append(line.rstrip())
            found = _ADDRESS.search(line)
            if found and proc.address is None:
                proc.address = found.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    proc.announced = ready
    return proc


def wait_ready(proc: subprocess.Popen, timeout_s: float = 120.0, api_key: str | None = None) -> str:
    import httpx

    deadline = time.monotonic() + timeout_s
    proc.announced.wait(timeout_s)
    if proc.address is None:
        stop(proc, 5)
        raise BenchError(f"edgekit serve did not start: {' | '.join(proc.lines[-5:]) or 'no output'}")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"edgekit serve exited with {proc.returncode}: {' | '.join(proc.lines[-5:])}")
        try:
            if httpx.get(f"{proc.address}/readyz", timeout=2).status_code == 200:
                return proc.address
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    stop(proc, 5)
    raise BenchError(f"edgekit serve at {proc.address} was not ready within {timeout_s:g} s")


def stop(proc: subprocess.Popen, timeout_s: float = 60.0) -> int:
    """SIGTERM (graceful: accepted requests finish), then SIGKILL after ``timeout_s``; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
