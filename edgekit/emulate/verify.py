"""``verify_emulated``: run a device bundle on an emulated aarch64 board and hold it to the host.

1. check the bundle (SHA256SUMS, bundle.json, wheels built for the board's platform);
2. check this host (root, qemu-user-static, debootstrap, binfmt) and get the cached arm64
   Debian rootfs, building it once;
3. a venv inside with the bundle's requirements (cached by their hash);
4. run the bundle's model on reference.npz's inputs there and here with the same probe script,
   and compare per batch: emulated vs host (the verdict), and both vs the float model;
5. run the bundle's runner.py there: a functional bench, marked mode "emulated", whose timings
   are QEMU's and never the device's latency.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from edgekit.board import BUNDLED_NAME, entries as board_files
from edgekit.emulate import EmulationError, host, rootfs
from edgekit.emulate.report import (
    BENCH_NOTE,
    BENCH_STATUS,
    DEFAULT_ATOL,
    EmulationReport,
    Tolerance,
    bundle_fields,
    check_batches,
)
from edgekit.emulate.rootfs import DEFAULT_MIRROR, DEFAULT_RELEASE
from edgekit.core.errors import EdgekitError, UsageError
from edgekit.records.result import from_document
from edgekit.board.inputs import output_of_key
from edgekit.bundle import native
from edgekit.bundle.layout import CHECK_OUTPUTS
from edgekit.core import handlers
from edgekit.core.bounds import check_timeout
from edgekit.core.targets import load_target
from edgekit.core import venv_cache
from edgekit.emulate.bundle import check_wheels, open_bundle
from edgekit.emulate.bundle_check import own_check, own_limits
from edgekit.emulate.chroot import NOISE, make_launcher
from edgekit.emulate.host import Binfmt
from edgekit.emulate.process import last_error, run_captured, run_fenced
from edgekit.emulate.sandbox import NOBODY, preexec_limits
from edgekit.emulate.venv import ensure_venv, with_index_url

PROBE_DIR = "probe"  # the host's board package and its probe entry, in a folder of the work dir
LAUNCHERS = ("auto", "binfmt", "interpreter")
DEFAULT_TIMEOUT_S = 1800.0
BENCH_RUNS = 10

Progress = Callable[[str], None]


def verify_emulated(
    bundle_dir: str | Path,
    *,
    release: str = DEFAULT_RELEASE,
    cache_dir: str | Path | None = None,
    rebuild: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    atol: float = DEFAULT_ATOL,
    bench: bool = True,
    serve: bool = True,
    mirror: str = DEFAULT_MIRROR,
    launcher: str = "auto",
    index_url: str | None = None,
    progress: Progress | None = None,
) -> EmulationReport:
    """Verify ``bundle_dir`` under emulation; the report says whether it passed (see ``Tolerance``).

    ``timeout_s`` bounds each long step (the rootfs build, the install, each emulated run).
    ``launcher`` "auto" uses binfmt_misc when it works, else qemu-aarch64-static named as the
    command ("interpreter", which cannot build a rootfs). ``index_url`` installs the bundle's
    pinned requirements from that package index instead of the one requirements.txt names
    (a mirror of PyTorch's CPU index where that cannot be reached; recorded in the notes). Before
    an install from an index this host checks that it answers and has every pin for the board, as a
    CPU build (``index_check``: a CUDA-only torch is refused, not installed). Raises EmulationError when
    this host cannot emulate or the board's requirements cannot be had, InputFileError for a broken
    bundle, UsageError for bad settings.
    """
    progress = progress or (lambda message: None)
    _check_settings(timeout_s, atol, launcher)
    if index_url is not None:
        from edgekit.emulate.venv import with_index_url

        with_index_url("", index_url)  # a bad URL is a usage error before any work
    rootfs.check_release(release)
    started = time.monotonic()
    seconds: dict[str, float] = {}
    notes: list[str] = []

    bundle = open_bundle(bundle_dir)
    progress(f"bundle {bundle.path}: {bundle.checked_files} files match SHA256SUMS")
    if bundle.arch != "aarch64":
        raise UsageError(f"{bundle.path} is a bundle for {bundle.arch or 'an unknown arch'}; --emulate runs aarch64 bundles only")
    check_wheels(bundle)
    if index_url is not None and bundle.wheels:
        raise UsageError("--index-url applies to bundles without wheels/; this one installs offline from its wheels")
    core, threads = _target_core(bundle, notes)
    cache = (Path(cache_dir) if cache_dir is not None else rootfs.default_cache_dir()).absolute()

    if native.is_native(bundle.info):  # edgekit-run under qemu-user: no venv, no Python, root optional
        from edgekit.emulate.native import verify_native

        if index_url is not None:
            raise UsageError("--index-url applies to Python bundles; a native bundle installs nothing")
        if "llm" in bundle.info:  # a language model: its greedy ids, not outputs on reference inputs
            verify_llm = handlers.handler(handlers.LANGUAGE_MODEL_CHECK)
            return verify_llm(bundle, cache_dir=cache, release=release, timeout_s=timeout_s, progress=progress,
                              notes=notes)
        return verify_native(bundle, cache_dir=cache, release=release, timeout_s=timeout_s, atol=atol, bench=bench,
                             progress=progress, notes=notes)

    host.require_root()
    cached = rootfs.find_rootfs(cache, release) if cache.is_dir() else None
    tools = host.find_tools(need_debootstrap=rebuild or cached is None)
    binfmt = host.ensure_binfmt(progress) if launcher != "interpreter" else host.Binfmt(False, reason="--launcher interpreter")
    if launcher == "binfmt" and not binfmt.usable:
        raise EmulationError(f"cannot run aarch64 programs through binfmt_misc: {binfmt.reason}")
    if not binfmt.usable and (cached is None or rebuild):
        raise EmulationError(
            f"cannot build the arm64 rootfs: {binfmt.reason}; debootstrap needs binfmt_misc with qemu's handler "
            f"({host.INSTALL_HINT}, then update-binfmts --enable qemu-aarch64)"
        )

    mark = time.monotonic()
    fs = rootfs.ensure_rootfs(cache, release, debootstrap=tools.debootstrap if binfmt.usable else None,
                              mirror=mirror, rebuild=rebuild, timeout_s=timeout_s, progress=progress)
    seconds["rootfs"] = time.monotonic() - mark
    check_wheels(bundle, fs.python)
    qemu_cpu, note = host.qemu_cpu_for(core, host.qemu_cpus(tools.qemu))
    if note:
        notes.append(note)
    run_in = _working_launcher(fs.path, tools, binfmt, qemu_cpu, timeout_s, progress, notes,
                               fallback=launcher == "auto", cores=threads)


    mark = time.monotonic()
    try:
        venv = _venv(run_in, bundle, fs.python, timeout_s, progress, notes, index_url)
    except BaseException:
        venv_cache.release_all()
        raise
    seconds["venv"] = time.monotonic() - mark

    work = Path(tempfile.mkdtemp(prefix="edgekit-verify-", dir=run_in.host_path("/tmp")))
    try:
        for path in (bundle.model, *bundle.data_files, bundle.reference, bundle.path / "manifest.json", bundle.runner):
            if path is not None and path.is_file():
                shutil.copyfile(path, work / path.name)
        if bundle.runner is not None and (bundle.path / BUNDLED_NAME).is_dir():  # the bundle's own runner code
            shutil.copytree(bundle.path / BUNDLED_NAME, work / BUNDLED_NAME, symlinks=True)
        board_files.install(work / PROBE_DIR, entries=("probe.py",))  # identical probe code on both sides
        inside = "/" + work.relative_to(run_in.rootfs).as_posix()
        fenced = _fence(run_in, work)
        progress(f"running {bundle.model.name} on the reference inputs under emulation ({qemu_cpu}; as user 65534, "
                 "no network)")
        emulated, emu_info, seconds["emulated_run"] = _probe(
            [venv.python, "-I", f"{inside}/{PROBE_DIR}/probe.py"], inside, work / "emulated.npz",
            f"{inside}/emulated.npz", bundle, timeout_s, run_in=fenced)
        progress(f"running {bundle.model.name} on the reference inputs on this host")
        with tempfile.TemporaryDirectory(prefix="edgekit-verify-host-") as here:
            out = Path(here) / "host.npz"
            board_files.install(Path(here) / PROBE_DIR, entries=("probe.py",))
            hosted, host_info, seconds["host_run"] = _probe(
                [sys.executable, "-I", str(Path(here) / PROBE_DIR / "probe.py")], str(bundle.path.resolve()), out,
                str(out), bundle, timeout_s)
        bench_report = None
        if bench and bundle.runner is not None:
            progress("running the bundle's runner.py under emulation (a functional check; timings are not device latency)")
            bench_report, seconds["bench"] = _bench(fenced, venv, inside, bundle, threads, timeout_s)
        elif bench:
            notes.append("the bundle has no runner.py; no functional bench was run")
        serve_report = None
        if serve:
            from edgekit.emulate.serve_check import has_server, serve_check

            if has_server(bundle) and bundle.spec.board.standalone_server:
                serve_report, seconds["serve"] = serve_check(
                    run_in, bundle, fs.python, work, inside, emulated, Tolerance.for_precision(bundle.precision, atol),
                    timeout_s, progress)
            else:
                notes.append("the bundle has no serve.py (ONNX bundles carry one); serving was not checked")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        venv_cache.release_all()  # the venvs this run held in use may be evicted by later runs now

    reference = _reference_outputs(bundle.reference)
    tolerance = Tolerance.for_precision(bundle.precision, atol)
    batches = check_batches(emulated, hosted, reference, tolerance, notes)

    bundle_check = own_check(emulated, bundle.reference, own_limits(bundle), f"python3 {CHECK_OUTPUTS}")
    seconds["total"] = time.monotonic() - started
    return EmulationReport(
        **bundle_fields(bundle),
        emulation={
            "launcher": run_in.mode, "qemu": tools.qemu_version, "qemu_cpu": qemu_cpu,
            "debian_release": release, "rootfs": str(fs.path), "rootfs_built": fs.built,
            "rootfs_build_s": None if fs.build_s is None else round(fs.build_s, 1),
            "python": emu_info.get("python"), "machine": emu_info.get("machine"), "runtime": emu_info.get("runtime"),
            "numpy": emu_info.get("numpy"), "threads": emu_info.get("threads"),
            "venv": {"path": venv.path, "key": venv.key, "source": venv.source, "built": venv.built,
                     "seconds": round(venv.seconds, 1), "packages": venv.packages},
        },
        host={key: host_info.get(key) for key in ("machine", "python", "numpy", "runtime", "threads")},
        tolerance=tolerance,
        batches=batches,
        bench=bench_report,
        serve=serve_report,
        seconds={key: round(value, 2) for key, value in seconds.items()},
        notes=tuple(notes),
        bundle_check=bundle_check,
    )


def _check_settings(timeout_s: float, atol: float, launcher: str) -> None:
    check_timeout(timeout_s)
    if not isinstance(atol, (int, float)) or not math.isfinite(atol) or atol < 0:
        raise UsageError(f"--atol must be a number >= 0, got {atol!r}")
    if launcher not in LAUNCHERS:
        raise UsageError(f"unknown launcher {launcher!r}; choose one of: {', '.join(LAUNCHERS)}")


def _target_core(bundle, notes: list[str]) -> tuple[str, int]:
    """(the target's CPU core, its thread count); a target unknown here leaves the core unnamed."""
    threads = int(bundle.info.get("threads") or 1)
    try:
        target = load_target(bundle.target)
    except EdgekitError:
        notes.append(f"target {bundle.target!r} is not known here; its CPU core is unknown")
        return "", threads
    return target.core, int(bundle.info.get("threads") or target.threads)


def _working_launcher(rootfs, tools, binfmt, qemu_cpu, timeout_s, progress, notes, fallback: bool = True, cores: int = 4):
    """The first launcher that really starts the rootfs's python3 as aarch64 (binfmt, then interpreter)."""
    tried = []
    candidates = [binfmt] if binfmt.usable else []
    if fallback or not binfmt.usable:
        candidates.append(Binfmt(False, reason="explicit interpreter"))
    for state in candidates:
        launch = make_launcher(rootfs, tools, state, qemu_cpu, cores)
        done = run_captured(launch.argv(["/usr/bin/python3", "-c", "import platform; print(platform.machine())"]),
                            what="the emulated python3", timeout_s=min(timeout_s, 300.0), env=launch.env())
        if done.returncode == 0 and done.stdout.strip() == "aarch64":
            if tried:
                notes.append(f"binfmt did not start the rootfs's python3 ({tried[-1]}); used qemu-aarch64-static as an explicit interpreter")
            progress(f"aarch64 programs start via {launch.mode} (QEMU_CPU={qemu_cpu})")
            return launch
        tried.append(last_error(done.tail, NOISE) or done.stdout.strip() or f"exit status {done.returncode}")
    raise EmulationError(f"cannot start the rootfs's python3 under qemu ({'; '.join(tried)}); try --rebuild")


def _venv(run_in, bundle, python, timeout_s, progress, notes, index_url=None):
    entry = bundle.spec
    if bundle.requirements is not None:
        text = bundle.requirements.read_text(encoding="utf-8")
    else:
        from edgekit.bundle.requirements import board_dists, host_version

        dists = board_dists(entry)
        text = "".join(f"{dist}=={host_version(dist)}\n" for dist in dists)
        notes.append("the bundle has no requirements.txt; installed the host's numpy and runtime versions")
    if index_url is not None:
        text, replaced = with_index_url(text, index_url)
        notes.append(f"requirements installed from {index_url}" + (f" instead of {replaced}" if replaced else ""))
    with_deps = entry.board.with_deps_off_index if index_url is not None and entry.board.no_deps else ()
    if with_deps:
        notes.append(f"{', '.join(with_deps)} installed with its own dependencies: from {index_url} it is a "
                     "build that needs more libraries than the pinned index's")
    venv = ensure_venv(run_in, text, bundle.wheels, python, timeout_s=timeout_s, progress=progress,
                       no_deps=entry.board.no_deps, with_deps=with_deps, index_flag=index_url is not None)
    notes.extend(line.removeprefix("emulation cache: ") for line in venv.evicted)
    return venv


def _fence(run_in, work: Path):
    """The launcher for the bundle's own code and model (runner.py, a TorchScript file's code): no
    network, its own PID/IPC/UTS namespaces, user 65534, so it can write only ``work`` (handed to
    that user) and cannot change the cached rootfs."""
    from dataclasses import replace


    for folder, dirs, files in os.walk(work):
        for name in (*dirs, *files):
            os.chown(os.path.join(folder, name), NOBODY, NOBODY, follow_symlinks=False)
    os.chown(work, NOBODY, NOBODY)
    return replace(run_in, fenced=True)


def _probe(prefix, model_dir: str, out_file: Path, out_arg: str, bundle, timeout_s, run_in=None):
    """Run probe.py (emulated when ``run_in`` is given) -> ({output key: array}, its JSON, seconds)."""
    argv = [*prefix, f"{model_dir}/{bundle.model.name}", f"{model_dir}/{bundle.reference.name}", out_arg,
            "--format", bundle.format, "--threads", "1", "--inputs", ",".join(bundle.input_names)]
    if bundle.engine:
        argv += ["--engine", bundle.engine]
    where = "under emulation" if run_in is not None else "on this host"
    if run_in is not None:
        from edgekit.emulate.process import run_fenced
        from edgekit.emulate.sandbox import preexec_limits

        done = run_fenced(run_in.argv(argv, cwd=model_dir), what=f"the model run {where}", timeout_s=timeout_s,
                          env=run_in.env(), preexec=preexec_limits)
    else:
        done = run_captured(argv, what=f"the model run {where}", timeout_s=timeout_s)
    if done.returncode != 0:
        reason = last_error(done.tail, NOISE) or f"exit status {done.returncode}"
        raise EdgekitError(f"running {bundle.model.name} {where} failed: {reason}")
    try:
        info = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise EdgekitError(f"the model run {where} printed no result") from None
    return _load_outputs(out_file), info, done.seconds


def _load_outputs(path: Path) -> dict:
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def _reference_outputs(path: Path) -> dict:
    return {key: value for key, value in _load_outputs(path).items() if output_of_key(key) is not None}


def _bench(run_in, venv, inside, bundle, threads: int, timeout_s) -> tuple[dict, float]:
    """The bundle's runner.py under emulation: did it run, and its (emulated) result."""
    argv = [venv.python, "-I", f"{inside}/runner.py", f"{inside}/{bundle.model.name}", "--format", bundle.format,
            "--threads", str(threads), "--warmup", "2", "--min-runs", str(BENCH_RUNS), "--max-runs", str(BENCH_RUNS),
            "--min-time", "0", "--emulated", "--mode", "emulated", "--target", bundle.target]
    if bundle.engine:
        argv += ["--engine", bundle.engine]
    done = run_fenced(run_in.argv(argv, cwd=inside), what="runner.py under emulation", timeout_s=timeout_s,
                      env=run_in.env(), preexec=preexec_limits)
    report = {"status": BENCH_STATUS, "note": BENCH_NOTE, "ok": False, "error": "", "result": None}
    if done.returncode != 0:
        report["error"] = last_error(done.tail, NOISE) or f"exit status {done.returncode}"
        return report, done.seconds
    try:
        result = from_document(json.loads(done.stdout), "runner.py output under emulation")[0]
    except (json.JSONDecodeError, EdgekitError) as exc:
        report["error"] = str(exc).splitlines()[0] if str(exc) else "runner.py printed no valid JSON"
        return report, done.seconds
    # qemu-user shows the host's /proc/cpuinfo: the CPU model and ISA flags the runner read are the host's.
    facts = {**result.host, "emulated": True, "qemu_cpu": run_in.qemu_cpu, "isa": [],
             "cpu_model": f"QEMU {run_in.qemu_cpu} (emulated on {result.host.get('cpu_model') or 'an unknown CPU'})"}
    result = replace(result, mode="emulated", host=facts, notes=(*result.notes, BENCH_NOTE))
    report.update(ok=True, result=result.to_dict())
    return report, done.seconds
