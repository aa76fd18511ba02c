"""Local benchmarks: each model is timed in its own runner process; several models interleave.

Every model runs in a fresh ``sys.executable`` running the board's runner (``edgekit.board.runner``,
the same code that goes to devices), so peak RSS is per model and an ONNX model is timed in a process
that never imported torch. With several models, all runners start in ``--serve`` mode and this
process asks them for blocks of timed calls in turn, so drift of the machine (heat, other load)
hits every model alike.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from edgekit.formats.artifacts import MANIFEST_NAME, load_manifest, model_file_for
from edgekit.bench.launch import (
    MIN_BLOCK_S,
    RUNNER_COMMAND,
    BenchModel,
    Progress,
    document,
    run_interleaved,
    run_plain,
    to_result,
)
from edgekit.records.result import BenchResult
from edgekit.board.errors import BoardUsageError
from edgekit.board.manifest import detect_format
from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.targets import Target, load_target
from edgekit.core.threads import resolve_threads  # one rule for bench, generate and serve (re-exported here)
from edgekit import formats
from edgekit.bundle import layout, native
from edgekit.core import handlers
from edgekit.core.bounds import check_runs, check_threads, check_timeout
from edgekit.emulate.sandbox import BUNDLE, WORK, bundle_sandbox
from edgekit.native.toolchain import host_arch

MAX_PROCESSES = 64  # worker processes per model (pyperf uses 20)


def bench(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    target: Target | str | None = None,
    threads: int | None = None,
    warmup: int = 10,
    min_runs: int = 50,
    min_time_s: float = 1.0,
    max_runs: int = 100_000,
    batch: int = 1,
    shapes: Mapping[str, Sequence[int]] | None = None,
    input_file: str | os.PathLike | None = None,
    block_size: int = 10,
    timeout_s: float = 600.0,
    progress: Progress | None = None,
    processes: int = 1,
    reference: bool = False,
    lm_tokens: int = 32,
    format_entries: Mapping[str, formats.Format] | None = None,
) -> list[BenchResult]:
    """Time each model on this machine; one result per path, in order.

    ``format_entries``: {name: entry} of formats the caller resolved already (the pipeline's); the others
    are looked up once each.

    ``paths`` are model files (.onnx, TorchScript .pt, ExecuTorch .pte) or artifact folders holding one model.
    ``threads``: explicit wins; else the target's, capped at this host's usable cores; else all
    of them. Runs go on until both ``min_runs`` and ``min_time_s`` (summed call time) are reached,
    or ``max_runs``. With several models they interleave in turns of at least ``block_size`` calls
    and MIN_BLOCK_S seconds; each turn starts with one untimed call, and a runner hands over only
    once its worker threads stop spinning, so no model is timed beside another's busy threads.
    ``timeout_s`` bounds each runner process's life (with several models: the whole session).
    ``processes``: time each model in this many fresh worker processes, one round each (every
    round interleaves all models); ``min_runs``/``min_time_s`` are shared out among the rounds,
    and each result carries a ``spread`` whose confidence interval includes the between-process
    variance (edgekit.bench.workers). ``reference``: also time a fixed reference workload
    (edgekit.bench.reference) in every round and record its per-round medians in each result's
    ``reference``, so a regression gate can normalise away the machine's state.
    Language-model artifacts also get ``tokens_per_s``: ``lm_tokens`` tokens generated greedily
    (``edgekit.llm.tokens_per_s``, through ``edgekit.core.handlers``; 0 skips it).
    Raises UsageError for bad settings or inputs the model rejects, BenchError when a runner
    fails or times out.
    """
    _check_settings(threads=threads, warmup=warmup, min_runs=min_runs, min_time_s=min_time_s,
                    max_runs=max_runs, batch=batch, block_size=block_size, timeout_s=timeout_s)
    if isinstance(processes, bool) or not isinstance(processes, int) or not 1 <= processes <= MAX_PROCESSES:
        raise UsageError(f"processes must be an integer within 1..{MAX_PROCESSES}, got {processes!r}")
    models = [resolve_model(p) for p in _as_list(paths)]
    shape_args = _shape_args(shapes)
    if input_file is not None:
        if shape_args:
            raise UsageError("give input shapes or an input file, not both (the arrays carry their shapes)")
        if not Path(input_file).is_file():
            raise InputFileError(f"input file not found: {input_file}")
    tgt = load_target(target) if isinstance(target, (str, os.PathLike)) else target
    n_threads, notes = resolve_threads(threads, tgt)
    progress = progress or (lambda index, runs: None)

    common = [
        "--threads", str(n_threads), "--warmup", str(warmup), "--min-runs", str(min_runs),
        "--min-time", repr(float(min_time_s)), "--max-runs", str(max_runs), "--batch", str(batch),
    ]
    timing_args = list(common)  # what the reference workload shares with the models
    for text in shape_args:
        common += ["--shape", text]
    if input_file is not None:
        common += ["--input", str(input_file)]
    if tgt is not None:
        common += ["--target", tgt.name]
    with contextlib.ExitStack() as stack:  # sandboxes of native bundles, removed when the runs end
        specs = _format_entries(models, format_entries)
        argvs = [_runner_argv(m, common, tgt, specs.get(m.format)) if m.runner is None else
                 _fenced_argv(stack, m, common, input_file, n_threads) for m in models]
        if any(m.runner is not None for m in models):
            notes = notes + ["the native bundle's edgekit-run ran in a sandbox (edgekit.emulate.sandbox): a copy of the "
                             "bundle, no host files, no network, user 65534"]
        env = {**os.environ, "OMP_NUM_THREADS": str(n_threads)}
        from edgekit.bench import workers  # several processes per model: rounds, merging

        if reference:
            results = workers.with_reference(models, argvs, timing_args, env, processes=processes, min_runs=min_runs,
                                             min_time_s=min_time_s, max_runs=max_runs, block_size=block_size,
                                             timeout_s=timeout_s, progress=progress)
            notes = notes + [f"{processes} worker process{'es' if processes > 1 else ''} per model and a reference "
                             "workload timed in every round (reference)"]
        elif len(models) == 1 and processes == 1:
            progress(0, 0)
            results = [run_plain(models[0], argvs[0], env, timeout_s)]
            progress(0, results[0].timing.runs)
        elif processes == 1:
            raws, _ = run_interleaved(models, argvs, env, min_runs=min_runs, min_time_s=min_time_s,
                                      max_runs=max_runs, block_size=block_size, timeout_s=timeout_s,
                                      progress=progress)
            results = [to_result(m, document(raw)) for m, raw in zip(models, raws)]
        else:
            results = workers.run_processes(models, argvs, env, processes=processes, min_runs=min_runs,
                                            min_time_s=min_time_s, max_runs=max_runs, block_size=block_size,
                                            timeout_s=timeout_s, progress=progress)
            notes = notes + [f"{processes} worker processes per model, one round each; timing pools their calls, "
                             "spread holds each process's median"]
        if len(models) > 1:
            others = len(models) - 1
            notes = notes + [f"interleaved with {others} other model{'s' if others > 1 else ''} in turns of "
                             f">= {block_size} calls and >= {MIN_BLOCK_S * 1000:g} ms"]
        results = [replace(r, notes=tuple(notes) + r.notes) for r in results]
    if lm_tokens:
        results = handlers.handler(handlers.GENERATION_RATES)(models, results, n_threads, lm_tokens)
    return results


def resolve_model(path: str | os.PathLike) -> BenchModel:
    """A model file (checked against its manifest when it has one) or an artifact folder's one model."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"model not found: {path}")
    entry = None
    if path.is_dir():
        folder, _, entry = model_file_for(path)
        path = folder / entry.path
    elif (path.parent / MANIFEST_NAME).is_file():
        folder, manifest = load_manifest(path)  # verifies every listed file's checksum
        entry = next((f for f in manifest.files if (folder / f.path).resolve() == path.resolve()), None)
    if entry is not None and entry.format == "checkpoint":
        raise UsageError(f"{path} is a training checkpoint, not a runnable model; export it first")
    if entry is not None:
        return BenchModel(path, entry.format, entry, native_runner(path.parent))
    try:
        return BenchModel(path, detect_format(path, None, None))
    except BoardUsageError as exc:
        raise UsageError(str(exc)) from None


def native_runner(folder: Path) -> Path | None:
    """A native bundle's runner, when ``folder`` is one; a UsageError when it was built for another machine."""
    if not layout.is_bundle(folder):
        return None
    info = layout.read_bundle_json(folder)
    if not native.is_native(info):
        return None
    arch = info["native"].get("arch")
    if arch != host_arch():
        raise UsageError(f"{folder} is a native bundle built for {arch}; this host is {host_arch()}: time it on the "
                         f"board (edgekit bench {folder} --host USER@BOARD), or check it with edgekit verify {folder} --emulate")
    return folder / native.RUNNER


# ---------------------------------------------------------------------------------------------


def _as_list(paths) -> list:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise UsageError("no models to benchmark")
    return items


def _check_settings(**values) -> None:
    minimum = {"threads": 1, "warmup": 0, "min_runs": 1, "max_runs": 1, "batch": 1, "block_size": 1}
    for name, low in minimum.items():
        value = values[name]
        if value is None and name == "threads":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise UsageError(f"{name.replace('_', '-')} must be an integer of at least {low}, got {value!r}")
    for name in ("min_time_s", "timeout_s"):
        value = values[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise UsageError(f"{name.replace('_', '-')} must be a number of seconds, 0 or more, got {value!r}")
    if values["timeout_s"] == 0:
        raise UsageError("timeout-s must be more than 0")

    check_threads(values["threads"])
    check_timeout(values["timeout_s"], "timeout-s")
    check_runs(values["min_runs"], "min-runs")
    check_runs(values["max_runs"], "max-runs")
    check_runs(values["warmup"], "warmup", low=0)
    if values["min_time_s"] > 0:
        check_timeout(values["min_time_s"], "min-time-s")
    if values["max_runs"] < values["min_runs"]:
        raise UsageError(f"max-runs ({values['max_runs']}) must be at least min-runs ({values['min_runs']})")


def _shape_args(shapes: Mapping[str, Sequence[int]] | None) -> list[str]:
    out = []
    for name, dims in (shapes or {}).items():
        try:
            dims = [int(d) for d in dims]
        except (TypeError, ValueError):
            raise UsageError(f"shape of input {name!r} must be a list of integers, got {dims!r}") from None
        if not name or not dims or any(d <= 0 for d in dims):
            raise UsageError(f"shape of input {name!r} must be positive dimensions, got {dims!r}")
        out.append(f"{name}={'x'.join(str(d) for d in dims)}")
    return out


def _fenced_argv(stack: contextlib.ExitStack, model: BenchModel, common: list[str], input_file, threads: int) -> list[str]:
    """A native bundle's own ``edgekit-run`` (whatever its author put there) inside a sandbox holding a
    copy of the bundle and the input file, with this host's libraries it names."""
    folder = model.runner.parent
    box = stack.enter_context(bundle_sandbox(folder, [native.RUNNER], arch=host_arch(), libraries_from=Path("/")))
    args = list(common)
    if input_file is not None:
        at = args.index("--input") + 1
        name = "input" + Path(input_file).suffix[:16]
        shutil.copyfile(input_file, box.root / WORK.lstrip("/") / name)
        args[at] = f"{WORK}/{name}"
    inside = f"{BUNDLE}/{model.path.resolve().relative_to(folder.resolve()).as_posix()}"
    return box.standalone([f"{BUNDLE}/{native.RUNNER}", "bench", inside, *args], {"OMP_NUM_THREADS": str(threads)})


def _format_entries(models: list[BenchModel], given: Mapping[str, formats.Format] | None) -> dict:
    """{name: entry} of the table's formats among ``models``, each resolved once (``given``'s where it has them)."""
    given, known = given or {}, formats.names()
    names = dict.fromkeys(m.format for m in models if m.format in known)
    return {name: given.get(name) or formats.get(name) for name in names}


def _runner_argv(model: BenchModel, common: list[str], target: Target | None,
                 spec: formats.Format | None = None) -> list[str]:
    """``spec``: the model's format entry (None: a format outside the table)."""
    if model.runner is not None:  # edgekit-run speaks the runner's options and protocol
        return [str(model.runner), "bench", str(model.path), *common]
    argv = [*RUNNER_COMMAND, str(model.path), "--format", model.format, *common]
    if spec is not None and spec.quantization.packed_engine and target is not None:
        details = model.entry.details if model.entry else {}
        quantized = model.entry is None or model.entry.precision != "fp32"
        if quantized and not details.get("quantized_engine"):
            argv += ["--engine", target.quantized_engine]  # the manifest's engine, when set, stays in charge
    return argv
