"""Run a bundle's own programs fenced off from this machine.

A bundle is something people download, share and receive in pull requests; its ``edgekit-run``
and ``run.sh`` are whatever the bundle's author put there (a recomputed ``SHA256SUMS`` proves
nothing). Whenever edgekit runs them on this host (``verify --emulate``, a local ``bench`` of a
native bundle), it does so here:

- a throw-away root (a fresh temporary folder, removed afterwards) holding a copy of the bundle,
  the libraries its programs name (resolved from the arm64 userland, or this host's, by the ELF's
  ``DT_NEEDED``; plain library names only), the QEMU binary when emulating, and an empty ``/work``
  that is the only place the program may write; no host file is reachable from it;
- new mount, PID, IPC, UTS and network namespaces (only a loopback that is down: no network), a
  fresh ``/proc``, no ``/sys`` (``unshare``), as the unprivileged user 65534 (as root), or as a
  user namespace's mapped root (not root: still no host files and no network);
- resource limits (files it may write, open files, processes, no core files) and the caller's
  deadline, after which its whole process group is killed (``emulate.process``).

Where none of this can be set up (not root and no user namespaces), ``SandboxUnavailable`` says so
in one line: a bundle's code is never run outside it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

from edgekit.emulate import EmulationError
from edgekit.emulate.board_root import USERLANDS, make_board_root
from edgekit.emulate.chroot import write_cpu_list

NOBODY = 65534
WORK = "/work"
BUNDLE = "/bundle"
QEMU = "/qemu"
MAX_OUTPUT_BYTES = 1 << 30  # what a program may write in /work, per file
LIMITS = {
    resource.RLIMIT_FSIZE: MAX_OUTPUT_BYTES,
    resource.RLIMIT_NOFILE: 1024,
    resource.RLIMIT_CORE: 0,
}
MAX_PROCESSES = 512  # per user inside: the runner's thread pool, QEMU's threads
ENV = {"PATH": "/usr/bin:/bin", "HOME": WORK, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": WORK}


class SandboxUnavailable(EmulationError):
    """No sandbox can be made here, so the bundle's programs are not run."""


@functools.lru_cache(maxsize=1)
def _unshare() -> str:
    found = shutil.which("unshare")
    if found is None:
        raise SandboxUnavailable("util-linux's unshare is not on PATH, so a bundle's programs cannot be fenced off; "
                                 "install util-linux")
    return found


def _isolation() -> list[str]:
    """The namespace flags: as root, a fresh user id (set by the inner unshare); otherwise a user namespace."""
    common = ["--mount", "--propagation", "private", "--net", "--pid", "--fork", "--ipc", "--uts",
              "--kill-child"]  # killing unshare (a deadline) kills the namespace's init, and so everything in it
    return common if os.geteuid() == 0 else ["--user", "--map-root-user", *common]


def _drop() -> list[str]:
    return ["--setuid", str(NOBODY), "--setgid", str(NOBODY)] if os.geteuid() == 0 else []


@functools.lru_cache(maxsize=1)
def check_available() -> None:
    """SandboxUnavailable when namespaces cannot be made here (checked once, with /bin/true)."""
    argv = [_unshare(), *_isolation(), "--", _unshare(), "--fork", *_drop(), "--", "true"]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"cannot start unshare to fence off the bundle's programs: {exc}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["unknown reason"])[-1][:200]
        raise SandboxUnavailable(f"a bundle's programs run only in a sandbox, and none can be made here ({why}): "
                                 "run edgekit as root, or allow unprivileged user namespaces")


def preexec_limits() -> None:  # runs in the child, before unshare execs
    for which, value in LIMITS.items():
        resource.setrlimit(which, (value, value))
    if os.geteuid() == 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES, MAX_PROCESSES))


