"""Executed aarch64 instructions per inference of a Python bundle, run by its own runtime (ncnn,
LiteRT, ONNX Runtime's wheel) on a board's core: counted under QEMU with edgekit's plugin.

The bundle runs as ``edgekit verify --emulate`` runs it (the cached Debian arm64 rootfs, a venv of
the bundle's aarch64 requirements, fenced: user 65534, no network), but started by Debian's
dynamic ``qemu-aarch64`` with the counting plugin (placed in the rootfs with the x86-64 libraries
it loads). ``count_marks.py`` (the board package) loads the model with runner.py's ``Benchmark``,
runs it once, and marks ``runs`` timed calls; the plugin counts what ran between the marks
(``icount.parse_log``). The count includes Python's per-call work around the runtime's call.
"""

from __future__ import annotations

import filecmp
import os
import secrets
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from edgekit.emulate import EmulationError, host, rootfs
from edgekit.emulate.icount import (CLASSES, DEFAULT_RUNS, INSIDE, LOG_BYTES, TIMEOUT_S, Progress, _check_settings,
                                    parse_log)
from edgekit.board import entries as board_files
from edgekit.bundle import layout
from edgekit.emulate.count_inputs import INPUTS_NAME, RANDOM, REFERENCE, reference_inputs, write_inputs
from edgekit.core import venv_cache
from edgekit.emulate.bundle import check_wheels
from edgekit.emulate.chroot import NOISE
from edgekit.emulate.host import checked_cpu
from edgekit.emulate.icount_plugin import plugin_library, plugin_qemu
from edgekit.emulate.icount_root import add_host_program
from edgekit.emulate.process import last_error, run_fenced
from edgekit.emulate.sandbox import preexec_limits
from edgekit.emulate.verify import _fence, _venv, _working_launcher

COUNT_DIR = "count"  # the board package and its count_marks.py entry, in the work folder
QEMU_IN_ROOTFS = f"/usr/libexec/edgekit{INSIDE}"  # the dynamic qemu-aarch64 and the plugin, inside the rootfs
ADDR_NO_RANDOMIZE = 0x0040000  # linux/personality.h
NOTE = ("a Python bundle run by its own runtime's Python wheel: each inference's count includes Python's "
        "per-call work (runner.py's bound call and its clock reads), as on the board")


def count_python_bundle(bundle, cpu: str, *, runs: int = DEFAULT_RUNS, progress: Progress | None = None,
                        timeout_s: float = TIMEOUT_S) -> dict:
    """Instructions per inference of a Python bundle (``emulate.bundle.open_bundle``) on ``cpu``."""
    progress = progress or (lambda message: None)
    _check_settings(cpu, 1, runs)
    host.require_root()
    qemu = plugin_qemu()
    version = host.qemu_version(qemu)
    if cpu not in host.qemu_cpus(qemu):
        raise EmulationError(f"{qemu} cannot emulate {cpu}")
    library = plugin_library(version, progress)
    cache = rootfs.default_cache_dir().absolute()
    cached = rootfs.find_rootfs(cache, rootfs.DEFAULT_RELEASE) if cache.is_dir() else None
    tools = host.find_tools(need_debootstrap=cached is None)
    binfmt = host.ensure_binfmt(progress)
    if not binfmt.usable and cached is None:
        raise EmulationError(f"cannot build the arm64 rootfs: {binfmt.reason}; run benchmarks/emulated_verify.sh "
                             "(or edgekit verify --emulate) on a host with binfmt_misc first")
    fs = rootfs.ensure_rootfs(cache, rootfs.DEFAULT_RELEASE, debootstrap=tools.debootstrap if binfmt.usable else None,
                              mirror=rootfs.DEFAULT_MIRROR, rebuild=False, timeout_s=timeout_s, progress=progress)
    check_wheels(bundle, fs.python)
    notes: list[str] = []
    run_in = _working_launcher(fs.path, tools, binfmt, cpu, timeout_s, progress, notes, cores=1)
    try:
        venv = _venv(run_in, bundle, fs.python, timeout_s, progress, notes)
        _place(fs.path, qemu, "qemu-aarch64")
        _place(fs.path, library, library.name)
        work = Path(tempfile.mkdtemp(prefix="edgekit-icount-", dir=run_in.host_path("/tmp")))
        try:
            for path in (bundle.model, *bundle.data_files, bundle.path / "manifest.json"):
                if path is not None and path.is_file():
                    shutil.copyfile(path, work / path.name)
            board_files.install(work / COUNT_DIR, entries=("count_marks.py",))
            inputs = reference_inputs(bundle.path / layout.REFERENCE)
            if inputs is not None:
                write_inputs(inputs, work / INPUTS_NAME)
            inside = "/" + work.relative_to(run_in.rootfs).as_posix()
            # the x86-64 qemu starts the venv's python itself: no binfmt or static interpreter in front
            fenced = replace(_fence(run_in, work), mode="binfmt", interpreter=None)
            progress(f"counting instructions of {bundle.model.name} with its Python runtime on {cpu} under "
                     f"emulation ({runs} timed runs)")
            counts, doc = _counted_run(fenced, venv.python, inside, bundle, cpu, library.name, runs, timeout_s,
                                       INPUTS_NAME if inputs is not None else None)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        venv_cache.release_all()
    if counts["windows"] != 1 or counts["bad_marks"]:
        raise EmulationError(f"count_marks.py did not mark its timed runs once ({counts['windows']} marked, "
                             f"{counts['bad_marks']} out of order)")
    window = counts["window"]
    return {
        "cpu": cpu, "per_run": round(window["total"] / runs), "startup": counts["before"],
        "classes": {name: round(window[name] / runs) for name in CLASSES},
        "runs": runs, "threads": 1, "qemu": version, "plugin": library.parent.name, "libc": str(fs.path),
        "counted": {"before": counts["before"], "window": window["total"], "total": counts["total"]},
        "bench": doc, "notes": [*notes, NOTE], "inputs": REFERENCE if inputs is not None else RANDOM,
        "runner": f"count_marks.py (runner.py's bench) in the venv {venv.key} of the cached rootfs",
    }


