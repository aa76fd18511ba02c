"""What native runtimes write on stderr: collected while a model loads and runs, shown on request.

ExecuTorch's Python bindings send its log (CPU probing, the cause behind an error code) to
``sys.stderr``; native code writes on file descriptor 2. Both are caught here so a user sees one
line, not the runtime's chatter; EDGEKIT_DEBUG passes everything through.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile


@contextlib.contextmanager
def native_stderr(lines: list):
    """Collect what the runtime logs meanwhile into ``lines``."""
    if os.environ.get("EDGEKIT_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved_fd, saved_stream, buffer = os.dup(2), sys.stderr, io.StringIO()
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            sys.stderr = buffer
            try:
                yield
            finally:
                sys.stderr = saved_stream
                os.dup2(saved_fd, 2)
                sink.seek(0)
                text = buffer.getvalue() + sink.read(1 << 20).decode("utf-8", errors="replace")
                lines.extend(line.strip() for line in text.splitlines() if line.strip())
    finally:
        os.close(saved_fd)


def native_detail(lines: list) -> str:
    """The runtime's first log line (the cause; what follows unwinds it), as a suffix for a one-line message."""
    logged = [line for line in lines if line.startswith("[")]
    return f" ({logged[0][:200]})" if logged else ""
