"""The bundle's own output check, held to what the emulated board computed.

A board that reproduces the host bit for bit still fails the user's ``sh run.sh verify`` (or
``python3 check_outputs.py``) when those outputs miss the limits the bundle's check runs with (a
native int8 bundle: cosine and top-1 agreement against the float model's reference). ``verify
--emulate`` applies the same limits, with the board check's own code, and fails with them."""

from __future__ import annotations

from pathlib import Path
from edgekit.board.check import judge
from edgekit.board.errors import BoardUsageError
from edgekit.board.inputs import output_key, read_reference
from edgekit.bundle import native


def own_limits(bundle) -> dict:
    """The limits the bundle's entry script passes to its check (none for a Python bundle's
    ``check_outputs.py``: its cosine floor alone)."""
    if not native.is_native(bundle.info):
        return {}
    args = native.check_limits(bundle.precision)
    return {flag.lstrip("-").replace("-", "_"): float(value) for flag, value in zip(args[::2], args[1::2])}


def own_check(emulated: dict, reference: Path, limits: dict, command: str) -> dict:
    """The check's verdict on the emulated outputs (``b{N}/output``, ``b{N}/outputs/{k}`` arrays) against
    the reference file, judged by the board check's own code (every output, each with its rule)."""
    try:
        cases = read_reference(reference, every_output=True)
    except BoardUsageError as exc:
        return {"command": command, "limits": limits, "ok": False, "failures": [str(exc)]}
    runs = {}
    for batch, (inputs, wants) in cases.items():
        gots = [emulated[key] for k in range(len(wants)) if (key := output_key(batch, k)) in emulated]
        if gots:
            runs[batch] = (inputs, gots, wants)
    if not runs:
        return {"command": command, "limits": limits, "ok": False, "failures": ["no reference batch was compared"]}
    try:
        doc = judge(runs, [], **limits)
    except RuntimeError as exc:  # a shape the reference does not have
        return {"command": command, "limits": limits, "ok": False, "failures": [str(exc)]}
    return {"command": command, "limits": limits, **{key: doc[key] for key in ("max_abs", "cosine", "top1_agreement")},
            "ok": doc["ok"], "failures": doc["failures"]}
