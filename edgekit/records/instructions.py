"""The ``emulated`` section of a bench result: executed aarch64 instructions on a board's core.

    "emulated": {"cpu": "cortex-a72",
                 "instructions": {"per_run": 244871, "startup": 10012789,
                                  "classes": {"simd_fp": ..., "integer": ..., "load": ..., "store": ...,
                                              "branch": ..., "other": ...}},
                 "runs": 20, "threads": 1, "qemu": "7.2.22", "plugin": "qemu-plugin-<key>",
                 "libc": "/usr/aarch64-linux-gnu", "runner": "...",
                 "inputs": "the artifact's reference inputs (batch 1)"}

Written by ``edgekit bench --emulate`` (``edgekit.bench.emulated``), read back checked (a gate must
never compare a figure it cannot trust). Counts of two results compare only when the facts in
``COMPARABLE`` agree: the same core, threads and counting setup, and the same inputs where both say
(``inputs``: ``edgekit.emulate.count_inputs``; older results do not).
"""

from __future__ import annotations

from typing import Any

CLASSES = ("simd_fp", "integer", "load", "store", "branch", "other")
CLASS_LABELS = {"simd_fp": "SIMD/FP", "integer": "integer", "load": "loads", "store": "stores", "branch": "branches",
                "other": "other"}
COMPARABLE = ("cpu", "threads", "qemu", "plugin", "libc", "runner")
TEXT_FIELDS = ("cpu", "qemu", "plugin", "libc", "runner")
MAX_COUNT = 1 << 62
# instructions per inference two counts of one program may differ by and still count as equal: a margin for
# per-call work that follows QEMU's clock (counted between the runner's marks they have come out identical)
CALL_NOISE = 2_000
MAX_TEXT = 300


def section(counts: dict) -> dict[str, Any]:
    """The ``emulated`` section from ``edgekit.emulate.icount``'s counts."""
    return {
        "cpu": counts["cpu"],
        "instructions": {"per_run": counts["per_run"], "startup": counts["startup"],
                         "classes": {name: counts["classes"][name] for name in CLASSES}},
        **{key: counts[key] for key in ("runs", "threads", "qemu", "plugin", "libc", "runner")},
        **({"inputs": counts["inputs"]} if counts.get("inputs") else {}),
    }


def read_section(raw: Any) -> dict[str, Any]:
    """``raw`` checked: text facts, non-negative integer counts, classes that add up. ValueError names the field."""
    if not isinstance(raw, dict):
        raise ValueError(f"emulated must be a JSON object, got {type(raw).__name__}")
    out: dict[str, Any] = {}
    for key in TEXT_FIELDS:
        value = raw.get(key)
        if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
            raise ValueError(f"emulated.{key} must be text of 1-{MAX_TEXT} characters")
        out[key] = value
    for key in ("runs", "threads"):
        out[key] = _count(raw.get(key), f"emulated.{key}", low=1)
    counts = raw.get("instructions")
    if not isinstance(counts, dict) or not isinstance(counts.get("classes"), dict):
        raise ValueError("emulated.instructions must be a JSON object with classes")
    classes = {name: _count(counts["classes"].get(name), f"emulated.instructions.classes.{name}") for name in CLASSES}
    per_run = _count(counts.get("per_run"), "emulated.instructions.per_run")
    if abs(sum(classes.values()) - per_run) > len(CLASSES):  # each class is rounded on its own
        raise ValueError("emulated.instructions.classes do not add up to per_run")
    out["instructions"] = {"per_run": per_run, "startup": _count(counts.get("startup"), "emulated.instructions.startup"),
                           "classes": classes}
    if raw.get("inputs") is not None:
        inputs = raw["inputs"]
        if not isinstance(inputs, str) or not inputs or len(inputs) > MAX_TEXT or not inputs.isprintable():
            raise ValueError(f"emulated.inputs must be printable text of 1-{MAX_TEXT} characters")
        out["inputs"] = inputs
    return out


def differences(new: dict, base: dict) -> list[str]:
    """Why two ``emulated`` sections' counts cannot be compared (empty: they can)."""
    found = [f"{key} {new.get(key)!r} vs {base.get(key)!r}" for key in COMPARABLE if new.get(key) != base.get(key)]
    if new.get("inputs") and base.get("inputs") and new["inputs"] != base["inputs"]:
        found.append(f"inputs {new['inputs']!r} vs {base['inputs']!r}")
    return found


def millions(count: int | float) -> str:
    """``6.11 M`` / ``245 k`` / ``980``: an instruction count for a table."""
    if count >= 1e6:
        return f"{count / 1e6:.3g} M" if count < 1e9 else f"{count / 1e9:.3g} G"
    return f"{count / 1e3:.3g} k" if count >= 1e3 else f"{count:.0f}"


def _count(value, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
        raise ValueError(f"{what} must be an integer >= {low} (at most 2**62), got {str(value)[:40]}")
    return value
