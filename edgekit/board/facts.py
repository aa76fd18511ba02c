"""Memory and host facts (missing facts are None, never an error)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

MIB = 1024 * 1024

# ISA flags that change which kernels the runtimes pick (ARM, then x86), in /proc/cpuinfo spelling.
ISA_FLAGS = (
    "neon", "asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "sve2",
    "avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
)


def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_mb() -> float | None:
    """Resident memory of this process now (MiB): psutil when importable, else /proc/self/status."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / MIB
    except ImportError:
        kb = _proc_status_kb("VmRSS")
        return None if kb is None else kb / 1024


def peak_rss_mb() -> float | None:
    """Peak resident memory of this process (MiB).

    psutil cannot help: it exposes no peak on Linux (``peak_wset`` is Windows-only). On Linux we
    read VmHWM, the high-water mark of this process's own address space, rather than
    ``getrusage().ru_maxrss``: at exec the kernel folds the parent's high-water mark into the
    child's ru_maxrss (fs/exec.c, setmax_mm_hiwater_rss), so a runner spawned by a 1 GB parent
    would report >= 1 GB. Elsewhere ru_maxrss is the fallback (kB on Linux, bytes on macOS).
    """
    kb = _proc_status_kb("VmHWM")
    if kb is not None:
        return kb / 1024
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024


def usable_cores() -> int:
    """Logical cores this process may run on (its CPU affinity where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0)) or (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read().replace("\x00", "").strip()
        return text or None
    except OSError:
        return None


def _cpuinfo() -> dict[str, str]:
    """First value of each key in /proc/cpuinfo (empty where there is none)."""
    info: dict[str, str] = {}
    for line in (read_text("/proc/cpuinfo") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in info:
            info[key.strip()] = value.strip()
    return info


def dist_version(name: str) -> str | None:
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:  # noqa: BLE001 - PackageNotFoundError, or a broken install: a missing fact
        return None


# Bits of `vcgencmd get_throttled` (Raspberry Pi firmware documentation).
_THROTTLE_BITS = {
    0: "under-voltage", 1: "arm-frequency-capped", 2: "throttled", 3: "soft-temperature-limit",
    16: "under-voltage-occurred", 17: "arm-frequency-capping-occurred",
    18: "throttling-occurred", 19: "soft-temperature-limit-occurred",
}


def _pi_throttled() -> dict | None:
    binary = shutil.which("vcgencmd")
    if binary is None:
        return None
    try:
        out = subprocess.run(
            [binary, "get_throttled"], capture_output=True, text=True, timeout=3, check=False
        ).stdout.strip()
        raw = out.partition("=")[2].strip()
        value = int(raw, 16)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return {"raw": raw, "flags": [name for bit, name in _THROTTLE_BITS.items() if value >> bit & 1]}


def _number(text: str | None, scale: float) -> float | None:
    try:
        return None if text is None else int(text) / scale
    except ValueError:
        return None


def host_facts(emulated: bool = False) -> dict:
    """What shapes a timing on this machine. No hostname (privacy); unknown facts are None.

    Under user-mode emulation /proc and /sys describe the emulating host, not the emulated CPU,
    so those facts are left out (None) rather than reported wrongly.
    """
    info = {} if emulated else _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    board = None if emulated else read_text("/proc/device-tree/model") or info.get("Model")
    return {
        "machine": platform.machine() or None,
        "cpu_model": info.get("model name") or info.get("Model") or info.get("Hardware")
        or (None if emulated else platform.processor() or None),
        "board": board,
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "isa": [flag for flag in ISA_FLAGS if flag in flags],
        "os": platform.platform(),
        "python": platform.python_version(),
        "runtimes": {name: dist_version(name) for name in ("numpy", "onnxruntime", "torch", "executorch")},
        "cpufreq_governor": None if emulated else read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "cpu_max_mhz": None if emulated else _number(read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"), 1000),
        "soc_temp_c": None if emulated else _number(read_text("/sys/class/thermal/thermal_zone0/temp"), 1000),
        "throttled": None if emulated else _pi_throttled(),
        "emulated": bool(emulated),
    }


def available_mb() -> float | None:
    """Memory available to new allocations now (MiB): /proc/meminfo, else psutil, else None."""
    for line in (read_text("/proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            return _number(line.split()[1], 1024)
    try:
        import psutil

        return psutil.virtual_memory().available / MIB
    except ImportError:
        return None
