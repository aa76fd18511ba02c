"""The C++ compiler for a target architecture: the host's own, or Debian's cross compiler."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import EdgekitError, UsageError

# arch -> (cross compiler, the Debian package that installs it, the cross toolchain's libc for qemu -L)
CROSS = {
    "aarch64": ("aarch64-linux-gnu-g++", "crossbuild-essential-arm64", "/usr/aarch64-linux-gnu"),
    "x86_64": ("x86_64-linux-gnu-g++", "crossbuild-essential-amd64", "/usr/x86_64-linux-gnu"),
}
NATIVE = ("g++", "c++")
NATIVE_PACKAGE = "g++"
CPU_NAME = re.compile(r"^[a-z0-9][a-z0-9.+_-]{0,39}\Z")


@dataclass(frozen=True)
class Toolchain:
    arch: str
    cxx: str  # the compiler's path
    version: str  # its --version first line (part of the build's cache key)
    cross: bool
    sysroot: str | None = None  # the target's libc folder, for qemu-aarch64 -L

    def cpu_flags(self, cpu: str | None) -> list[str]:
        """Tuning for the target's core: ``-mcpu`` on ARM, ``-march`` on x86-64; none when not named."""
        if not cpu:
            return []
        if not CPU_NAME.match(cpu):
            raise UsageError(f"CPU name {cpu!r} is not a compiler CPU name (e.g. cortex-a72)")
        return [f"-mcpu={cpu}" if self.arch == "aarch64" else f"-march={cpu}"]


def host_arch() -> str:
    return platform.machine()


def find_toolchain(arch: str) -> Toolchain:
    """The compiler that builds for ``arch`` here; a one-line error naming the package that installs it."""
    if arch not in CROSS:
        raise UsageError(f"the native runtime builds for {', '.join(CROSS)}; not for {arch!r} "
                         "(a 32-bit OS has no aarch64 build: install a 64-bit OS on the board)")
    if arch == host_arch():
        found = next((shutil.which(name) for name in NATIVE if shutil.which(name)), None)
        if found is None:
            raise EdgekitError(f"no C++ compiler found (g++); install it: apt-get install {NATIVE_PACKAGE}")
        return Toolchain(arch, found, _version(found), cross=False)
    name, package, sysroot = CROSS[arch]
    found = shutil.which(name)
    if found is None:
        raise EdgekitError(f"no cross compiler for {arch} ({name}); install it: apt-get install {package}")
    return Toolchain(arch, found, _version(found), cross=True, sysroot=sysroot if Path(sysroot).is_dir() else None)


def _version(cxx: str) -> str:
    try:
        done = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EdgekitError(f"cannot run the compiler {cxx}: {exc}") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise EdgekitError(f"the compiler {cxx} does not run (exit status {done.returncode})")
    return lines[0].strip()
