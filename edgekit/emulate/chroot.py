"""Start a command inside the rootfs: its own mount namespace, a fresh /proc, no /sys.

``unshare --mount --propagation private --mount-proc=/proc --root=ROOTFS`` gives the command a
private mount namespace with /proc mounted inside the rootfs; the mount disappears with the
process, so a killed run never leaves mounts behind. /sys is deliberately not mounted
(onnxruntime's cpuinfo segfaulted under QEMU with it; without it, cpuinfo only warns). /dev
holds the static nodes debootstrap created.

Instead the rootfs's empty /sys gets plain files naming the target's CPUs
(``/sys/devices/system/cpu/{possible,present,online}``): with no CPU list at all, cpuinfo finds
no valid processor and PyTorch's QNNPACK (the int8 engine on ARM) refuses to start ("failed to
initialize QNNPACK"); with it, cpuinfo reads the CPU features from the emulated auxv.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from edgekit.emulate.host import QEMU_STATIC, Binfmt, Tools, checked_cpu

INTERPRETER_IN_ROOTFS = f"/usr/libexec/edgekit/{QEMU_STATIC}"
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
# Lines the runtimes print under QEMU without /sys; expected, never the reason for a failure.
NOISE = ("Error in cpuinfo", "cpuinfo_initialize failed", "cpuid_info warning", "cpuinfo warning")


@dataclass(frozen=True)
class Launcher:
    rootfs: Path
    unshare: Path
    mode: str  # "binfmt" | "interpreter"
    qemu_cpu: str
    interpreter: str | None = None  # inside the rootfs; commands are prefixed with it in "interpreter" mode
    fenced: bool = False  # a bundle's own programs: no network, own PID/IPC/UTS namespaces, user 65534
    host_network: bool = False  # fenced but on this host's network (a server the host must reach)

    def __post_init__(self) -> None:
        checked_cpu(self.qemu_cpu)

    def argv(self, command: Sequence[str], cwd: str = "/") -> list[str]:
        prefix = [self.interpreter] if self.mode == "interpreter" else []
        # on the host's network the program is the command itself (no PID namespace's init between it
        # and the signals a server check sends)
        scope = ["--ipc", "--uts"] if self.host_network else ["--net", "--pid", "--fork", "--ipc", "--uts"]
        fence = [*scope, "--setuid", "65534", "--setgid", "65534"] if self.fenced else []
        return [
            str(self.unshare), "--mount", "--propagation", "private", "--mount-proc=/proc", *fence,
            f"--root={self.rootfs}", f"--wd={cwd}", "--", *prefix, *map(str, command),
        ]

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A clean environment: nothing of the host's leaks in except what is passed on purpose."""
        return {**BASE_ENV, "QEMU_CPU": self.qemu_cpu, **(extra or {})}

    def host_path(self, inside: str) -> Path:
        """Where a path inside the rootfs lies on the host."""
        return self.rootfs / inside.lstrip("/")


def make_launcher(rootfs: Path, tools: Tools, binfmt: Binfmt, qemu_cpu: str, cores: int = 4,
                  fenced: bool = False) -> Launcher:
    """A launcher for ``rootfs``: binfmt when the kernel handles aarch64, else the explicit interpreter.

    Either way the interpreter the command needs is placed in the rootfs when the kernel would
    look for it there (binfmt without the F flag resolves its interpreter inside the chroot).
    """
    checked_cpu(qemu_cpu)  # before anything is written into the rootfs
    write_cpu_list(rootfs, cores)
    if binfmt.usable:
        if not binfmt.fix_binary and binfmt.interpreter:
            _install(Path(binfmt.interpreter), rootfs / binfmt.interpreter.lstrip("/"))
        return Launcher(rootfs, tools.unshare, "binfmt", qemu_cpu, fenced=fenced)
    _install(tools.qemu, rootfs / INTERPRETER_IN_ROOTFS.lstrip("/"))
    return Launcher(rootfs, tools.unshare, "interpreter", qemu_cpu, INTERPRETER_IN_ROOTFS, fenced=fenced)


def write_cpu_list(rootfs: Path, cores: int) -> None:
    """The CPU list files cpuinfo reads, in the rootfs's (unmounted) /sys: CPUs 0..cores-1."""
    folder = rootfs / "sys" / "devices" / "system" / "cpu"
    if os.path.ismount(rootfs / "sys"):
        return
    folder.mkdir(parents=True, exist_ok=True)
    text = f"0-{max(1, cores) - 1}\n" if cores > 1 else "0\n"
    for name in ("possible", "present", "online"):
        path = folder / name
        if path.is_file() and not path.is_symlink() and path.read_text() == text:
            continue
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def _install(source: Path, dest: Path) -> None:
    if dest.is_file() and dest.stat().st_size == source.stat().st_size and dest.stat().st_mtime >= source.stat().st_mtime:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.copy2(source, tmp)
    os.replace(tmp, dest)
