"""One model file's cost on a target's board, from its instructions counted on the target's emulated
core and priced by the core's fitted model: what target decisions (the pipeline, ``quantize --auto``)
compare instead of this host's timings."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable
from edgekit.core.errors import EdgekitError
from edgekit.emulate import EmulationError
from edgekit.emulate.host import qemu_cpu_for, qemu_cpus
from edgekit.emulate.icount import RUNNERS, companion_files, count_per_run
from edgekit.emulate.icount_plugin import plugin_qemu
from edgekit.estimate.cores import for_target, load_cores

EMULATED_RUNS = 4  # instruction counts are deterministic: a few inferences give the per-inference count exactly
MEASURED, ESTIMATED, COUNTED, HOST = "measured", "estimated", "counted", "host"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class TargetCost:
    basis: str  # measured | estimated | counted (instructions, no fitted model for the core) | host
    label: str  # "estimated on emulated Cortex-A72 at 1800 MHz, 4 threads", "measured on aarch64 (...)", ...
    ms: float | None = None  # the board's latency per inference: measured p50 or the estimate
    low_ms: float | None = None
    high_ms: float | None = None
    instructions: int | None = None  # per inference on the target's core (one thread)
    classes: dict | None = None
    note: str = ""  # why a host row has no target figure

    @property
    def on_target(self) -> bool:
        return self.basis != HOST

    @property
    def cost(self) -> float | None:
        """What ratios between variants compare: milliseconds, or instructions where there is no estimate."""
        return self.ms if self.ms is not None else self.instructions

    def cell(self) -> str:
        if self.basis == HOST:
            return "-"
        if self.basis == COUNTED:
            return f"{self.instructions / 1e6:.2f} M instr"
        if self.low_ms is None:
            return f"{self.ms:.3f} ms"
        return f"~{self.ms:.3g} ms ({self.low_ms:.3g}-{self.high_ms:.3g})"

    def to_dict(self) -> dict:
        return asdict(self)


def counted_formats() -> tuple[str, ...]:
    """The formats the emulated counter runs (``edgekit.emulate.icount.RUNNERS``)."""
    return tuple(RUNNERS)


class Unavailable(Exception):
    """Emulated counting cannot run on this machine (no QEMU with plugins, no compiler, ...)."""


def no_emulation(target, emulate: bool) -> str | None:
    """Why nothing is counted for ``target`` whatever the file, or None."""
    if not emulate:
        return "emulation off (--no-emulate)"
    if target.arch != "aarch64":
        return f"emulated counts are for aarch64 boards; {target.name} is {target.arch}"
    return None


class Counter:
    """Counts model files on a target's emulated core, each distinct file once. A file that cannot be
    counted raises ``Unavailable`` with the reason (QEMU missing, the model failing under it): the
    caller keeps that row on host timings and goes on with the next."""

    def __init__(self, target, threads: int | None, progress: Progress):
        self.target, self.threads, self.progress = target, threads, progress
        self.cores = load_cores()  # read once: every file of a run is priced by the same model
        self.counted: dict[str, dict] = {}

    def cost(self, path: Path, fmt: str = "executorch") -> TargetCost:
        return priced(self._counts(Path(path), fmt), self.target, self.threads, self.cores)

    def _counts(self, path: Path, fmt: str) -> dict:
        try:
            digest = hashlib.sha256(b"".join(part.read_bytes() for part in (path, *companion_files(path, fmt)))
                                    ).hexdigest()  # ncnn's graph names no weights: both files
            if digest not in self.counted:
                cpu, note = qemu_cpu_for(self.target.core, tuple(qemu_cpus(plugin_qemu())))
                if note:
                    raise Unavailable(f"emulation skipped: {note}")
                self.progress(f"count instructions of {path.parent.name}/{path.name} on emulated {self.target.core}")
                self.counted[digest] = count_per_run(path, fmt, cpu, threads=1, runs=EMULATED_RUNS)
        except (EmulationError, EdgekitError, OSError) as exc:
            raise Unavailable(f"not counted under emulation: {str(exc).splitlines()[0]}") from None
        return self.counted[digest]


def priced(counts: dict, target, threads: int | None, cores=None) -> TargetCost:
    """``count_per_run``'s counts as the target's cost: estimated where its core has a fitted model
    (``cores``: the fitted models, default the shipped ones)."""
    core = target.core or target.arch
    estimate = for_target(target, counts["classes"], threads, cores)
    if estimate is None:
        return TargetCost(COUNTED, f"counted on emulated {core} (no fitted cost model for it)",
                          instructions=counts["per_run"], classes=counts["classes"])
    return TargetCost(ESTIMATED, f"estimated on emulated {core} at {estimate.mhz:.0f} MHz, {estimate.threads} "
                      f"thread{'s' if estimate.threads != 1 else ''}", estimate.ms, estimate.low_ms, estimate.high_ms,
                      counts["per_run"], counts["classes"])
