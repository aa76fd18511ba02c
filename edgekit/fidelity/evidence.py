"""What a fidelity figure was measured on, and what that makes it worth, in words.

Only figures measured on data shaped like the model's real inputs are a verdict; a figure measured
on inputs edgekit made up says so wherever it is shown, and is never called verified."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

EVAL_DATA = "eval-data"  # --eval-data: the user's own evaluation set
CALIB_HOLDOUT = "calib-holdout"  # samples of --calib the quantizer never calibrated on
TEST_SPLIT = "test-split"  # a zoo model's labelled held-out split
SYNTHETIC = "synthetic"  # inputs edgekit generated from the input specs
REAL = (EVAL_DATA, CALIB_HOLDOUT, TEST_SPLIT)
EVIDENCE = (*REAL, SYNTHETIC)

SYNTHETIC_NOTE = "measured on synthetic inputs: not evidence of accuracy"
# what a missing --eval-data costs, said where the verdict is shown
SYNTHETIC_HINT = ("give --eval-data (or --calib) with inputs like the model's real ones for a verdict")

EVAL_MAX_SAMPLES = 256  # samples (or stream steps) an evaluation reads at most
HOLDOUT_SHARE = 5  # static calibration with --calib and no --eval-data: 1/5 of it held out...
HOLDOUT_MAX = 64  # ...at most this many samples...
HOLDOUT_MIN_SAMPLES = 10  # ...when it holds at least this many
HOLDOUT_BATCH = 1  # held-out samples are judged one at a time: the same memory for 2 of them as for 64


@dataclass(frozen=True)
class EvalSettings:
    """How a quantize run judges its files: ``data`` (with ``kind`` EVAL_DATA or CALIB_HOLDOUT and,
    for a held-out part, ``skip``: the samples calibration used first), how it is read
    (``preprocess`` images, ``tokenizer`` text), whether real data is required, and declared
    output kinds / state pairs / sample axes (they steer calibration too)."""

    data: Path | None = None
    kind: str = SYNTHETIC
    skip: int = 0
    preprocess: str | None = None
    tokenizer: Path | None = None
    require: bool = False
    kinds: dict = field(default_factory=dict)  # output name -> scalar | classes | sequence | tensor
    state: dict = field(default_factory=dict)  # state input -> the output fed back into it
    axes: dict = field(default_factory=dict)  # --sample-axis: input -> the axis that counts its samples
    max_samples: int = EVAL_MAX_SAMPLES
    batch_size: int | None = None  # samples judged at a time (None: assess.EVAL_BATCH)

    @property
    def reading(self) -> dict:
        reading = {"preprocess": self.preprocess, "tokenizer": self.tokenizer}
        return {k: v for k, v in reading.items() if v is not None}


def describe(kind: str, data: Path | None, samples: int, streams: int | None = None) -> str:
    """One line: what the figures were measured on."""
    what = f"{samples} samples" if streams is None else f"{streams} streams, {samples} steps"
    if kind == EVAL_DATA:
        return f"measured on --eval-data {data} ({what})"
    if kind == CALIB_HOLDOUT:
        return f"measured on {what} of --calib {data} that calibration did not use"
    if kind == TEST_SPLIT:
        return f"measured on the model's held-out test split ({what})"
    return f"{SYNTHETIC_NOTE} ({what}); {SYNTHETIC_HINT}"


def holdout(count: int) -> int:
    """How many of ``count`` calibration samples a static run keeps out of calibration to judge on."""
    if count < HOLDOUT_MIN_SAMPLES:
        return 0
    return max(1, min(HOLDOUT_MAX, count // HOLDOUT_SHARE))
