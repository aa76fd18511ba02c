"""Runner processes: start the board's benchmark runner (``edgekit.board.runner``) for a model and read its JSON result, either
once (one model) or in ``--serve`` mode, asked for blocks of timed calls in turn (several models,
interleaved). ``api.bench`` and ``workers`` (several processes per model) both build on this.
"""

from __future__ import annotations

import collections
import json
import math
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgekit.formats.artifacts import ModelFile
from edgekit.records.result import BenchResult, from_document
from edgekit.board import runner as _runner
from edgekit.board.errors import EXIT_USAGE
from edgekit.core.children import popen_kwargs
from edgekit.core.errors import BenchError, EdgekitError, InputFileError, UsageError

# -P: nothing of the working folder on the runner's path (it must see only what a device has)
RUNNER_COMMAND = (sys.executable, "-P", "-m", _runner.__name__)
# An interleaved turn lasts at least this long (and at least ``block_size`` calls): each hand-over
# costs the runner's settle wait (worker threads stop spinning, up to ~30 ms) plus one re-warm call.
MIN_BLOCK_S = 0.05
Progress = Callable[[int, int], None]  # (model index, timed runs done so far)


@dataclass(frozen=True)
class BenchModel:
    """A model file to time, with its manifest entry when it sits in an artifact folder."""

    path: Path
    format: str  # a format of the table
    entry: ModelFile | None = None
    runner: Path | None = None  # a native bundle's edgekit-run, which times the model itself


def runner_failure(model: BenchModel, returncode: int, stderr: str) -> EdgekitError:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if lines:
        last = lines[-1].removeprefix("Error: ")
    else:
        last = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    if returncode == EXIT_USAGE:
        return UsageError(f"{model.path}: {last}")
    return BenchError(f"benchmark of {model.path} failed: {last}")


def to_result(model: BenchModel, raw) -> BenchResult:
    try:
        return from_document(raw, f"runner output for {model.path}")[0]
    except InputFileError as exc:
        raise BenchError(str(exc)) from None


def run_plain(model: BenchModel, argv: list[str], env: dict, timeout_s: float) -> BenchResult:
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s, env=env, check=False, **popen_kwargs())
    except subprocess.TimeoutExpired:  # run() has killed the runner
        raise BenchError(f"benchmark of {model.path} timed out after {timeout_s:g} s; the runner was stopped") from None
    except OSError as exc:
        raise BenchError(f"cannot start the benchmark runner: {exc}") from None
    if proc.returncode != 0:
        raise runner_failure(model, proc.returncode, proc.stderr)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise BenchError(f"benchmark of {model.path}: the runner wrote no valid JSON") from None
    return to_result(model, doc)


class Served:
    """One runner in ``--serve`` mode, spoken to in JSON lines (protocol: runner.py docstring)."""

    def __init__(self, model: BenchModel, argv: list[str], env: dict, timeout_s: float):
        self.model, self.timeout_s = model, timeout_s
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1, env=env, **popen_kwargs())
        except OSError as exc:
            raise BenchError(f"cannot start the benchmark runner: {exc}") from None
        self.lines: queue.Queue = queue.Queue()
        self.stderr: collections.deque = collections.deque(maxlen=50)
        self.readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put, True), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append, False), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _pump(stream, sink, mark_end: bool) -> None:
        for line in stream:
            sink(line)
        if mark_end:
            sink(None)

    def ask(self, command: dict | None, deadline: float) -> dict:
        """Send ``command`` (None: just read the next line) and return the runner's reply."""
        if command is not None:
            try:
                self.proc.stdin.write(json.dumps(command) + "\n")
                self.proc.stdin.flush()
            except OSError:
                raise self._died() from None
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise BenchError(f"benchmark of {self.model.path} timed out after {self.timeout_s:g} s; the runners were stopped") from None
        if line is None:
            raise self._died()
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            raise BenchError(f"benchmark of {self.model.path}: unexpected runner output {line.strip()[:80]!r}") from None
        if not isinstance(reply, dict) or reply.get("ok") is False:
            error = reply.get("error") if isinstance(reply, dict) else reply
            raise BenchError(f"benchmark of {self.model.path} failed: {error}")
        return reply

    def _died(self) -> EdgekitError:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.readers[1].join(timeout=5)
        return runner_failure(self.model, code, "".join(self.stderr))

    def close(self, kill: bool) -> None:
        """Stop the runner: end of input lets it exit by itself; ``kill`` does not wait."""
        if kill and self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for reader in self.readers:
            reader.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()


def run_interleaved(models, argvs, env, *, min_runs, min_time_s, max_runs, block_size, timeout_s,
                     progress: Progress) -> tuple[list[dict], list[list[int]]]:
    """One runner per model, interleaved; (each runner's raw result, each model's timed calls in ns)."""
    deadline = time.monotonic() + timeout_s
    min_ns = min_time_s * 1e9
    served: list[Served] = []
    finished = False
    try:
        for index, (model, argv) in enumerate(zip(models, argvs)):
            runner = Served(model, [*argv, "--serve"], env, timeout_s)  # loads one at a time: load times stay clean
            served.append(runner)
            if runner.ask(None, deadline).get("event") != "ready":
                raise BenchError(f"benchmark of {model.path}: the runner did not report ready")
            progress(index, 0)
        runs, total = [0] * len(served), [0] * len(served)
        timings: list[list[int]] = [[] for _ in served]
        done = [False] * len(served)
        while not all(done):
            for index, runner in enumerate(served):
                if done[index]:
                    continue
                n = block_size
                if runs[index]:  # enough calls to fill MIN_BLOCK_S at this model's mean so far
                    n = max(n, math.ceil(MIN_BLOCK_S * 1e9 * runs[index] / max(total[index], 1)))
                n = min(n, max_runs - runs[index], _runner.MAX_BLOCK)
                block = runner.ask({"cmd": "run", "n": n, "warm": 1}, deadline)
                samples = block.get("ns")
                if not isinstance(samples, list) or not samples:
                    raise BenchError(f"benchmark of {runner.model.path}: the runner sent no timings")
                runs[index] += len(samples)
                total[index] += sum(samples)
                timings[index].extend(samples)
                done[index] = runs[index] >= max_runs or (runs[index] >= min_runs and total[index] >= min_ns)
                progress(index, runs[index])
        raws = [runner.ask({"cmd": "finish"}, deadline).get("result") for runner in served]
        finished = True
    finally:
        for runner in served:
            runner.close(kill=not finished)
    return raws, timings


def document(raw) -> dict:
    return {"schema": _runner.BENCH_SCHEMA, "schema_version": _runner.BENCH_SCHEMA_VERSION, "results": [raw]}
