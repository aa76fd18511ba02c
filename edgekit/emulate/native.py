"""``verify --emulate`` for a native bundle: ``edgekit-run`` under QEMU, with no Python in the loop.

1. the bundle's runner, on the reference inputs, under ``qemu-aarch64 -cpu <the target's core>``
   (pinned: QEMU's ``max`` CPU exposes SME, whose int8 kernels gave wrong outputs), its libraries
   resolved in an arm64 userland (edgekit's cached Debian rootfs, else the cross toolchain's);
2. the same inputs on this host through the board package's ExecuTorch runtime: the verdict
   compares the two per batch, as for any bundle;
3. as root, with binfmt_misc and the cached rootfs: the bundle's own ``run.sh check`` inside a
   root that holds a shell and the C/C++ libraries but no Python (``board_root``);
4. the runner's own bench under emulation: a functional check, not the device's latency.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from edgekit.emulate import EmulationError, host, rootfs
from edgekit.emulate.report import (
    BENCH_NOTE,
    BENCH_STATUS,
    EmulationReport,
    Tolerance,
    bundle_fields,
    check_batches,
)
from edgekit.core.errors import EdgekitError
from edgekit.records.result import from_document
from edgekit.board import entries as board_files
from edgekit.board.check import read_output
from edgekit.board.inputs import output_of_key
from edgekit.bundle import native
from edgekit.emulate.board_root import make_board_root
from edgekit.emulate.bundle_check import own_check, own_limits
from edgekit.emulate.chroot import make_launcher
from edgekit.emulate.host import NEVER, checked_cpu
from edgekit.emulate.process import last_error, run_captured, run_fenced
from edgekit.emulate.sandbox import BUNDLE, QEMU, bundle_sandbox, copy_bundle, check_available, preexec_limits
from edgekit.native.toolchain import CROSS

BENCH_RUNS = 10
Progress = Callable[[str], None]


def verify_native(bundle, *, cache_dir: Path, release: str, timeout_s: float, atol: float, bench: bool,
                  progress: Progress, notes: list[str]) -> EmulationReport:
    started = time.monotonic()
    seconds: dict[str, float] = {}
    runner, qemu, cpu, cached, sysroot, prefix, env = emulated_runner(bundle, cache_dir, release)

    with tempfile.TemporaryDirectory(prefix="edgekit-verify-native-") as here, \
            fenced_runner(bundle, qemu, cpu, sysroot) as fenced:
        here = Path(here)
        progress(f"running {bundle.model.name} with {native.RUNNER} under emulation ({cpu}, libraries from {sysroot}; "
                 "sandboxed: no host files, no network)")
        done = fenced.run(["probe", fenced.inside(bundle.model), fenced.inside(bundle.reference), "/work/emulated.npz",
                           "--threads", "1"], what=f"{native.RUNNER} under emulation", timeout_s=timeout_s)
        seconds["emulated_run"] = done.seconds
        if done.returncode != 0:
            raise EdgekitError(f"running {bundle.model.name} under emulation failed: {_last(done)}")
        emu_info = _json_line(done.stdout, f"{native.RUNNER} probe under emulation")
        emulated = _load(fenced.sandbox.output("/work/emulated.npz"))

        progress(f"running {bundle.model.name} on the reference inputs on this host")
        hosted, host_info, seconds["host_run"] = _host_probe(bundle, here, timeout_s)

        entry = _entry_point(bundle, cached, cpu, timeout_s, progress, notes) if cached is not None else None
        if cached is None:
            notes.append(f"no cached Debian rootfs in {cache_dir}: run.sh was not run in a Python-free root "
                         "(benchmarks/emulated_verify.sh builds one)")
        bench_report = None
        if bench:
            progress(f"running {native.RUNNER} bench under emulation (a functional check; not device latency)")
            bench_report, seconds["bench"] = _bench(fenced, bundle, cpu, timeout_s)


    reference = {key: value for key, value in _load(bundle.reference).items() if output_of_key(key) is not None}
    tolerance = Tolerance.for_precision(bundle.precision, atol)
    batches = check_batches(emulated, hosted, reference, tolerance, notes)

    bundle_check = own_check(emulated, bundle.reference, own_limits(bundle), f"sh {native.RUN_SCRIPT} check")
    exact = all(b.emulated_vs_host.get("max_abs") == 0.0 for b in batches)
    seconds["total"] = time.monotonic() - started
    return EmulationReport(
        **bundle_fields(bundle),
        emulation={
            "launcher": "qemu-user", "qemu": host.qemu_version(qemu), "qemu_cpu": cpu, "runtime": emu_info.get("runtime"),
            "machine": emu_info.get("machine"), "python": None, "numpy": None, "threads": emu_info.get("threads"),
            "sysroot": str(sysroot), "debian_release": release if cached is not None else None,
            "rootfs": str(cached.path) if cached is not None else None, "venv": None,
            "bit_identical": exact, "entry_point": entry,
        },
        host={key: host_info.get(key) for key in ("machine", "python", "numpy", "runtime", "threads")},
        tolerance=tolerance,
        batches=batches,
        bench=bench_report,
        seconds={key: round(value, 2) for key, value in seconds.items()},
        notes=tuple(notes),
        bundle_check=bundle_check,
    )


def emulated_runner(bundle, cache_dir: Path, release: str):
    """(the bundle's runner, qemu, its CPU, the cached rootfs or None, the sysroot, the command
    prefix that runs an aarch64 binary under qemu, the environment) for a native bundle."""
    runner = bundle.path / native.RUNNER
    if not runner.is_file():
        raise EmulationError(f"{bundle.path} is a native bundle without {native.RUNNER}; rebuild it")
    tools_qemu = shutil.which(host.QEMU_STATIC)
    if tools_qemu is None:
        raise EmulationError(f"{host.QEMU_STATIC} not found on PATH; install it: {host.INSTALL_HINT}")
    qemu = Path(tools_qemu)
    cpu = pinned_cpu(bundle.info["native"].get("cpu"), host.qemu_cpus(qemu))
    cached = rootfs.find_rootfs(cache_dir, release) if cache_dir.is_dir() else None
    sysroot = _sysroot(cached)
    prefix = [str(qemu), "-cpu", host.checked_cpu(cpu), "-L", str(sysroot)]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    return runner, qemu, cpu, cached, sysroot, prefix, env


class FencedRunner:
    """The bundle's ``edgekit-run`` under QEMU inside a sandbox (``emulate.sandbox``)."""

    def __init__(self, bundle, sandbox, cpu: str) -> None:
        self.bundle, self.sandbox, self.cpu = bundle, sandbox, cpu

    def inside(self, path: Path) -> str:
        """Where a file of the bundle lies inside the sandbox."""
        return f"{BUNDLE}/{Path(path).resolve().relative_to(self.bundle.path.resolve()).as_posix()}"

    def run(self, args: list[str], *, what: str, timeout_s: float):
        # the runner's own step timer, as long as edgekit's deadline (its 30 s default is a board's, not QEMU's)
        command = [QEMU, "-cpu", checked_cpu(self.cpu), "-L", "/", f"{BUNDLE}/{native.RUNNER}", *args,
                   "--timeout", f"{max(1, int(timeout_s))}"]
        return run_fenced(self.sandbox.argv(command), what=what, timeout_s=timeout_s, env=self.sandbox.env,
                          preexec=self.sandbox.preexec)


