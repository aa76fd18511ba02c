"""``edgekit bench --emulate``: executed instructions per inference on the target's core, under QEMU.

A native bundle runs with its own ``edgekit-run``; an ExecuTorch program or ONNX model (a file, an
export folder, or a Python bundle's model) with edgekit's cached aarch64 build for its format and
the target's core (a Python bundle's per-call Python overhead is not counted); a Python bundle of
ncnn or LiteRT, which no edgekit-run runs, with its own runtime's wheel (``emulate.icount_python``:
Python's per-call work counted too). Both run in the bundle
sandbox with the counting plugin (``edgekit.emulate.icount``). Each result is the runner's own
bench result under QEMU (its timings are QEMU's, not the board's: mode ``emulated``) with the
counts in ``emulated`` (``edgekit.records.instructions``).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from edgekit.records.result import BenchResult, from_document
from edgekit.core.errors import UsageError
from edgekit import formats
from edgekit.bench.api import resolve_model
from edgekit.records.instructions import section
from edgekit.bundle import layout, native
from edgekit.core.targets import load_target
from edgekit.emulate.bundle import open_bundle
from edgekit.emulate.host import qemu_cpu_for, qemu_cpus
from edgekit.emulate.icount import RUNNERS, SOURCE_BUILT, count_per_run, count_bundle
from edgekit.emulate.icount_plugin import plugin_qemu

NOTE = ("instructions: executed aarch64 instructions per inference on the target's core, counted under QEMU "
        "(deterministic); the timings are QEMU's on this host, not the board's")
Progress = Callable[[str], None]


def bench_emulated(paths: Iterable[str | os.PathLike], *, target: str | None = None, threads: int | None = None,
                   runs: int = 20, progress: Progress | None = None) -> list[BenchResult]:
    """One result per path, each with its ``emulated`` instruction counts."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise UsageError("no models to count")
    results = []
    for path in paths:
        if path.is_dir() and layout.is_bundle(path):
            results.append(_bundle(path, target, threads or 1, runs, progress))
        else:
            results.append(_program(path, target, threads or 1, runs, progress))
    return results


def _bundle(path: Path, target: str | None, threads: int, runs: int, progress: Progress | None) -> BenchResult:
    on_wheel_library = [name for name in RUNNERS if name not in SOURCE_BUILT]
    python_counted = [name for name in formats.names()
                      if formats.get(name).board.counted_in_python and name not in on_wheel_library]
    bundle = open_bundle(path)
    if target is not None and target != bundle.target:
        raise UsageError(f"{path} is a bundle for {bundle.target}, not {target}; drop --target, or bundle it for {target}")
    cpu, notes = _cpu(bundle.target)
    if native.is_native(bundle.info):
        counts = count_bundle(bundle, cpu, threads=threads, runs=runs, progress=progress)
    elif bundle.format in on_wheel_library:  # a Python bundle: its model, run by edgekit-run on the same runtime's kernels
        counts = count_per_run(bundle.model, bundle.format, cpu, threads=threads, runs=runs, progress=progress)
        runtime = bundle.info.get("runtime") or {}
        notes.append(f"a Python bundle: its model was counted with edgekit's own aarch64 edgekit-run, on the kernels of "
                     f"the runtime the bundle pins ({runtime.get('name')} {runtime.get('version')}); the board's Python "
                     "adds its per-call overhead, which is not counted")
    elif bundle.format in python_counted:  # no edgekit-run for it: the bundle's own runtime, in Python
        from edgekit.emulate.icount_python import count_python_bundle

        if threads != 1:
            raise UsageError(f"{path} is a Python bundle of a {bundle.format} model; it is counted on one thread "
                             "(drop --threads)")
        counts = count_python_bundle(bundle, cpu, runs=runs, progress=progress)
        notes.extend(counts["notes"])
    else:
        raise UsageError(f"{path} is a Python bundle of a {bundle.format} model; bench --emulate counts "
                         f"{', '.join(RUNNERS.values())} and Python bundles of {', '.join(python_counted)}")
    return _result(counts, path=bundle.model, precision=bundle.precision, variant=str(bundle.info.get("variant") or ""),
                   target=bundle.target, notes=notes)


def _program(path: Path, target: str | None, threads: int, runs: int, progress: Progress | None) -> BenchResult:
    if target is None:
        raise UsageError(f"bench --emulate needs --target for {path.name} (rpi3, rpi4, rpi5, ...): it names the core "
                         "to count on; a native bundle names its own")
    model = resolve_model(path)
    if model.format not in RUNNERS:
        raise UsageError(f"bench --emulate counts {', '.join(RUNNERS.values())} and native bundles; "
                         f"{model.path.name} is {model.format}: export it with --format {' or '.join(RUNNERS)}")
    cpu, notes = _cpu(target)
    counts = count_per_run(model.path, model.format, cpu, threads=threads, runs=runs, progress=progress)
    entry = model.entry
    return _result(counts, path=model.path, precision=entry.precision if entry else "",
                   variant=str(entry.details.get("variant") or "") if entry else "", target=target, notes=notes)


def _cpu(target_name: str) -> tuple[str, list[str]]:
    """The QEMU core for a target (``host.qemu_cpu_for``: never max), and a note when it is a stand-in."""
    target = load_target(target_name)
    if target.arch != "aarch64":
        raise UsageError(f"target {target.name} is {target.arch}; bench --emulate counts aarch64 instructions")
    cpu, note = qemu_cpu_for(target.core, qemu_cpus(plugin_qemu()))
    return cpu, [note] if note else []


def _result(counts: dict, *, path: Path, precision: str, variant: str, target: str, notes: list[str]) -> BenchResult:
    result = from_document(counts["bench"], "edgekit-run bench output under emulation")[0]
    cpu = counts["cpu"]
    facts = {**result.host, "emulated": True, "qemu_cpu": cpu, "isa": [],
             "cpu_model": f"QEMU {cpu} (emulated on {result.host.get('cpu_model') or 'an unknown CPU'})"}
    model = replace(result.model, path=str(path), precision=precision or result.model.precision,
                    variant=variant or result.model.variant)
    return replace(result, model=model, mode="emulated", host=facts, target=target,
                   notes=(*notes, NOTE, *result.notes), emulated=section(counts))
