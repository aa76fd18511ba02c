"""Running edgekit bundles on a board over SSH (the system OpenSSH client, argument lists only).

    hosts.py    parse and validate ``[user@]host``, ssh options and remote paths (no I/O)
    ssh.py      the ssh command line, running it, and turning its failures into one-line errors
    scripts.py  the POSIX sh snippets run on the board (values arrive as quoted arguments)
    transfer.py probe the board, re-use or copy a bundle (checked with sha256sum -c there)
    bench.py    ``remote_bench``: bundle (if needed) -> copy -> run runner.py -> BenchResult
"""

from __future__ import annotations