@contextlib.contextmanager
def fenced_runner(bundle, qemu: Path, cpu: str, sysroot: Path):
    with bundle_sandbox(bundle.path, [native.RUNNER], arch="aarch64", libraries_from=sysroot, qemu=qemu) as box:
        yield FencedRunner(bundle, box, cpu)


def pinned_cpu(cpu: str | None, available: tuple[str, ...]) -> str:
    """The QEMU CPU for a runner compiled for ``cpu``: that core itself, never ``max`` (whose SME
    kernels gave wrong int8 outputs) and never a core older than the binary's instructions."""
    if not cpu:
        return "cortex-a72"  # the oldest core edgekit's aarch64 targets have but the A53 (ARMv8.0 either way)
    checked_cpu(cpu)  # a bundle.json naming max is refused, not emulated
    if cpu not in available:
        raise EmulationError(f"this qemu cannot emulate {cpu}, the core the runner is built for "
                             f"(it has: {', '.join(c for c in available if c not in NEVER)}); upgrade qemu-user-static")
    return cpu


def _sysroot(cached) -> Path:
    if cached is not None:
        return cached.path
    cross = Path(CROSS["aarch64"][2])
    if (cross / "lib" / "libc.so.6").is_file():
        return cross
    raise EmulationError("an arm64 userland is needed for the runner's C and C++ libraries: install the cross "
                         f"toolchain (apt-get install {CROSS['aarch64'][1]}) or build edgekit's rootfs "
                         "(bash benchmarks/emulated_verify.sh)")