class Sandbox:
    """A prepared throw-away root; ``argv`` wraps a command to run inside it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def argv(self, command: Sequence[str], cwd: str = WORK) -> list[str]:
        # Two unshares: the outer makes the namespaces and its child, the PID namespace's init, is the
        # inner one, still root and so still bound to die with the outer (a change of user id would
        # clear --kill-child's parent-death signal); the inner forks the command into the root as 65534.
        return [_unshare(), *_isolation(), f"--mount-proc={self.root / 'proc'}", "--", _unshare(), "--fork",
                f"--root={self.root}", f"--wd={cwd}", *_drop(), "--", *map(str, command)]

    @property
    def env(self) -> dict[str, str]:
        return dict(ENV)

    preexec = staticmethod(preexec_limits)

    def standalone(self, command: Sequence[str], env: dict[str, str] | None = None, cwd: str = WORK) -> list[str]:
        """``argv`` for callers that start it themselves: the clean environment and the limits are part
        of the command line (``env -i``, ``prlimit``), not of how it is started."""
        limits = [f"--fsize={MAX_OUTPUT_BYTES}", "--nofile=1024", "--core=0"]
        if os.geteuid() == 0:
            limits.append(f"--nproc={MAX_PROCESSES}")
        tools = [shutil.which(name) for name in ("env", "prlimit")]
        if None in tools:
            raise SandboxUnavailable("env and prlimit (coreutils, util-linux) are needed to fence off a bundle's programs")
        variables = [f"{key}={value}" for key, value in {**ENV, **(env or {})}.items()]
        return [tools[0], "-i", *variables, tools[1], *limits, "--", *self.argv(command, cwd)]

    def output(self, inside: str, limit: int = MAX_OUTPUT_BYTES) -> Path:
        """A file the program wrote under /work, as a host path: a regular file, no link, within ``limit``."""
        path = self.root / inside.lstrip("/")
        work = (self.root / WORK.lstrip("/")).resolve()
        if not path.parent.resolve() == work and not path.parent.resolve().is_relative_to(work):
            raise EmulationError(f"{inside} is not an output of the sandboxed program")
        try:
            st = path.lstat()
        except FileNotFoundError:
            raise EmulationError(f"the bundle's program wrote no {Path(inside).name}") from None
        import stat

        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise EmulationError(f"the bundle's program left {Path(inside).name} as something other than a plain file")
        if st.st_size > limit:
            raise EmulationError(f"the bundle's program wrote {st.st_size:,} bytes to {Path(inside).name} "
                                 f"(at most {limit:,})")
        return path


def copy_bundle(bundle: Path, dest: Path) -> None:
    """The bundle's regular files and folders only (a link could name any host file)."""
    for folder, dirs, files in os.walk(bundle, followlinks=False):
        rel = Path(folder).relative_to(bundle)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]
        for name in files:
            source = Path(folder) / name
            if source.is_symlink() or not source.is_file():
                continue
            shutil.copyfile(source, dest / rel / name)
            os.chmod(dest / rel / name, 0o755 if os.access(source, os.X_OK) else 0o644)


@contextlib.contextmanager
def bundle_sandbox(bundle: Path, programs: Sequence[str], *, arch: str, libraries_from: Path,
                   qemu: Path | None = None, tools: tuple[str, ...] = ()) -> Iterator[Sandbox]:
    """A sandbox holding a copy of ``bundle`` at /bundle, the libraries its ``programs`` (paths
    relative to the bundle) need from ``libraries_from`` (an ``arch`` root: the arm64 userland, or
    ``/`` for this host's own), ``tools`` (programs of that root, e.g. ``sh`` for ``run.sh``) and,
    when emulating, ``qemu`` at /qemu."""
    check_available()
    if arch not in USERLANDS:
        raise EmulationError(f"no sandbox userland for {arch} programs")
    with tempfile.TemporaryDirectory(prefix="edgekit-sandbox-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        os.chmod(tmp, 0o755)
        inside = root / BUNDLE.lstrip("/")
        copy_bundle(bundle, inside)
        own_libs = inside / "lib"
        make_board_root(libraries_from, root, [inside / p for p in programs], own_libs=own_libs, tools=tools,
                        userland=USERLANDS[arch])
        write_cpu_list(root, os.cpu_count() or 1)  # cpuinfo (XNNPACK's start-up) needs a CPU list, not all of /sys
        if qemu is not None:
            shutil.copyfile(qemu, root / QEMU.lstrip("/"))
            os.chmod(root / QEMU.lstrip("/"), 0o755)
        work = root / WORK.lstrip("/")
        work.mkdir()
        os.chmod(root / "tmp", 0o1777)
        if os.geteuid() == 0:
            os.chown(work, NOBODY, NOBODY)
        os.chmod(work, 0o700)
        try:
            yield Sandbox(root)
        finally:
            _make_removable(root)


def _make_removable(root: Path) -> None:
    """Folders the program made under /work may lack write bits for their owner's parent: restore them."""
    work = root / WORK.lstrip("/")
    for folder, dirs, _ in os.walk(work, followlinks=False):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(Path(folder) / name, 0o700, follow_symlinks=False)
