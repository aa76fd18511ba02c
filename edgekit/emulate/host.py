"""What this machine offers for aarch64 emulation: root, the tools, and a binfmt_misc handler.

Two ways to start an aarch64 program, best first:

* **binfmt**: the kernel hands aarch64 ELF files to qemu-aarch64-static (binfmt_misc). With the
  F (fix-binary) flag, which Debian's qemu-user-static registers, the interpreter was opened at
  registration time, so it works inside a chroot without a copy there. Programs can start other
  programs (pip, ``python -m venv``), and debootstrap's second stage needs exactly that.
* **interpreter**: without binfmt, qemu-aarch64-static is copied into the rootfs and named as
  the command (``qemu-aarch64-static /usr/bin/python3 ...``). One process only: it cannot build
  a rootfs, but it can run Python, pip installing wheels, and the model in an existing one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgekit.emulate import EmulationError

APT_PACKAGES = ("qemu-user-static", "binfmt-support", "debootstrap")
INSTALL_HINT = "apt-get install " + " ".join(APT_PACKAGES)
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
BINFMT_ENTRY = "qemu-aarch64"
BINFMT_CONF_DIRS = (Path("/usr/lib/binfmt.d"), Path("/etc/binfmt.d"))
QEMU_STATIC = "qemu-aarch64-static"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Tools:
    qemu: Path  # qemu-aarch64-static on the host
    qemu_version: str
    unshare: Path
    debootstrap: Path | None  # None when this run does not build a rootfs


@dataclass(frozen=True)
class Binfmt:
    usable: bool
    interpreter: str | None = None  # as registered
    fix_binary: bool = False  # the F flag: usable inside a chroot without a copy of the interpreter
    reason: str = ""  # why not usable


def require_root() -> None:
    if os.geteuid() != 0:
        raise EmulationError(
            "edgekit verify --emulate needs root (debootstrap, chroot and mounts); run it as root, e.g. with sudo"
        )


def _which(name: str) -> Path:
    found = shutil.which(name)
    if not found:
        raise EmulationError(f"{name} not found on PATH; install the emulation tools with: {INSTALL_HINT}")
    return Path(found)


def find_tools(need_debootstrap: bool) -> Tools:
    """The host tools; a missing one is an error naming the apt-get command that installs it."""
    qemu = _which(QEMU_STATIC)
    unshare = _which("unshare")
    debootstrap = _which("debootstrap") if need_debootstrap else None
    return Tools(qemu=qemu, qemu_version=qemu_version(qemu), unshare=unshare, debootstrap=debootstrap)


def qemu_version(qemu: Path) -> str:
    try:
        out = subprocess.run([str(qemu), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    match = re.search(r"version\s+(\S+)", out)
    return match.group(1) if match else ""


def qemu_cpus(qemu: Path) -> tuple[str, ...]:
    """CPU models this qemu-aarch64 can emulate (``-cpu help``)."""
    try:
        out = subprocess.run([str(qemu), "-cpu", "help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in out.splitlines()[1:] if line.strip())


# What an unknown core is emulated as: ARMv8.0-A, the baseline every 64-bit Pi has. Never QEMU's
# "max": it exposes SME, and XNNPACK's SME (KleidiAI) int8 kernels gave wrong outputs under it.
FALLBACK_CPU = "cortex-a72"
NEVER = ("max", "any")  # "any" is QEMU's alias of max


def checked_cpu(cpu: str) -> str:
    """``cpu`` if QEMU may emulate it for edgekit: a named core, never ``max`` (with or without
    options such as ``max,sme=off``: what it enables grows with each QEMU) and never empty (QEMU's
    default is ``max``). Every launch of an emulated program goes through this."""
    name = (cpu or "").strip().lower()
    if not name or name.split(",")[0] in NEVER:
        which = f"{cpu!r} CPU" if name else "default CPU (no CPU named: QEMU's default is max)"
        raise EmulationError(f"refusing to emulate QEMU's {which}: max exposes SME, and XNNPACK's SME int8 kernels "
                             "give wrong results under it; emulate the board's core (e.g. cortex-a72)")
    return cpu


def qemu_cpu_for(core: str, available: tuple[str, ...]) -> tuple[str, str]:
    """(QEMU_CPU value, note) for a target's core, e.g. "Cortex-A72" -> "cortex-a72".

    Emulating the board's own core matters: runtimes choose kernels from the CPU features
    (HWCAP) they see, e.g. the dot-product instructions an A76 has and an A72 lacks.
    """
    wanted = core.strip().lower().replace(" ", "-")
    if wanted and wanted in available and wanted.split(",")[0] not in NEVER:
        return wanted, ""
    why = f"qemu cannot emulate {core}" if wanted else "the target names no CPU core"
    if FALLBACK_CPU not in available:
        raise EmulationError(f"{why}, nor {FALLBACK_CPU}; install a qemu-user-static that has it")
    return FALLBACK_CPU, f"{why}; emulated {FALLBACK_CPU} (ARMv8.0-A), so kernel choices may differ from the board's"


def _binfmt_entry() -> Binfmt:
    path = BINFMT_DIR / BINFMT_ENTRY
    try:
        text = path.read_text()
    except OSError:
        return Binfmt(False, reason=f"no {BINFMT_ENTRY} handler is registered in {BINFMT_DIR}")
    fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    interpreter = fields.get("interpreter")
    fix_binary = "F" in fields.get("flags:", "")
    if not text.startswith("enabled"):
        return Binfmt(False, interpreter, fix_binary, f"the {BINFMT_ENTRY} binfmt handler is disabled")
    if not fix_binary and not (interpreter and Path(interpreter).is_file()):
        return Binfmt(False, interpreter, fix_binary, f"the {BINFMT_ENTRY} binfmt interpreter {interpreter} is missing")
    return Binfmt(True, interpreter, fix_binary)


def _conf_line() -> str | None:
    for folder in BINFMT_CONF_DIRS:
        path = folder / f"{BINFMT_ENTRY}.conf"
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.startswith(f":{BINFMT_ENTRY}:"):
                    return line.strip()
    return None


def ensure_binfmt(progress: Progress) -> Binfmt:
    """The aarch64 binfmt handler, mounting binfmt_misc and registering qemu's handler if needed.

    Never raises: an unusable handler comes back with its reason (the caller may fall back).
    """
    if not (BINFMT_DIR / "register").exists():
        progress(f"mounting binfmt_misc on {BINFMT_DIR}")
        proc = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            reason = (proc.stderr.strip().splitlines() or ["mount failed"])[-1]
            return Binfmt(False, reason=f"binfmt_misc cannot be mounted here ({reason})")
    state = _binfmt_entry()
    if state.usable:
        return state
    if (BINFMT_DIR / BINFMT_ENTRY).exists():
        progress(f"enabling the {BINFMT_ENTRY} binfmt handler")
        try:
            (BINFMT_DIR / BINFMT_ENTRY).write_text("1")
        except OSError as exc:
            return Binfmt(False, state.interpreter, state.fix_binary, f"{state.reason} and cannot be enabled ({exc.strerror})")
        return _binfmt_entry()
    line = _conf_line()
    if line is None:
        return Binfmt(False, reason=f"{state.reason} and no {BINFMT_ENTRY}.conf to register it from; {INSTALL_HINT}")
    progress(f"registering the {BINFMT_ENTRY} binfmt handler from qemu-user-static's binfmt.d entry")
    try:
        (BINFMT_DIR / "register").write_text(line)
    except OSError as exc:
        return Binfmt(False, reason=f"{state.reason} and registering it failed ({exc.strerror})")
    return _binfmt_entry()
