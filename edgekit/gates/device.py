"""Where a latency was measured, and which latency budgets hold a result to account.

A device target's p50/p99 budgets (``[budgets]`` of ``targets/rpi4.toml``) describe the board: a
timing taken on an x86 CI runner is neither the Pi's latency nor stable under load, so holding it
to the Pi's 20 ms passes or fails by chance. The rules, in one place:

* size, memory, accuracy and error-rate budgets apply to every result, wherever it ran;
* a **target's** latency budget applies to a result measured on that device: ``mode`` "remote"
  (``edgekit bench --host``) on a machine of the target's arch, or a local run whose host facts
  match the target's arch (and its CPU core, where the facts name one); elsewhere the check is
  skipped with the reason, unless the caller opts in (``local_latency``, ``--local-latency``);
* latency budgets the user wrote (flags, the project file) apply where the user asked;
* an emulated run (``mode`` "emulated", QEMU) never measures latency: every latency check of it
  is skipped, whoever set the budget, and so is a regression check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.records.result import BenchResult
    from edgekit.core.targets import Target

LATENCY_METRICS = ("p50", "p99", "ttft", "decode_tps")  # timings: held only where measured on the board
EMULATED_REASON = "measured under emulation (QEMU): its timings are not the board's latency"
LOCAL_LATENCY_FLAG = "--local-latency"
_CORE = re.compile(r"cortex-[a-z]\d+", re.I)


@dataclass(frozen=True)
class Device:
    """The board a target's budgets describe: its name, arch (``aarch64``) and CPU core (``Cortex-A72``)."""

    name: str
    arch: str
    core: str = ""

    @classmethod
    def of(cls, target: "Target") -> "Device":
        return cls(target.name, target.arch, target.core)

    @property
    def generic(self) -> bool:
        """A target that names no particular core (``x86-64``: "generic x86-64"): any core of its arch is it."""
        return not self.core or "generic" in self.core.lower()


def is_emulated(result: "BenchResult") -> bool:
    host = result.host if isinstance(result.host, Mapping) else {}
    return result.mode == "emulated" or host.get("emulated") is True


def measured_on(result: "BenchResult") -> str:
    """``x86_64`` / ``aarch64 (Raspberry Pi 4 Model B)``: the machine a result's host facts name."""
    host = result.host if isinstance(result.host, Mapping) else {}
    machine = _text(host.get("machine")) or "an unknown machine"
    where = _text(host.get("board")) or _text(host.get("cpu_model"))
    return f"{machine} ({where})" if where and machine != "an unknown machine" else machine


def on_device(result: "BenchResult", device: Device) -> bool:
    """Whether ``result`` was measured on ``device``, as far as its host facts tell: the machine is
    the target's arch (a remote run that names none counts: it ran on the board it was sent to), and
    a CPU core the facts name (``Cortex-A53``) is the target's."""
    host = result.host if isinstance(result.host, Mapping) else {}
    machine = _text(host.get("machine"))
    if machine is None:
        return result.mode == "remote"
    if machine != device.arch:
        return False
    if device.generic:
        return True
    named = {match.lower() for field in ("cpu_model", "board") for match in _CORE.findall(_text(host.get(field)) or "")}
    return not named or device.core.lower() in named


def latency_skip(result: "BenchResult", metric: str, origin: str, device: Device | None,
                 local_latency: bool = False) -> str | None:
    """Why a latency check of ``result`` is skipped (None: it applies); see the module doc.

    ``origin`` is the budget's (target | file | flag), ``device`` the board of a target budget."""
    if metric not in LATENCY_METRICS:
        return None
    if is_emulated(result):
        return EMULATED_REASON
    if origin != "target" or device is None or local_latency:
        return None
    if on_device(result, device):
        return None
    board = ", ".join(part for part in (device.arch, "" if device.generic else device.core) if part)
    return (f"measured on {measured_on(result)}, not on {device.name} ({board}): a target's latency budgets apply to "
            f"runs on the board (edgekit bench BUNDLE --host ...); pass {LOCAL_LATENCY_FLAG} to apply them anyway")


def short_reason(reason: str, device: Device | None) -> str:
    """The few words a table's status column shows for a skipped latency check."""
    if reason == EMULATED_REASON:
        return "emulated: not latency"
    return f"not measured on {device.name}" if device is not None else "not measured on the board"


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None
