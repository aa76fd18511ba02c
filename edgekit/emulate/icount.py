"""Executed aarch64 instructions per inference, on a board's core, under QEMU: deterministic counts.

The model runs in ``edgekit-run bench`` under Debian's dynamic ``qemu-aarch64 -cpu <core>`` with
edgekit's counting plugin (``icount_plugin``), inside the bundle sandbox (``emulate.sandbox``: the
program and the model come from a bundle or a user). One process, ``runs`` timed inferences and no
warm-up; the runner marks the start and end of its timed runs (``count_mark`` in
``native/runner/timing.cpp``) and the plugin counts what ran between the marks:

    per_run = window / runs
    startup = count before the first mark     (process start, loading, the first inference)

Counting between marks in one process leaves out what varies from one process to the next. Two
processes with 1 and ``runs + 1`` timed runs (this module's first method) were wrong twice over: a
process with a single timed run executes ~330 k more instructions than the line through 2, 3, ...
81 runs predicts (a 64-16-10 MLP: 22 k per run by that method, 38.7 k by the line and by the marks),
and about one process in forty spends another 0.1-0.7 M instructions on its way out.

Counts repeat exactly whatever the host's load (30 of 30 loaded runs: 770,660 instructions in the
MLP's window); ``CALL_NOISE`` is the gate's margin for per-call work that follows QEMU's clock.

Counts depend on the core (the kernels a runtime picks from its HWCAP), the runner build, the C
library, QEMU's version and the plugin; the result records them, so a gate compares like with like.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgekit.records.instructions import CALL_NOISE  # noqa: F401 - the bound on two counts' difference, public here
from edgekit.emulate import EmulationError, rootfs
from edgekit.core.errors import UsageError
from edgekit.bundle import layout, native
from edgekit.emulate.count_inputs import INPUTS_NAME, RANDOM, REFERENCE, reference_inputs, write_inputs
from edgekit.emulate.host import checked_cpu, qemu_cpus, qemu_version
from edgekit.emulate.icount_plugin import plugin_library, plugin_qemu
from edgekit.emulate.icount_root import add_host_program
from edgekit.emulate.process import last_error, run_fenced
from edgekit.emulate.sandbox import BUNDLE, bundle_sandbox
from edgekit.native.build import RUNNER_NAME
from edgekit.native.toolchain import CROSS

CLASSES = ("simd_fp", "integer", "load", "store", "branch", "other")
DEFAULT_RUNS = 20
MAX_RUNS = 10_000
MAX_THREADS = 64
TIMEOUT_S = 1800.0
INSIDE = "/qemu-plugin"  # where the host's qemu-aarch64, its libraries' loader and the plugin lie in the sandbox
LOG_BYTES = 1 << 20
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.(pte|onnx|param)")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class CountedFormat:
    """A format a cached aarch64 ``edgekit-run`` runs, with the build of it that has its backend (one
    backend per binary)."""

    label: str  # in messages: "ONNX models (.onnx)"
    model_name: str  # the file's name when the user's is not a safe one
    build: str  # "module:function" building edgekit-run with this backend: (arch, cpu, progress) -> a runner
    # its library is the one the wheel of its Python bundle carries (ExecuTorch's, ONNX Runtime's), so a
    # Python bundle's model may be counted with edgekit-run; ncnn's is built from source, so its Python
    # bundles are counted with their own wheel
    wheel_library: bool = True
    companions: tuple[str, ...] = ()  # suffixes of files the model file reads beside it (ncnn's weights)


COUNTED = {
    "executorch": CountedFormat("ExecuTorch programs (.pte)", "model.pte", "edgekit.native.build:build_runner"),
    "onnx": CountedFormat("ONNX models (.onnx)", "model.onnx", "edgekit.native.ort_build:build_ort_runner"),
    "ncnn": CountedFormat("ncnn models (.param)", "model.ncnn.param", "edgekit.native.ncnn_build:build_ncnn_runner",
                          wheel_library=False, companions=(".bin",)),
}
RUNNERS = {fmt: counted.label for fmt, counted in COUNTED.items()}  # the formats counted, for messages
SOURCE_BUILT = tuple(fmt for fmt, counted in COUNTED.items() if not counted.wheel_library)


def companion_files(program: Path, fmt: str) -> list[Path]:
    """The files beside ``program`` that its runtime reads with it (ncnn's ``.bin`` weights), those present."""
    spec = COUNTED.get(fmt)
    found = [Path(program).with_suffix(suffix) for suffix in (spec.companions if spec else ())]
    return [path for path in found if path.is_file()]


def count_per_run(program: Path, fmt: str, cpu: str, *, threads: int = 1, runs: int = DEFAULT_RUNS,
                  progress: Progress | None = None, timeout_s: float = TIMEOUT_S) -> dict:
    """Instructions per inference of a model file on ``cpu`` (a QEMU core name such as cortex-a72), run
    by edgekit's cached aarch64 ``edgekit-run`` for its format (``fmt``: a key of ``RUNNERS``)."""
    if fmt not in RUNNERS:
        raise UsageError(f"emulated instruction counts run {' and '.join(RUNNERS.values())} with edgekit-run; "
                         f"{Path(program).name} is {fmt}")
    program = Path(program)
    if not program.is_file():
        raise UsageError(f"{program} is not a file")
    _check_settings(cpu, threads, runs)
    runner = _build_runner(fmt, cpu, progress)
    with tempfile.TemporaryDirectory(prefix="edgekit-icount-") as tmp:
        folder = Path(tmp)
        shutil.copyfile(runner.binary, folder / RUNNER_NAME)
        os.chmod(folder / RUNNER_NAME, 0o755)
        shutil.copytree(runner.folder / "lib", folder / "lib")
        name = program.name if SAFE_NAME.fullmatch(program.name) else COUNTED[fmt].model_name
        shutil.copyfile(program, folder / name)
        for companion in companion_files(program, fmt):  # ncnn's weights, beside its graph
            shutil.copyfile(companion, (folder / name).with_suffix(companion.suffix))
        manifest = program.parent / "manifest.json"  # the inputs' names, shapes and batch axis, as on the board
        if name == program.name and manifest.is_file() and not manifest.is_symlink():
            shutil.copyfile(manifest, folder / "manifest.json")
        reference = program.parent / layout.REFERENCE if name == program.name else None
        counts = count_in_folder(folder, RUNNER_NAME, name, cpu, threads=threads, runs=runs,
                                 progress=progress, timeout_s=timeout_s, inputs=reference_inputs(reference))
    return {**counts, "runner": f"edgekit-run {runner.key} (cached aarch64 build for {runner.cpu})"}


def count_bundle(bundle, cpu: str, *, threads: int = 1, runs: int = DEFAULT_RUNS, progress: Progress | None = None,
                 timeout_s: float = TIMEOUT_S) -> dict:
    """``count_per_run`` for a native bundle (``emulate.bundle.open_bundle``), with the bundle's own runner."""
    if not native.is_native(bundle.info) or not (bundle.path / native.RUNNER).is_file():
        raise UsageError(f"{bundle.path} is not a native bundle (edgekit-run beside the model); emulated "
                         "instruction counts need one")
    _check_settings(cpu, threads, runs)
    model = Path(bundle.model).resolve().relative_to(bundle.path.resolve()).as_posix()
    counts = count_in_folder(bundle.path, native.RUNNER, model, cpu, threads=threads, runs=runs, progress=progress,
                             timeout_s=timeout_s, inputs=reference_inputs(bundle.path / layout.REFERENCE))
    return {**counts, "runner": f"{native.RUNNER} of the bundle"}


def counting_tools(cpu: str, progress: Progress) -> tuple[Path, str, Path, Path]:
    """QEMU with plugin support that emulates ``cpu``, its version, the counting plugin built for it, the arm64
    userland."""
    qemu = plugin_qemu()
    version = qemu_version(qemu)
    if cpu not in qemu_cpus(qemu):
        raise EmulationError(f"{qemu} cannot emulate {cpu}")
    return qemu, version, plugin_library(version, progress), _sysroot()


def count_in_folder(folder: Path, runner: str, model: str, cpu: str, *, threads: int, runs: int,
                    progress: Progress | None, timeout_s: float, inputs: dict | None = None) -> dict:
    """Count ``folder/runner bench folder/model`` (paths relative to ``folder``) in a sandbox holding a copy of it,
    on ``inputs`` (arrays by input name: ``count_inputs``) or, without them, the runner's seeded random inputs."""
    progress = progress or (lambda message: None)
    qemu, version, library, sysroot = counting_tools(cpu, progress)
    with bundle_sandbox(folder, [runner], arch="aarch64", libraries_from=sysroot) as box:
        add_host_program(box.root, qemu, f"{INSIDE}/qemu-aarch64")
        add_host_program(box.root, library, f"{INSIDE}/{library.name}")
        if inputs is not None:
            write_inputs(inputs, box.root / BUNDLE.lstrip("/") / INPUTS_NAME)
        progress(f"counting instructions of {Path(model).name} on {cpu} under emulation ({runs} timed runs)")
        counts, doc = _counted_run(box, runner, model, cpu, library.name, runs, threads, timeout_s,
                                   INPUTS_NAME if inputs is not None else None)
    if counts["windows"] != 1 or counts["bad_marks"]:
        raise EmulationError(f"{runner} did not mark its timed runs once ({counts['windows']} marked, "
                             f"{counts['bad_marks']} out of order): a runner from an older edgekit? make the bundle again")
    window = counts["window"]
    per_run = round(window["total"] / runs)
    return {
        "cpu": cpu, "per_run": per_run, "startup": counts["before"],
        "classes": {name: round(window[name] / runs) for name in CLASSES},
        "runs": runs, "threads": threads, "qemu": version, "plugin": library.parent.name,
        "libc": str(sysroot), "counted": {"before": counts["before"], "window": window["total"], "total": counts["total"]},
        "bench": doc,  # edgekit-run's bench document (QEMU's timings: not a board's)
        "inputs": REFERENCE if inputs is not None else RANDOM,
    }


def _counted_run(box, runner: str, model: str, cpu: str, plugin: str, timed: int, threads: int,
                 timeout_s: float, inputs: str | None) -> tuple[dict[str, int], dict]:
    tag = secrets.token_hex(8)  # the program cannot know it, so it cannot forge the plugin's line
    log = f"/work/icount-{tag}.log"
    options = f"{INSIDE}/{plugin},tag={tag}" + (",atomic=on" if threads > 1 else "")
    command = [f"{INSIDE}/qemu-aarch64", "-cpu", checked_cpu(cpu), "-L", "/", "-plugin", options, "-d", "plugin",
               "-D", log, f"{BUNDLE}/{runner}", "bench", f"{BUNDLE}/{model}", "--threads", str(threads),
               "--warmup", "0", "--min-runs", str(timed), "--max-runs", str(timed), "--min-time", "0",
               "--timeout", str(max(1, int(timeout_s)))] + (["--input", f"{BUNDLE}/{inputs}"] if inputs else [])
    done = run_fenced(box.argv(command), what="edgekit-run under emulation with the counting plugin",
                      timeout_s=timeout_s, env=box.env, preexec=box.preexec)
    if done.returncode != 0:
        raise EmulationError(f"the model failed under emulation: {last_error(done.tail) or f'exit {done.returncode}'}")
    doc = _bench_document(done.stdout, timed)
    return parse_log(box.output(log, LOG_BYTES).read_text(encoding="utf-8", errors="replace"), tag), doc


def parse_log(text: str, tag: str) -> dict:
    """The plugin's one line for ``tag``: ``edgekit-icount TAG total=N simd_fp=N ... windows=K bad_marks=K
    before=N w_total=N w_simd_fp=N ... [p_windows=K p_bad_marks=K p_total=N ...]``: the whole run's counts,
    the marked window's under ``window``, and the prompt's windows (a language model's prefill) under
    ``prefill`` (with its own ``windows`` and ``bad_marks``; zeros from a plugin before them)."""
    lines = [line for line in text.splitlines() if line.startswith(f"edgekit-icount {tag} ")]
    if len(lines) != 1:
        raise EmulationError(f"the counting plugin reported {len(lines)} results (expected one)")
    fields = dict(item.split("=", 1) for item in lines[0].split()[2:] if "=" in item)
    try:
        counts: dict = {name: int(fields[name]) for name in ("total", *CLASSES)}
        window = {name: int(fields[f"w_{name}"]) for name in ("total", *CLASSES)}
        marks = {name: int(fields[name]) for name in ("windows", "bad_marks", "before")}
        prefill = {name: int(fields.get(f"p_{name}", 0)) for name in ("windows", "bad_marks", "total", *CLASSES)}
    except (KeyError, ValueError):
        raise EmulationError(f"the counting plugin's line is malformed: {lines[0][:200]}") from None
    for part in (counts, window, prefill):
        if sum(part[name] for name in CLASSES) != part["total"]:
            raise EmulationError("the counting plugin's classes do not add up to its total")
    return {**counts, **marks, "window": window, "prefill": prefill}


def _bench_document(stdout: str, timed: int) -> dict:
    try:
        doc = json.loads(stdout)
        runs = doc["results"][0]["timing"]["runs"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise EmulationError("edgekit-run printed no bench result under emulation") from None
    if runs != timed:
        raise EmulationError(f"edgekit-run timed {runs} runs where {timed} were asked for")
    return doc


def _build_runner(fmt: str, cpu: str, progress: Progress | None):
    module, function = COUNTED[fmt].build.split(":")
    return getattr(importlib.import_module(module), function)("aarch64", cpu, progress)


def _check_settings(cpu: str, threads: int, runs: int) -> None:
    checked_cpu(cpu)
    if not re.fullmatch(r"[a-z0-9][a-z0-9.+_-]{0,39}", cpu):
        raise UsageError(f"{cpu!r} is not a QEMU CPU name such as cortex-a72")
    if not 1 <= threads <= MAX_THREADS:
        raise UsageError(f"threads must be 1..{MAX_THREADS}, got {threads}")
    if not 1 <= runs <= MAX_RUNS:
        raise UsageError(f"runs must be 1..{MAX_RUNS}, got {runs}")


def _sysroot() -> Path:
    """The arm64 C library: the cross toolchain's (what CI has, so counts agree across machines), else
    edgekit's cached Debian rootfs."""
    cross = Path(CROSS["aarch64"][2])
    if (cross / "lib" / "libc.so.6").is_file():
        return cross
    cache = rootfs.default_cache_dir()
    cached = rootfs.find_rootfs(cache, rootfs.DEFAULT_RELEASE) if cache.is_dir() else None
    if cached is not None:
        return cached.path
    raise EmulationError(f"an arm64 C library is needed: apt-get install {CROSS['aarch64'][1]}")