def _host_probe(bundle, here: Path, timeout_s: float):
    board_files.install(here / "probe", entries=("probe.py",))
    out = here / "host.npz"
    argv = [sys.executable, "-I", str(here / "probe" / "probe.py"), str(bundle.model), str(bundle.reference), str(out),
            "--format", bundle.format, "--threads", "1", "--inputs", ",".join(bundle.input_names)]
    done = run_captured(argv, what="the model run on this host", timeout_s=timeout_s)
    if done.returncode != 0:
        raise EdgekitError(f"running {bundle.model.name} on this host failed: {_last(done)}")
    return _load(out), _json_line(done.stdout, "the host probe"), done.seconds


def _entry_point(bundle, cached, cpu: str, timeout_s: float, progress: Progress, notes: list[str]) -> dict | None:
    """``sh run.sh check`` in a Python-free root (root, binfmt_misc and the cached rootfs needed)."""
    if os.geteuid() != 0:
        notes.append("not root: run.sh was not run in a Python-free root (it needs a chroot)")
        return None
    check_available()
    binfmt = host.ensure_binfmt(progress)
    if not binfmt.usable:
        notes.append(f"run.sh was not run in a Python-free root: {binfmt.reason}")
        return None
    with tempfile.TemporaryDirectory(prefix="edgekit-board-root-") as tmp:
        root = Path(tmp) / "root"
        make_board_root(cached.path, root, [bundle.path / native.RUNNER], own_libs=bundle.path / native.LIB_DIR)
        copy_bundle(bundle.path, root / "bundle")
        has_python = any("python" in p.name for p in root.rglob("*"))
        tools = host.find_tools(need_debootstrap=False)
        launch = make_launcher(root, tools, binfmt, cpu, int(bundle.info.get("threads") or 1), fenced=True)
        progress("running the bundle's run.sh check in a Python-free arm64 root under emulation")
        done = run_fenced(launch.argv(["/bin/sh", "/bundle/" + native.RUN_SCRIPT, "check", "--timeout",
                                       f"{max(1, int(timeout_s))}"], cwd="/bundle"),
                          what="run.sh under emulation", timeout_s=timeout_s, env=launch.env(), preexec=preexec_limits)
        report = {"command": f"sh {native.RUN_SCRIPT} check", "python_in_root": has_python,
                  "exit_code": done.returncode, "seconds": round(done.seconds, 2), "ok": False, "verdict": ""}
        try:
            doc, verdict = read_output(done.stdout)
        except ValueError:
            report["error"] = _last(done)
            return report
        report.update(ok=done.returncode == 0 and verdict.startswith("PASS") and not has_python, verdict=verdict,
                      machine=doc.get("machine"), outputs_sha256=doc.get("outputs_sha256"))
        return report


def _bench(fenced: FencedRunner, bundle, cpu: str, timeout_s: float) -> tuple[dict, float]:
    from dataclasses import replace


    threads = str(bundle.info.get("threads") or 1)
    args = ["bench", fenced.inside(bundle.model), "--threads", threads, "--warmup", "2",
            "--min-runs", str(BENCH_RUNS), "--max-runs", str(BENCH_RUNS), "--min-time", "0", "--emulated",
            "--mode", "emulated", "--target", bundle.target]
    done = fenced.run(args, what="edgekit-run bench under emulation", timeout_s=timeout_s)
    report = {"status": BENCH_STATUS, "note": BENCH_NOTE, "ok": False, "error": "", "result": None}
    if done.returncode != 0:
        report["error"] = _last(done)
        return report, done.seconds
    try:
        result = from_document(json.loads(done.stdout), "edgekit-run bench output under emulation")[0]
    except (ValueError, EdgekitError) as exc:
        report["error"] = str(exc).splitlines()[0] if str(exc) else "edgekit-run printed no valid JSON"
        return report, done.seconds
    facts = {**result.host, "emulated": True, "qemu_cpu": cpu, "isa": [],
             "cpu_model": f"QEMU {cpu} (emulated on {result.host.get('cpu_model') or 'an unknown CPU'})"}
    result = replace(result, mode="emulated", host=facts, notes=(*result.notes, BENCH_NOTE))
    report.update(ok=True, result=result.to_dict())
    return report, done.seconds


def _load(path: Path) -> dict:
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def _json_line(stdout: str, what: str) -> dict:
    try:
        doc = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise EdgekitError(f"{what} printed no result") from None
    return doc if isinstance(doc, dict) else {}


def _last(done) -> str:
    return last_error(done.tail, ()) or f"exit status {done.returncode}"
