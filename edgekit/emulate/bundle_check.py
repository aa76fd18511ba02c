"""The bundle's own output check, held to what the emulated board computed.

A board that reproduces the host bit for bit still fails the user's ``sh run.sh verify`` (or
``python3 check_outputs.py``) when those outputs miss the limits the bundle's check runs with (a
native int8 bundle: cosine and top-1 agreement against the float model's reference). ``verify
--emulate`` applies the same limits, with the board check's own code, and fails with them."""

from __future__ import annotations


def own_limits(bundle) -> dict:
    """The limits the bundle's entry script passes to its check (none for a Python bundle's
    ``check_outputs.py``: its cosine floor alone)."""
    from edgekit.bundle import native

    if not native.is_native(bundle.info):
        return {}
    args = native.check_limits(bundle.precision)
    return {flag.lstrip("-").replace("-", "_"): float(value) for flag, value in zip(args[::2], args[1::2])}


def own_check(emulated: dict, reference: dict, limits: dict, command: str) -> dict:
    """The check's verdict on the emulated outputs (``b{N}/output`` arrays) against the reference."""
    from edgekit.board.check import compare, limit_failures

    found = {}
    for key in sorted(reference):
        if key in emulated:
            try:
                found[key] = compare(emulated[key], reference[key])
            except RuntimeError as exc:  # a shape the reference does not have
                return {"command": command, "limits": limits, "ok": False, "failures": [f"{key}: {exc}"]}
    if not found:
        return {"command": command, "limits": limits, "ok": False, "failures": ["no reference batch was compared"]}
    top1s = [f["top1_agreement"] for f in found.values() if f["top1_agreement"] is not None]
    doc = {"max_abs": max(f["max_abs"] for f in found.values()), "cosine": min(f["cosine"] for f in found.values()),
           "top1_agreement": min(top1s) if top1s else None}
    failures = limit_failures(doc, **limits)
    return {"command": command, "limits": limits, **doc, "ok": not failures, "failures": failures}
