"""A pipeline variant whose format no ``edgekit-run`` runs but whose Python bundle is counted (its table
entry's ``Board.counted_in_python``): bundled for the target and counted with its own runtime's
wheel on the target's emulated core (``edgekit.emulate.icount_python``), Python's per-call work included.

Counting runs in the cached arm64 rootfs (built once; each runtime's venv installed once), as root.
What stops it (no root, no rootfs, no wheel for the board) is ``Unavailable`` with the reason in one
line: the pipeline keeps that row on host timings, says why, and ranks the rest.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from edgekit.estimate.on_target import EMULATED_RUNS, Progress, TargetCost, Unavailable, priced


def counted_in_python(fmt: str) -> bool:
    """The format runs on the board in a Python bundle that emulated counts cover (the format table says)."""
    from edgekit import formats

    return fmt in formats.names() and formats.get(fmt).board.counted_in_python


def python_runtime(fmt: str) -> str:
    """The distribution that runs ``fmt`` on the board, from the format table ("ncnn", "ai-edge-litert")."""
    from edgekit import formats

    return formats.get(fmt).board.runtime


class PythonCounter:
    """Counts each distinct model file once, as a Python bundle of its export built for the target."""

    def __init__(self, target, threads: int | None, progress: Progress):
        from edgekit.estimate.cores import load_cores

        self.target, self.threads, self.progress = target, threads, progress
        self.cores = load_cores()
        self.counted: dict[str, dict] = {}

    def cost(self, path: Path, fmt: str) -> TargetCost:
        return priced(self._counts(Path(path), fmt), self.target, self.threads, self.cores)

    def _counts(self, path: Path, fmt: str) -> dict:
        from edgekit.core.errors import EdgekitError
        from edgekit.emulate import EmulationError

        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest not in self.counted:
                self.counted[digest] = self._count(path, fmt)
        except (EmulationError, EdgekitError, OSError) as exc:
            raise Unavailable(f"not counted under emulation: {str(exc).splitlines()[0]}") from None
        return self.counted[digest]

    def _count(self, path: Path, fmt: str) -> dict:
        from edgekit.bundle.build import build_bundle
        from edgekit.emulate.bundle import open_bundle
        from edgekit.emulate.host import qemu_cpu_for, qemu_cpus
        from edgekit.emulate.icount_plugin import plugin_qemu
        from edgekit.emulate.icount_python import count_python_bundle

        if os.geteuid() != 0:
            raise Unavailable(f"not counted under emulation: a Python bundle of {fmt} is counted in the arm64 "
                              "rootfs's sandbox, which needs root")
        cpu, note = qemu_cpu_for(self.target.core, tuple(qemu_cpus(plugin_qemu())))
        if note:
            raise Unavailable(f"emulation skipped: {note}")
        self.progress(f"count instructions of {path.parent.name}/{path.name} in a Python bundle "
                      f"({python_runtime(fmt)}) on emulated {self.target.core}")
        with tempfile.TemporaryDirectory(prefix="edgekit-python-count-") as work:
            bundle = build_bundle(path.parent, self.target, Path(work) / "bundle", fmt=fmt, archive=False)
            return count_python_bundle(open_bundle(bundle), cpu, runs=EMULATED_RUNS)
