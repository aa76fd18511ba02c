"""Progress of the long quantization steps (QAT epochs, ``--auto`` candidates, sensitivity analysis).

Library code never prints: it calls the job's ``progress`` callback with a ``StepProgress`` (and,
during calibration, a ``CalibrationProgress``); the CLI decides how to show it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepProgress:
    stage: str  # "qat", "auto", "auto-bench", "sensitivity", "fallback"
    done: int  # steps finished so far (0: the stage starts)
    total: int | None
    detail: str = ""

    def describe(self) -> str:
        what = STAGE_NAMES.get(self.stage, self.stage)
        count = f" {self.done}/{self.total}" if self.total else ""
        return f"{what}{count}" + (f": {self.detail}" if self.detail else "")


STAGE_NAMES = {
    "qat": "QAT epoch",
    "auto": "auto: candidate",
    "auto-bench": "auto: timing candidates",
    "auto-target": "auto: on the target's emulated core",
    "sensitivity": "sensitivity: layer",
    "fallback": "float fallback: layer",
}


def report(progress, stage: str, done: int, total: int | None, detail: str = "") -> None:
    """Send one ``StepProgress`` to ``progress`` (a no-op without a callback)."""
    if progress is not None:
        progress(StepProgress(stage, done, total, detail))
