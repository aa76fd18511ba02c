"""Run a command with a deadline; its whole process group is stopped when the deadline passes.

Emulated programs spawn children (pip, debootstrap's maintainer scripts), so each command runs
in its own session and a timeout or Ctrl-C ends the group: SIGTERM first (debootstrap unmounts
what it mounted on the way out), SIGKILL after a grace period.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from edgekit.emulate import EmulationError

GRACE_S = 10.0
TAIL_LINES = 40


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str  # everything, when captured; else ""
    tail: tuple[str, ...]  # the last lines of merged (streamed) or error (captured) output
    seconds: float


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _dies_with_us() -> list[str]:
    """``setpriv --pdeathsig TERM --``: the command gets SIGTERM should edgekit itself be killed
    (it runs in its own session, so nothing else would stop it); empty where setpriv is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


def _start(argv: Sequence[str], env: Mapping[str, str] | None, cwd, stdout, stderr, what: str,
           preexec=None) -> subprocess.Popen:
    try:
        return subprocess.Popen(
            [*_dies_with_us(), *(str(a) for a in argv)], env=None if env is None else dict(env), cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout, stderr=stderr, start_new_session=True, preexec_fn=preexec,
        )
    except OSError as exc:
        raise EmulationError(f"cannot start {what}: {exc.strerror or exc}") from None


def _wait(proc: subprocess.Popen, timeout_s: float, what: str) -> None:
    """Wait for ``proc``; past the deadline or on any interruption its whole group is stopped."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        raise EmulationError(f"{what} timed out after {timeout_s:g} s; it was stopped") from None
    except BaseException:
        _stop_group(proc)
        raise


def run_streamed(
    argv: Sequence[str],
    *,
    what: str,
    timeout_s: float,
    on_line: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
    cwd=None,
) -> Finished:
    """Run ``argv`` with stdout and stderr merged, handing each line to ``on_line`` as it comes."""
    started = time.monotonic()
    proc = _start(argv, env, cwd, subprocess.PIPE, subprocess.STDOUT, what)
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)

    def pump() -> None:
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                tail.append(line)
                if on_line is not None:
                    on_line(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        _wait(proc, timeout_s, what)
    finally:
        reader.join(timeout=5)
        proc.stdout.close()
    return Finished(proc.returncode, "", tuple(tail), time.monotonic() - started)


def run_captured(
    argv: Sequence[str], *, what: str, timeout_s: float, env: Mapping[str, str] | None = None, cwd=None
) -> Finished:
    """Run ``argv``, keeping its stdout whole and the tail of its stderr."""
    started = time.monotonic()
    proc = _start(argv, env, cwd, subprocess.PIPE, subprocess.PIPE, what)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        proc.communicate()
        raise EmulationError(f"{what} timed out after {timeout_s:g} s; it was stopped") from None
    except BaseException:
        _stop_group(proc)
        raise
    lines = [line.rstrip() for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    return Finished(proc.returncode, out.decode("utf-8", "replace"), tuple(lines[-TAIL_LINES:]),
                    time.monotonic() - started)


MAX_CAPTURED_BYTES = 64 << 20


def run_fenced(argv: Sequence[str], *, what: str, timeout_s: float, env: Mapping[str, str], preexec) -> Finished:
    """``run_captured`` for a program nobody vouches for (``emulate.sandbox``): ``preexec`` sets its
    limits, and its output goes to files (bounded by the file-size limit) of which at most
    ``MAX_CAPTURED_BYTES`` are read back, so no amount of printing can fill this process's memory."""
    import tempfile

    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = _start(argv, env, None, out, err, what, preexec)
        _wait(proc, timeout_s, what)
        _stop_group(proc)  # what it left behind in its session goes too
        out.seek(0)
        err.seek(max(0, err.seek(0, os.SEEK_END) - MAX_CAPTURED_BYTES))
        stdout, stderr = out.read(MAX_CAPTURED_BYTES), err.read(MAX_CAPTURED_BYTES)
    lines = [line.rstrip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    return Finished(proc.returncode, stdout.decode("utf-8", "replace"), tuple(lines[-TAIL_LINES:]),
                    time.monotonic() - started)


def last_error(tail: Sequence[str], noise: Sequence[str] = ()) -> str:
    """The most telling line of a failed command's output: its last line that is not known noise."""
    for line in reversed(tail):
        if not any(marker in line for marker in noise):
            return line.strip().removeprefix("Error: ")
    return ""
