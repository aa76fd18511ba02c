"""A native bundle: ``edgekit-run`` and the runtime library its model needs, no Python on the board.

An ExecuTorch ``.pte`` gets the ExecuTorch build of ``edgekit-run`` and the ExecuTorch libraries the
program needs; an ONNX model (a format whose board runtime is ``onnxruntime``) gets the ONNX Runtime
build (``edgekit.native.ort_build``) and ``lib/libonnxruntime.so`` from the onnxruntime wheel.

Layout (beside the model, manifest.json, reference.npz, bundle.json, README.txt and SHA256SUMS
every bundle has)::

    edgekit-run              the runner, built for the target's architecture and core (RUNPATH $ORIGIN/lib)
    lib/*.so                 only the runtime libraries this model needs
    run.sh                   POSIX sh entry point: check (default), bench, info, verify
    THIRD_PARTY_NOTICES.txt  the runtime's licence and those of the code inside the libraries
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from edgekit import formats
from edgekit.core.errors import EdgekitError, UsageError
from edgekit.core.targets import Target
from edgekit.board.check import read_output
from edgekit.native.build import build_runner
from edgekit.native.libraries import needed_libraries, notices_text
from edgekit.native.library_build import LibraryRunner
from edgekit.native.ort_build import build_ort_runner
from edgekit.native.ort_headers import API_VERSION
from edgekit.native.ort_wheel import LIBRARY
from edgekit.native.toolchain import CROSS, host_arch

RUNNER = "edgekit-run"
LIB_DIR = "lib"
RUN_SCRIPT = "run.sh"
NOTICES = "THIRD_PARTY_NOTICES.txt"
RUNTIME_NAME = "executorch-native"
ORT_RUNTIME_NAME = "onnxruntime-native"
NCNN_RUNTIME_NAME = "ncnn-native"
# board runtimes (Board.runtime) with a C library edgekit-run runs on: ONNX Runtime's from its wheel,
# ncnn's built from its source distribution
LIBRARY_RUNTIMES = {"onnxruntime": ORT_RUNTIME_NAME, "ncnn": NCNN_RUNTIME_NAME}
RUNTIMES = ("python", "native")
CHECK_TIMEOUT_S = 600.0
Progress = Callable[[str], None]


def check_native(spec: formats.Format, target: Target) -> None:
    """A one-line UsageError unless the format ``spec`` runs on the native runner and ``target`` has a build of it."""
    if not runs_natively(spec):
        natives = [name for name in formats.names() if runs_natively(formats.get(name))]
        raise UsageError(f"--runtime native runs {', '.join(natives)} programs; this model is {spec.name} "
                         f"(export it with --format {natives[0]}, or bundle it with --runtime python)")

    if target.arch not in CROSS:
        raise UsageError(f"target {target.name} is {target.arch}: the native runtime is built for "
                         f"{' and '.join(CROSS)} only (a 32-bit OS has no aarch64 build; use a 64-bit OS)")


def runs_natively(spec: formats.Format) -> bool:
    """Whether a build of edgekit-run runs the format: ExecuTorch's (``native_runner``) or a runtime library's."""
    return spec.board.native_runner or spec.board.runtime in LIBRARY_RUNTIMES


def add_native(work: Path, spec: formats.Format, target: Target, precision: str, progress: Progress,
               script: str | None = None) -> dict:
    """Put the runner, its libraries, run.sh (``script``, else the output check's) and the notices into
    the bundle being built (its model: ``spec``'s file name); what bundle.json records about them."""
    model_name = spec.files.file_name
    if not spec.board.native_runner and spec.board.runtime in LIBRARY_RUNTIMES:
        add = _LIBRARY_ADDERS[spec.board.runtime]
        return add(work, model_name, target, precision, progress, script)

    runner = build_runner(target.arch, target.mcpu or None, progress)
    libraries = needed_libraries(work / model_name, runner)
    shutil.copyfile(runner.binary, work / RUNNER)
    os.chmod(work / RUNNER, 0o755)
    (work / LIB_DIR).mkdir()
    for name in libraries:
        shutil.copyfile(runner.library(name), work / LIB_DIR / name)
    (work / RUN_SCRIPT).write_text(script or run_script(model_name, target, precision), encoding="utf-8")
    os.chmod(work / RUN_SCRIPT, 0o755)
    (work / NOTICES).write_text(notices_text(runner, libraries), encoding="utf-8")
    return {
        "runtime": {"name": RUNTIME_NAME, "version": runner.dist.version},
        "native": {"runner": RUNNER, "entry": RUN_SCRIPT, "libraries": [f"{LIB_DIR}/{name}" for name in libraries],
                   "arch": target.arch, "cpu": target.mcpu or None, "compiler": runner.toolchain.version,
                   "executorch_version": runner.dist.version, "executorch_source": runner.dist.source,
                   "executorch_wheel_sha256": runner.dist.wheel_sha256, "build_key": runner.key},
    }


def _add_library_runner(work: Path, runner: LibraryRunner, script: str) -> None:
    """A runtime's build of edgekit-run into ``work``: the runner, its library in lib/, and the
    entry script."""
    shutil.copyfile(runner.binary, work / RUNNER)
    os.chmod(work / RUNNER, 0o755)
    (work / LIB_DIR).mkdir()
    shutil.copyfile(runner.library, work / LIB_DIR / runner.library.name)
    (work / RUN_SCRIPT).write_text(script, encoding="utf-8")
    os.chmod(work / RUN_SCRIPT, 0o755)


def _add_library_runtime(work: Path, model_name: str, target: Target, precision: str, progress: Progress,
                         script: str | None) -> dict:
    """The ONNX Runtime build of edgekit-run and the wheel's libonnxruntime.so (bound at run time)."""
    runner = build_ort_runner(target.arch, target.mcpu or None, progress)
    _add_library_runner(work, runner, script or run_script(model_name, target, precision))
    dist = runner.dist
    parts = [f"edgekit-run is edgekit's own code, compiled against ONNX Runtime's C API header (MIT); lib/{LIBRARY} "
             f"is ONNX Runtime {dist.version} (https://github.com/microsoft/onnxruntime), from its onnxruntime wheel, "
             "with the notices it ships:\n"]
    for notice in dist.notices:
        parts.append(f"== {notice.name} ==\n\n{notice.read_text(encoding='utf-8', errors='replace').strip()}\n")
    (work / NOTICES).write_text("\n".join(parts), encoding="utf-8")
    return {
        "runtime": {"name": ORT_RUNTIME_NAME, "version": dist.version},
        "native": {"runner": RUNNER, "entry": RUN_SCRIPT, "libraries": [f"{LIB_DIR}/{LIBRARY}"],
                   "arch": target.arch, "cpu": target.mcpu or None, "compiler": runner.toolchain.version,
                   "runtime_label": f"ONNX Runtime {dist.version}", "onnxruntime_version": dist.version,
                   "onnxruntime_source": dist.source, "onnxruntime_wheel_sha256": dist.wheel_sha256,
                   "c_api_version": API_VERSION, "build_key": runner.key},
    }


def _add_ncnn(work: Path, model_name: str, target: Target, precision: str, progress: Progress,
              script: str | None) -> dict:
    """The ncnn build of edgekit-run and libncnn.so built from the installed ncnn's source."""
    from edgekit.native.ncnn_build import build_ncnn_runner
    from edgekit.native.ncnn_source import LIBRARY as NCNN_LIBRARY

    runner = build_ncnn_runner(target.arch, target.mcpu or None, progress)
    _add_library_runner(work, runner, script or run_script(model_name, target, precision))
    dist = runner.dist
    licence = dist.license.read_text(encoding="utf-8", errors="replace").strip() if dist.license.is_file() else ""
    (work / NOTICES).write_text(
        f"edgekit-run is edgekit's own code, compiled against ncnn's C API header; lib/{NCNN_LIBRARY} is ncnn "
        f"{dist.version} (https://github.com/Tencent/ncnn), built from its source distribution on the package index "
        f"(SHA-256 {dist.sdist_sha256}), under the licence it ships:\n\n== LICENSE.txt ==\n\n{licence}\n",
        encoding="utf-8")
    return {
        "runtime": {"name": NCNN_RUNTIME_NAME, "version": dist.version},
        "native": {"runner": RUNNER, "entry": RUN_SCRIPT, "libraries": [f"{LIB_DIR}/{NCNN_LIBRARY}"],
                   "arch": target.arch, "cpu": target.mcpu or None, "compiler": runner.toolchain.version,
                   "runtime_label": f"ncnn {dist.version}", "ncnn_version": dist.version,
                   "ncnn_sdist_sha256": dist.sdist_sha256, "build_key": runner.key},
    }


# how each of LIBRARY_RUNTIMES goes into a bundle: its build of edgekit-run, its library and notices
_LIBRARY_ADDERS = {"onnxruntime": _add_library_runtime, "ncnn": _add_ncnn}


def check_limits(precision: str) -> list[str]:
    """The output check's limits: the parity an export must pass (fp32 within 1e-4 of the float
    model; int8 keeping its decisions)."""
    from edgekit.formats.parity import FLOAT_ATOL, INT8_MIN_COSINE, INT8_MIN_TOP1

    if precision == "fp32":
        return ["--max-abs", f"{FLOAT_ATOL:g}"]
    return ["--min-cosine", f"{INT8_MIN_COSINE:g}", "--min-top1", f"{INT8_MIN_TOP1:g}"]


def run_script(model_name: str, target: Target, precision: str) -> str:
    limits = " ".join(check_limits(precision))
    return entry_script(
        f"{model_name} run by edgekit-run (no Python needed)", target.name,
        ["./run.sh              check the outputs against reference.npz: JSON, then PASS: or FAIL: (exit 0 or 1)",
         "./run.sh check [OPTIONS]   the same, with edgekit-run check options (--threads N, --json FILE, ...)",
         "./run.sh bench [OPTIONS]   time it: the edgekit bench JSON document (edgekit-run bench --help)",
         "./run.sh info              the program's inputs, outputs, backends and planned memory",
         "./run.sh verify            sha256sum -c SHA256SUMS, then check"],
        {"check": f'check --model "$here/{model_name}" --reference "$here/reference.npz" \\\n'
                  f'           --threads {target.threads} {limits}',
         "bench": f'bench "$here/{model_name}" --threads {target.threads} --target {target.name}',
         "info": f'info "$here/{model_name}"'})


def entry_script(what: str, target_name: str, usage: list[str], commands: dict[str, str]) -> str:
    """run.sh: POSIX sh, each of ``commands`` (name -> edgekit-run's arguments, the caller's own after
    them, but for info) plus verify (the checksums, then check)."""
    lines = ["#!/bin/sh", f"# edgekit native bundle for {target_name}: {what}.",
             *[f"#   {line}" for line in usage], "set -eu",
             'here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)', "command=${1:-check}",
             '[ "$#" -gt 0 ] && shift',
             # verify goes on to check in this shell: "$0" is "run.sh" (no slash) under `sh run.sh`
             'if [ "$command" = verify ]; then',
             '  if ! bad=$(cd "$here" && sha256sum -c --quiet SHA256SUMS 2>/dev/null); then',
             '    bad=$(printf %s "$bad" | tr "\\n" " " | tr -d "\\000-\\037\\177")',
             '    echo "Error: the bundle\'s files do not match SHA256SUMS: ${bad:-sha256sum -c failed}" >&2; exit 1',
             '  fi', '  command=check', 'fi', 'case "$command" in']
    for name, args in commands.items():
        extra = "" if name == "info" else ' "$@"'
        lines.append(f'  {name}) exec "$here/{RUNNER}" {args}{extra} ;;')
    names = ", ".join([*commands, "verify"][:-1]) + " or verify"
    lines += [f'  *) echo "Error: unknown command $command; use {names}" >&2; exit 2 ;;', "esac", ""]
    return "\n".join(lines)


def host_check(work: Path, model_name: str, fmt: str, target: Target) -> dict:
    """The host's figures for the bundle's model: the bundled runner itself when it was built for
    this host, else the board package's Python runtime on the same program."""
    if target.arch != host_arch():
        from edgekit.bundle.host_check import python_check

        return {**python_check(work, model_name, fmt), "by": "python runtime (the runner is built for "
                                                              f"{target.arch})"}
    argv = [str(work / RUNNER), "check", "--model", str(work / model_name), "--reference", str(work / "reference.npz"),
            "--threads", "1"]
    stdout = run_on_host(argv, f"the native output check of {model_name}", f"the bundled {RUNNER}")

    try:
        doc, _ = read_output(stdout)
    except ValueError:
        raise EdgekitError(f"the native output check of {model_name} printed no JSON") from None
    return {**{key: doc[key] for key in ("machine", "runtime", "batches", "max_abs", "cosine", "top1_agreement",
                                          "outputs_sha256") if key in doc}, "by": RUNNER}


def run_on_host(argv: list[str], what: str, runner: str) -> str:
    """stdout of ``argv`` (an edgekit-run command on this host); EdgekitError with its last error line."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EdgekitError(f"{what} did not finish within {CHECK_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise EdgekitError(f"{runner} fails on this host: "
                           f"{lines[-1].removeprefix('Error: ') if lines else f'exit status {done.returncode}'}")
    return done.stdout


def bundle_size(folder: Path) -> int:
    """Bytes on disk of every file in the bundle folder (what the board must hold)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def is_native(info: dict) -> bool:
    return (info.get("runtime") or {}).get("name") in (RUNTIME_NAME, *LIBRARY_RUNTIMES.values()) \
        and isinstance(info.get("native"), dict)

