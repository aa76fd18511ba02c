"""The ``--host`` family of ``edgekit bench`` options, and the call they make (no printing here)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from edgekit.core.errors import UsageError
from edgekit.remote.bench import DEFAULT_REMOTE_DIR, DEFAULT_REMOTE_PYTHON, DEFAULT_TIMEOUT_S, remote_bench

MAX_RUNS = 100_000  # the runner's default cap on timed runs


@dataclass(frozen=True)
class RemoteOptions:
    host: str | None = None
    port: int | None = None
    identity: str | os.PathLike | None = None
    ssh_options: tuple[str, ...] = ()
    remote_dir: str | None = None
    remote_python: str | None = None
    timeout_s: float | None = None
    force: bool = False

    def wanted(self) -> bool:
        """True with --host; a UsageError when other remote options come without it."""
        if self.host is not None:
            return True
        given = [flag for flag, value in (
            ("--port", self.port), ("--identity", self.identity), ("--ssh-option", self.ssh_options or None),
            ("--remote-dir", self.remote_dir), ("--remote-python", self.remote_python), ("--timeout", self.timeout_s),
            ("--force", self.force or None),
        ) if value is not None]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise UsageError(f"{', '.join(given)} {verb} only to a remote run; add --host [user@]host")
        return False

    def bench(self, artifacts: Sequence[os.PathLike | str], *, target: str | None, threads: int | None,
              warmup: int, min_runs: int, min_time_s: float, batch: int,
              shapes: Mapping[str, Sequence[int]] | None, input_file=None,
              on_line: Callable[[str], None] | None = None) -> list:
        """Benchmark the one artifact on the board; a list of one BenchResult (mode "remote")."""
        if len(artifacts) != 1:
            raise UsageError(f"--host benchmarks one bundle or export folder at a time, got {len(artifacts)}")
        if input_file is not None:
            raise UsageError("--input is not supported with --host yet; use --shape, or bench on the board by hand")
        result = remote_bench(
            artifacts[0], self.host, target=target, port=self.port, identity=self.identity,
            ssh_options=self.ssh_options, remote_dir=self.remote_dir or DEFAULT_REMOTE_DIR,
            remote_python=self.remote_python or DEFAULT_REMOTE_PYTHON,
            timeout_s=DEFAULT_TIMEOUT_S if self.timeout_s is None else self.timeout_s,
            threads=threads, warmup=warmup, min_runs=min_runs, min_time_s=min_time_s, batch=batch,
            max_runs=max(MAX_RUNS, min_runs),  # the CLI has no --max-runs: never refuse a large --min-runs
            shapes=shapes, on_line=on_line, force=self.force,
        )
        return [result]
