"""Where a run's records go: the caller's ``progress`` callback and ``metrics.jsonl`` (and, with
``profile=True``, ``torch.profiler`` traces).

Library code never prints. Each record is a flat dict with an ``event`` key:

- ``start``      model, device, precision, world size, steps, global batch, parameters
- ``step``       step, total_steps, epoch, loss, lr, throughput (+ unit), eta_s, elapsed_s,
                 loss_scale (fp16), grad_norm (with clipping)
- ``eval``       step, epoch, epochs, train_loss, val_loss, val_<metric>, best_val_<metric>, improved
- ``checkpoint`` kind (best | last), step, path
- ``warning``    message, step
- ``end``        step, elapsed_s and the final test metrics

Warnings go to the callback when there is one, else to ``warnings.warn``.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Callable
from edgekit.core.errors import InputFileError
from edgekit.core.fileio import loads_json, write_text

Progress = Callable[[dict], None]
METRICS_FILE = "metrics.jsonl"


class TrainingWarning(UserWarning):
    """Something in a run needs attention but did not stop it (skipped step, falling loss scale)."""


class RunLog:
    def __init__(self, folder: Path, progress: Progress | None, enabled: bool):
        self.path = folder / METRICS_FILE
        self.progress = progress
        self.enabled = enabled  # only rank 0 reports

    def emit(self, event: str, **fields) -> dict:
        record = {"event": event, **fields}
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
            if self.progress is not None:
                self.progress(record)
        return record

    def warn(self, message: str, **fields) -> None:
        self.emit("warning", message=message, **fields)
        if self.enabled and self.progress is None:
            warnings.warn(message, TrainingWarning, stacklevel=3)

    def truncate_after(self, step: int) -> None:
        """On resume: drop records the interrupted run wrote after the state being resumed."""
        if not (self.enabled and self.path.is_file()):
            return


        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = loads_json(line, str(self.path))
            except InputFileError:
                continue  # a line cut short by the interruption (or damaged: it is not kept)
            step_of = record.get("step", 0) if isinstance(record, dict) else None
            if isinstance(step_of, (int, float)) and not isinstance(step_of, bool) and step_of <= step:
                kept.append(line + "\n")
        write_text(self.path, "".join(kept))


class Meter:
    """Throughput and ETA over training time only (evaluation and saving are excluded)."""

    def __init__(self, total_steps: int, start_step: int):
        self.total_steps = total_steps
        self.start_step = start_step
        self.started = self.last = time.perf_counter()
        self.paused = 0.0  # seconds spent outside training since the last snapshot
        self.paused_total = 0.0

    def exclude(self, seconds: float) -> None:
        self.paused += seconds
        self.paused_total += seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def snapshot(self, step: int, units: float) -> dict:
        now = time.perf_counter()
        window = max(now - self.last - self.paused, 1e-9)
        busy = max(now - self.started - self.paused_total, 1e-9)
        done = max(step - self.start_step, 1)
        self.last, self.paused = now, 0.0
        return {
            "throughput": units / window,
            "eta_s": (self.total_steps - step) * busy / done,
            "elapsed_s": round(now - self.started, 3),
        }


PROFILE_SCHEDULE = {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}


def profiler(out: Path, device):
    """``torch.profiler`` for ``profile=True``: a few steps, Chrome traces in ``out/profile/``."""
    from torch.profiler import ProfilerActivity, profile, schedule

    folder = out / "profile"
    folder.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])

    def write(prof) -> None:
        prof.export_chrome_trace(str(folder / f"trace_step{prof.step_num}.json"))

    return profile(activities=activities, schedule=schedule(**PROFILE_SCHEDULE), on_trace_ready=write)