def _counted_run(launcher, python: str, inside: str, bundle, cpu: str, plugin: str, runs: int,
                 timeout_s: float, inputs: str | None) -> tuple[dict, dict]:
    import json

    tag = secrets.token_hex(8)  # the bundle cannot know it, so it cannot forge the plugin's line
    log = f"{inside}/icount-{tag}.log"
    argv = [f"{QEMU_IN_ROOTFS}/qemu-aarch64", "-cpu", checked_cpu(cpu), "-L", "/",
            "-plugin", f"{QEMU_IN_ROOTFS}/{plugin},tag={tag}", "-d", "plugin", "-D", log,
            python, "-s", f"{inside}/{COUNT_DIR}/count_marks.py", f"{inside}/{bundle.model.name}",
            "--format", bundle.format, "--threads", "1", "--warmup", "0", "--min-runs", str(runs),
            "--max-runs", str(runs), "--min-time", "0", "--emulated", "--mode", "emulated", "--target", bundle.target]
    if bundle.engine:
        argv += ["--engine", bundle.engine]
    if inputs:
        argv += ["--input", f"{inside}/{inputs}"]
    done = run_fenced(launcher.argv(argv, cwd=inside), what="count_marks.py under emulation with the counting plugin",
                      timeout_s=timeout_s, env=launcher.env({"PYTHONHASHSEED": "0"}), preexec=_fixed_layout)
    if done.returncode != 0:
        raise EmulationError("the model failed under emulation: "
                             f"{last_error(done.tail, NOISE) or f'exit {done.returncode}'}")
    try:
        doc = json.loads(done.stdout)
        timed = doc["results"][0]["timing"]["runs"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise EmulationError("count_marks.py printed no bench result under emulation") from None
    if timed != runs:
        raise EmulationError(f"count_marks.py timed {timed} runs where {runs} were asked for")
    path = launcher.host_path(log)
    if not path.is_file() or path.is_symlink() or path.stat().st_size > LOG_BYTES:
        raise EmulationError("the counting plugin left no readable result")
    return parse_log(path.read_text(encoding="utf-8", errors="replace"), tag), doc


def _fixed_layout() -> None:  # runs in the child, before unshare execs
    """The sandbox's limits, and no address randomisation (inherited through exec by QEMU, so the guest's
    addresses, and with them the allocators' and runtimes' paths, repeat from one count to the next)."""
    import ctypes


    preexec_limits()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.personality(ADDR_NO_RANDOMIZE) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) failed")


def _place(rootfs: Path, program: Path, name: str) -> None:
    """``program`` (with its x86-64 libraries) at QEMU_IN_ROOTFS/name in the cached rootfs, replaced whole
    when it differs (a copy another count is running is never written over)."""
    dest = rootfs / QEMU_IN_ROOTFS.lstrip("/") / name
    if dest.is_file() and filecmp.cmp(program, dest, shallow=False):
        return
    staged = f"{QEMU_IN_ROOTFS}/.{name}.{os.getpid()}.tmp"
    add_host_program(rootfs, program, staged)
    os.replace(rootfs / staged.lstrip("/"), dest)
