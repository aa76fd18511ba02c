"""The inputs every runtime of one model is counted on: the artifact's reference inputs (batch 1).

A runner's random inputs differ from runtime to runtime (edgekit-run's generator is not numpy's), and
some models' cost follows the values: a BERT-style encoder under ONNX Runtime attends over as many
positions as its attention mask holds ones. Counted on the same reference inputs, two runtimes'
counts differ by what the runtimes do, not by what they were fed. A model without reference data
keeps the runner's seeded random inputs (the count records which).
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.errors import InputFileError

INPUTS_NAME = "count-inputs.npz"  # beside the model in the counting sandbox
REFERENCE = "the artifact's reference inputs (batch 1)"
RANDOM = "the runner's seeded random inputs (no reference data)"


def reference_inputs(reference: Path | None) -> dict | None:
    """The batch-1 inputs (name -> array) of ``reference`` (an artifact's or bundle's reference.npz); None
    when there is no such file or it holds no batch-1 case. A damaged file is an InputFileError."""
    from edgekit.formats.reference import read_reference  # numpy: not on `edgekit --help`'s path

    if reference is None or not reference.is_file() or reference.is_symlink():
        return None
    cases = read_reference(reference)
    return dict(cases[1][0]) if 1 in cases else None


def write_inputs(arrays: dict, dest: Path) -> Path:
    """``arrays`` as the ``--input`` file of edgekit-run's and runner.py's bench (arrays by input name)."""
    import numpy as np

    if not arrays:
        raise InputFileError("no reference inputs to count on")
    with open(dest, "wb") as fh:
        np.savez(fh, **arrays)
    return dest
