"""The instruction-counting QEMU plugin: edgekit's own C source (``plugin/insn_count.c``), compiled
on first use against QEMU's plugin header and kept in the ``native`` cache part.

Debian's qemu 7.2 ships no ``qemu-plugin.h`` in a binary package; ``plugin/fetch_header.sh`` (run
by ``.ci/setup``, as root) takes it from Debian's qemu source package with a private apt
configuration and installs it as /usr/local/include/qemu-plugin.h. One build per (source, header,
compiler, qemu version): the key names the cache entry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from edgekit.emulate import EmulationError
from edgekit.core.cache import entry_dir

SOURCE = Path(__file__).resolve().parent / "plugin" / "insn_count.c"
FETCH_SCRIPT = Path(__file__).resolve().parent / "plugin" / "fetch_header.sh"
HEADER_NAME = "qemu-plugin.h"
HEADER_ENV = "EDGEKIT_QEMU_PLUGIN_HEADER"
HEADER_DIRS = (Path("/usr/local/include"), Path("/usr/include"), Path("/usr/include/qemu"))
LIBRARY = "libinsn_count.so"
QEMU_PLUGIN_HOST = "qemu-aarch64"  # Debian's dynamic qemu-user: the static build cannot load plugins
INSTALL_HINT = "apt-get install qemu-user"
COMPILE_TIMEOUT_S = 120.0


def plugin_qemu() -> Path:
    """The dynamic qemu-aarch64 (package qemu-user), which loads plugins."""
    found = shutil.which(QEMU_PLUGIN_HOST)
    if found is None:
        raise EmulationError(f"counting instructions needs {QEMU_PLUGIN_HOST} from Debian's qemu-user (the static "
                             f"qemu cannot load plugins); install it: {INSTALL_HINT}")
    return Path(found)


def find_header() -> Path:
    """QEMU's plugin API header: $EDGEKIT_QEMU_PLUGIN_HEADER, else the system include folders."""
    if env := os.environ.get(HEADER_ENV):
        path = Path(env)
        if not path.is_file():
            raise EmulationError(f"{HEADER_ENV}={env} is not a file")
        return path
    for folder in HEADER_DIRS:
        if (folder / HEADER_NAME).is_file():
            return folder / HEADER_NAME
    raise EmulationError(f"QEMU's plugin header {HEADER_NAME} is not installed; as root, run: bash {FETCH_SCRIPT} "
                         f"(it takes it from Debian's qemu source package), or set {HEADER_ENV}")


def plugin_library(qemu_version: str, progress=None) -> Path:
    """The compiled plugin for this qemu, built once and cached."""
    header = find_header()
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise EmulationError("building the instruction-counting plugin needs a C compiler; install it: apt-get install gcc")
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), header.read_bytes(), qemu_version.encode(), Path(compiler).name.encode()):
        digest.update(hashlib.sha256(part).digest())
    key = digest.hexdigest()[:16]
    entry = entry_dir("native", f"qemu-plugin-{key}")
    library = entry / LIBRARY
    if library.is_file():
        return library
    if progress is not None:
        progress(f"compiling edgekit's instruction-counting QEMU plugin ({SOURCE.name})")
    with tempfile.TemporaryDirectory(prefix=".build.", dir=entry) as tmp:
        staged = Path(tmp) / LIBRARY
        argv = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-pthread", "-I", str(header.parent), "-o", str(staged),
                str(SOURCE)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmulationError(f"compiling the instruction-counting plugin failed: {exc}") from None
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["no message"])[-1][:300]
            raise EmulationError(f"compiling the instruction-counting plugin failed: {why}")
        os.replace(staged, library)
    return library
