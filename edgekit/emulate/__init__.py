"""Prove a device bundle on a real aarch64 Debian userland under QEMU user-mode emulation.

    host.py     this machine: root, qemu-user-static, debootstrap, binfmt_misc
    process.py  running a command with a deadline, its output streamed line by line
    rootfs.py   the cached arm64 Debian rootfs (built once with debootstrap, atomically)
    chroot.py   starting a command inside the rootfs (private mount namespace, no /sys)
    venv.py     a venv inside the rootfs with a bundle's requirements, cached by their hash
    bundle.py   reading a bundle: checksums, model file, wheels' platform
    probe.py    STANDALONE script run on both sides: a model on reference.npz's inputs
    report.py   the tolerance, the per-batch verdict and the JSON-able report
    verify.py   the whole check: verify_emulated(bundle) -> EmulationReport

Nothing here prints: progress goes to a callback, results come back as data.
"""

from __future__ import annotations

from edgekit.core.errors import EdgekitError


class EmulationError(EdgekitError):
    """This host cannot emulate the board: not root, a tool missing, no binfmt, a failed build."""
