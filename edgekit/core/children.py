"""Child processes that die with edgekit: a runner, ssh or pip never outlives the command.

``popen_kwargs()`` gives ``subprocess`` the settings for that: on Linux the child asks the
kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), so even ``kill -9`` of edgekit
leaves no runner re-parented to PID 1. Elsewhere it is a no-op (the normal ``finally`` clean-up
still stops children on every exit Python sees).
"""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def popen_kwargs() -> dict:
    """Extra ``subprocess.Popen``/``run`` arguments that tie the child's life to this process."""
    if not sys.platform.startswith("linux"):
        return {}
    parent = os.getpid()
    return {"preexec_fn": lambda: _die_with_parent(parent)}
