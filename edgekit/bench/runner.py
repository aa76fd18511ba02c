#!/usr/bin/env python3
"""edgekit benchmark runner: time one model file with onnxruntime, TorchScript or ExecuTorch.

STANDALONE. This file is copied as-is into device bundles and run on boards that have only
python + numpy + onnxruntime (or torch, or torch + executorch for a ``.pte`` program). Module
level imports only the standard library;
numpy and the runtime load when a benchmark starts. Never import edgekit here. (It is one
file, longer than the house limit, because it must travel alone.)

    python runner.py MODEL_FILE [--threads N] [--warmup N] [--min-runs N] [--min-time S]
        [--max-runs N] [--batch N] [--shape NAME=1x1x8x8 ...] [--input FILE.npz]
        [--engine qnnpack] [--format onnx|torchscript|executorch] [--json OUT.json] [--serve]
        [--emulated] [--mode local|remote|emulated] [--target NAME] [--seed N]

Writes ``{"schema": "edgekit.bench", "schema_version": 1, "results": [ONE RESULT]}`` to
``--json`` (atomically) or to stdout. stdout carries only that JSON (with ``--serve``: only
protocol lines); diagnostics go to stderr. Exit codes: 0 ok, 1 benchmark failed, 2 usage error.

``--threads`` sets onnxruntime's intra-op threads, torch's, or the size of ExecuTorch's XNNPACK
threadpool (one per process, sized before the program loads). An ExecuTorch program is
memory-planned for its largest shapes: inputs past those bounds are a usage error.

Serve protocol (``--serve``), one JSON object per line. After loading, the first run and the
warm-up, the runner says ``{"event": "ready", "load_ms": .., "first_run_ms": .., "input_shapes":
{..}, "pid": ..}``. Then, on stdin:
    {"cmd": "run", "n": 10, "warm": 1}  ->  {"ok": true, "ns": [int, ...], "settle_ms": ..}
        ``warm`` untimed calls (default 0), then n timed calls (ns each); the reply comes once
        the runtime's worker threads have stopped spinning (see ``settle``)
    {"cmd": "finish"}  ->  {"ok": true, "result": {...}}
        the full result (as in the document's "results"); then the runner exits 0
A bad command gets ``{"ok": false, "error": "..."}`` and the runner keeps serving; end of
input ends the runner (exit 0) without a result.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import hashlib
import io
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from pathlib import Path

# Duplicated from edgekit/bench/result.py (this file may not import edgekit); a test keeps them equal.
BENCH_SCHEMA = "edgekit.bench"
BENCH_SCHEMA_VERSION = 1

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
FORMATS = ("onnx", "torchscript", "executorch")
MODES = ("local", "remote", "emulated")
MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "edgekit.manifest"
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".ptl", ".torchscript")
PTE_SUFFIXES = (".pte",)
# An ExecuTorch program is a flatbuffer whose file identifier, at bytes 4..8, is "ET" and a
# two-digit schema version (executorch's schema/program.fbs: file_identifier "ET12").
PTE_IDENTIFIER = b"ET"
# ExecuTorch ScalarType codes (as c10's) of the input dtypes a runner can make.
ET_DTYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
             7: "float64", 11: "bool"}
MIB = 1024 * 1024
MAX_BLOCK = 1_000_000  # the most calls one serve "run" command may ask for

# ISA flags that change which kernels the runtimes pick (ARM, then x86), in /proc/cpuinfo spelling.
ISA_FLAGS = (
    "neon", "asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "sve2",
    "avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
)

ONNX_DTYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(bool)": "bool",
}


INPUT_MEMORY_SHARE = 0.5  # random inputs may take at most this share of the memory available now


class RunnerUsageError(Exception):
    """The command line or an input file is wrong (exit 2)."""


class RunnerError(Exception):
    """The benchmark itself failed: the model would not load or run (exit 1)."""


# ---------------------------------------------------------------------------------------------
# Statistics (pure; edgekit.bench.stats re-exports these)


def percentile(sorted_values, q: float) -> float:
    """The q-th percentile of ascending ``sorted_values`` by linear interpolation.

    Same definition as ``numpy.percentile(values, q)`` (method "linear"): the value at
    fractional rank ``(n - 1) * q / 100``.
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no samples")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within 0..100, got {q!r}")
    rank = (n - 1) * q / 100.0
    lo = int(math.floor(rank))
    hi = min(lo + 1, n - 1)
    frac = rank - lo
    a, b = float(sorted_values[lo]), float(sorted_values[hi])
    return a + (b - a) * frac


def summarize_ns(samples_ns) -> dict:
    """Timing summary of per-call durations (ns) in milliseconds; ``std`` is the population std.

    ``total_s`` is the sum of the timed calls (not the wall time around them), so it means the
    same whether the runs were back to back or interleaved with other models.
    """
    if not samples_ns:
        raise ValueError("no timed runs")
    ms = sorted(s / 1e6 for s in samples_ns)
    n = len(ms)
    mean = math.fsum(ms) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in ms) / n)
    return {
        "p50": percentile(ms, 50), "p90": percentile(ms, 90),
        "p95": percentile(ms, 95), "p99": percentile(ms, 99),
        "mean": mean, "std": std, "min": ms[0], "max": ms[-1],
        "runs": n, "total_s": math.fsum(samples_ns) / 1e9,
    }


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"input=1x1x8x8"`` -> ``("input", (1, 1, 8, 8))``; raises ValueError with a clear message."""
    name, sep, dims = str(text).partition("=")
    name, dims = name.strip(), dims.strip()
    if not sep or not name or not dims:
        raise ValueError(f"malformed shape {text!r}; expected NAME=DIMS such as input=1x1x8x8")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        raise ValueError(f"malformed shape {text!r}; dimensions must be integers joined by 'x'") from None
    if any(d <= 0 for d in shape):
        raise ValueError(f"malformed shape {text!r}; every dimension must be positive")
    return name, shape


# ---------------------------------------------------------------------------------------------
# Memory and host facts (missing facts are None, never an error)


def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_mb() -> float | None:
    """Resident memory of this process now (MiB): psutil when importable, else /proc/self/status."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / MIB
    except ImportError:
        kb = _proc_status_kb("VmRSS")
        return None if kb is None else kb / 1024


def peak_rss_mb() -> float | None:
    """Peak resident memory of this process (MiB).

    psutil cannot help: it exposes no peak on Linux (``peak_wset`` is Windows-only). On Linux we
    read VmHWM, the high-water mark of this process's own address space, rather than
    ``getrusage().ru_maxrss``: at exec the kernel folds the parent's high-water mark into the
    child's ru_maxrss (fs/exec.c, setmax_mm_hiwater_rss), so a runner spawned by a 1 GB parent
    would report >= 1 GB. Elsewhere ru_maxrss is the fallback (kB on Linux, bytes on macOS).
    """
    kb = _proc_status_kb("VmHWM")
    if kb is not None:
        return kb / 1024
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024


def usable_cores() -> int:
    """Logical cores this process may run on (its CPU affinity where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0)) or (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read().replace("\x00", "").strip()
        return text or None
    except OSError:
        return None


def _cpuinfo() -> dict[str, str]:
    """First value of each key in /proc/cpuinfo (empty where there is none)."""
    info: dict[str, str] = {}
    for line in (_read_text("/proc/cpuinfo") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in info:
            info[key.strip()] = value.strip()
    return info


def _dist_version(name: str) -> str | None:
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:  # noqa: BLE001 - PackageNotFoundError, or a broken install: a missing fact
        return None


# Bits of `vcgencmd get_throttled` (Raspberry Pi firmware documentation).
_THROTTLE_BITS = {
    0: "under-voltage", 1: "arm-frequency-capped", 2: "throttled", 3: "soft-temperature-limit",
    16: "under-voltage-occurred", 17: "arm-frequency-capping-occurred",
    18: "throttling-occurred", 19: "soft-temperature-limit-occurred",
}


def _pi_throttled() -> dict | None:
    binary = shutil.which("vcgencmd")
    if binary is None:
        return None
    try:
        out = subprocess.run(
            [binary, "get_throttled"], capture_output=True, text=True, timeout=3, check=False
        ).stdout.strip()
        raw = out.partition("=")[2].strip()
        value = int(raw, 16)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return {"raw": raw, "flags": [name for bit, name in _THROTTLE_BITS.items() if value >> bit & 1]}


def _number(text: str | None, scale: float) -> float | None:
    try:
        return None if text is None else int(text) / scale
    except ValueError:
        return None


def host_facts(emulated: bool = False) -> dict:
    """What shapes a timing on this machine. No hostname (privacy); unknown facts are None.

    Under user-mode emulation /proc and /sys describe the emulating host, not the emulated CPU,
    so those facts are left out (None) rather than reported wrongly.
    """
    info = {} if emulated else _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    board = None if emulated else _read_text("/proc/device-tree/model") or info.get("Model")
    return {
        "machine": platform.machine() or None,
        "cpu_model": info.get("model name") or info.get("Model") or info.get("Hardware")
        or (None if emulated else platform.processor() or None),
        "board": board,
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "isa": [flag for flag in ISA_FLAGS if flag in flags],
        "os": platform.platform(),
        "python": platform.python_version(),
        "runtimes": {name: _dist_version(name) for name in ("numpy", "onnxruntime", "torch", "executorch")},
        "cpufreq_governor": None if emulated else _read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "cpu_max_mhz": None if emulated else _number(_read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"), 1000),
        "soc_temp_c": None if emulated else _number(_read_text("/sys/class/thermal/thermal_zone0/temp"), 1000),
        "throttled": None if emulated else _pi_throttled(),
        "emulated": bool(emulated),
    }


# ---------------------------------------------------------------------------------------------
# The manifest beside the model (read raw: edgekit's own loader is not available on a device)


def read_manifest_entry(model: Path) -> tuple[dict | None, dict | None, list[str]]:
    """(manifest, this file's entry, notes) from ``manifest.json`` beside ``model``, if it lists it."""
    path = model.parent / MANIFEST_NAME
    if not path.is_file():
        return None, None, []
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunnerUsageError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        return None, None, [f"{path} is not an edgekit manifest; ignored"]
    for entry in manifest.get("files") or []:
        if isinstance(entry, dict) and (model.parent / str(entry.get("path", ""))).resolve() == model.resolve():
            return manifest, entry, []
    return None, None, [f"{path} does not list {model.name}; ignored"]


def detect_format(model: Path, entry: dict | None, override: str | None) -> str:
    if override:
        return override
    listed = (entry or {}).get("format")
    if listed == "checkpoint":
        raise RunnerUsageError(f"{model} is a training checkpoint, not a runnable model; export it first")
    if listed in FORMATS:
        return listed
    suffix = model.suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix in PTE_SUFFIXES or is_executorch_program(model):
        return "executorch"
    if suffix in TORCHSCRIPT_SUFFIXES or zipfile.is_zipfile(model):
        return "torchscript"
    raise RunnerUsageError(f"cannot tell the runtime for {model.name}; expected .onnx, TorchScript .pt or "
                           "ExecuTorch .pte (or pass --format)")


def is_executorch_program(path: Path) -> bool:
    """Whether ``path`` starts like an ExecuTorch program (its flatbuffer file identifier)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return len(head) == 8 and head[4:6] == PTE_IDENTIFIER and head[6:8].isdigit()


def model_info(model: Path, fmt: str, entry: dict | None) -> dict:
    entry = entry or {}
    metrics = entry.get("metrics") if isinstance(entry.get("metrics"), dict) else {}
    details = entry.get("details") if isinstance(entry.get("details"), dict) else {}

    def metric(key):
        value = metrics.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    digest = hashlib.sha256()
    with open(model, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    size = model.stat().st_size
    for data in entry.get("data_files") or []:  # ONNX external data: part of the model's size
        name = data.get("path") if isinstance(data, dict) else None
        if isinstance(name, str) and name and os.path.basename(name) == name and (model.parent / name).is_file():
            size += (model.parent / name).stat().st_size
    return {
        "path": str(model), "format": fmt, "bytes": size, "sha256": digest.hexdigest(),
        "precision": str(entry.get("precision") or "fp32"), "variant": str(details.get("variant") or ""),
        "accuracy": metric("accuracy"), "float_accuracy": metric("float_accuracy"),
    }


# ---------------------------------------------------------------------------------------------
# Runtimes: each loads a model, names its inputs, and binds arrays into (function, arguments):
# the timed loop calls ``function(*arguments)`` exactly as a user's own loop would.


class OnnxModel:
    format = "onnx"

    def __init__(self, path: Path, threads: int, engine: str | None):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # errors only: ORT's warnings would land in the user's terminal
        try:
            self.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT raises its own pybind exception types
            raise RunnerError(f"onnxruntime cannot load {path.name}: {_first_line(exc)}") from None
        self.info = {"name": "onnxruntime", "version": ort.__version__, "threads": threads, "engine": None,
                     "providers": self.session.get_providers()}

    def input_specs(self) -> list[dict]:
        specs = []
        for arg in self.session.get_inputs():
            dims = list(arg.shape or [])
            specs.append({
                "name": arg.name,
                "shape": [d if isinstance(d, int) and d > 0 else None for d in dims],
                "dtype": ONNX_DTYPES.get(arg.type, "float32"),
                "dynamic_axes": {i: (d if isinstance(d, str) else f"dim{i}") for i, d in enumerate(dims)
                                 if not (isinstance(d, int) and d > 0)},
            })
        return specs

    def bind(self, arrays: dict):
        return self.session.run, (None, dict(arrays))

    def context(self):
        return contextlib.nullcontext()


class TorchScriptModel:
    format = "torchscript"

    def __init__(self, path: Path, threads: int, engine: str | None):
        import torch

        self.torch = torch
        if engine:
            supported = list(torch.backends.quantized.supported_engines)
            if engine not in supported:
                raise RunnerError(f"quantized engine {engine!r} is not available in this torch (have: {', '.join(supported)})")
            torch.backends.quantized.engine = engine
        torch.set_num_threads(threads)
        with contextlib.suppress(RuntimeError):  # only settable before the first parallel work
            torch.set_num_interop_threads(1)
        if not zipfile.is_zipfile(path):
            raise RunnerError(f"cannot load {path.name} as TorchScript: not a zip archive (truncated, or another format)")
        try:
            self.module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError/ValueError/... for bad files
            raise RunnerError(f"cannot load {path.name} as TorchScript: {_first_line(exc)}") from None
        self.module.eval()
        self.info = {"name": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
                     "engine": torch.backends.quantized.engine, "providers": ["cpu"]}

    def input_specs(self) -> list[dict]:
        try:
            args = self.module.forward.schema.arguments[1:]  # drop self
        except (AttributeError, RuntimeError):
            return []
        return [{"name": a.name, "shape": None, "dtype": "float32", "dynamic_axes": {}} for a in args]

    def bind(self, arrays: dict):
        return self.module, tuple(self.torch.from_numpy(a) for a in arrays.values())

    def context(self):
        return self.torch.inference_mode()


class ExecuTorchModel:
    """An ExecuTorch program (``.pte``) through ExecuTorch's runtime; its method takes torch tensors."""

    format = "executorch"

    def __init__(self, path: Path, threads: int, engine: str | None):
        if not is_executorch_program(path):
            raise RunnerError(f"cannot load {path.name} as an ExecuTorch program: no ExecuTorch file identifier "
                              "(truncated, or another format)")
        self.log: list[str] = []  # what the runtime wrote on stderr while loading and on the first run
        self.info = import_executorch(threads)
        failure = None
        with native_stderr(self.log):
            et = _executorch_native()
            try:
                self.program = et._load_program(str(path), enable_etdump=False, debug_buffer_size=0,
                                                program_verification=et.Verification.InternalConsistency)
                self.method = self.program.load_method("forward")  # must not outlive self.program
                meta = self.method.method_meta()
                self.planned = [meta.input_tensor_meta(i) for i in range(meta.num_inputs())]
            except Exception as exc:  # noqa: BLE001 - the runtime raises RuntimeError/ValueError/...
                failure = _first_line(exc)
        if failure is not None:
            raise RunnerError(f"cannot load {path.name} as an ExecuTorch program: {failure}{native_detail(self.log)}")

    def input_specs(self) -> list[dict]:
        """input0..N at the planned sizes; axis 0 taken as the batch axis (the manifest, when there is one, wins)."""
        specs = []
        for index, info in enumerate(self.planned):
            sizes = [int(d) for d in info.sizes()]
            code = int(info.dtype())
            specs.append({
                "name": f"input{index}",
                "shape": [None, *sizes[1:]] if sizes else [],
                "dtype": ET_DTYPES.get(code, f"ExecuTorch scalar type {code}"),
                "dynamic_axes": {0: "batch"} if sizes else {},
                "bounded": True,  # the planned sizes are upper bounds
            })
        return specs

    def bind(self, arrays: dict):
        """Torch tensors for the method, checked against its memory plan first (past it the runtime
        refuses with an error code only)."""
        import numpy as np
        import torch

        if len(arrays) != len(self.planned):
            raise RunnerUsageError(f"the program takes {len(self.planned)} inputs; {len(arrays)} given")
        tensors = []
        for (name, array), info in zip(arrays.items(), self.planned):
            bound = [int(d) for d in info.sizes()]
            want = ET_DTYPES.get(int(info.dtype()))
            if array.ndim != len(bound) or any(got > most for got, most in zip(array.shape, bound)):
                raise RunnerUsageError(
                    f"input {name!r} of shape {'x'.join(map(str, array.shape))} does not fit the program, planned "
                    f"for at most {'x'.join(map(str, bound))} (export it with larger bounds, or lower --batch/--shape)")
            if want is None or array.dtype != np.dtype(want):
                raise RunnerUsageError(f"input {name!r} is {array.dtype}; the program takes {want or info.dtype()}")
            tensors.append(torch.from_numpy(np.ascontiguousarray(array)))
        return self.method, (tensors,)

    def context(self):
        return native_stderr(self.log)


def import_executorch(threads: int) -> dict:
    """Import ExecuTorch's runtime and size its XNNPACK threadpool; the runtime facts for the result.

    The pool is one per process and XNNPACK keeps a pointer to it in every loaded delegate, so it
    is resized only before the first program loads (the native module not yet imported): a resize
    under a loaded delegate would free the pool it uses. Otherwise the size in effect is recorded.
    """
    fresh = "executorch.extension.pybindings._C" not in sys.modules
    log: list[str] = []
    with native_stderr(log):  # its CPU probing logs to stderr
        try:
            et = _executorch_native()
        except ImportError as exc:
            raise RunnerError(f"the ExecuTorch runtime is not installed here (pip install executorch): {_first_line(exc)}") from None

        count = getattr(et, "_threadpool_get_thread_count", None)
        reset = getattr(et, "_unsafe_reset_threadpool", None)
        info = {"name": "executorch", "version": _dist_version("executorch"), "threads": None, "engine": None,
                "providers": [b for b in ("XnnpackBackend",) if et._is_available(backend_name=b)]}
        if count is None or reset is None:
            info["threads_note"] = "this executorch cannot size its threadpool; it uses its default (one per performance core)"
            return info
        if count() != threads:
            if fresh:
                reset(threads)
            else:
                info["threads_note"] = "the threadpool was in use in this process already; not resized"
        info["threads"] = int(count())
    return info


def _executorch_native():
    """ExecuTorch's native runtime module. Its public wrappers (``executorch.runtime``,
    ``portable_lib``) also import the export toolchain, only to warn that the API is experimental:
    about 3 s and 140 MB more on a host, which a board pays too (and which peak RSS would count)."""
    import torch  # noqa: F401 - loads libtorch, which the extension links against

    try:
        from executorch.extension.pybindings import _C as module
    except ImportError:  # another executorch layout: the public wrapper re-exports the same functions
        from executorch.extension.pybindings import portable_lib as module
    return module


@contextlib.contextmanager
def native_stderr(lines: list):
    """Collect what the runtime logs meanwhile into ``lines``: ExecuTorch's Python bindings send its
    log (CPU probing, the cause behind an error code) to ``sys.stderr``, native code writes on fd 2.
    Passed through with EDGEKIT_DEBUG."""
    if os.environ.get("EDGEKIT_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved_fd, saved_stream, buffer = os.dup(2), sys.stderr, io.StringIO()
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            sys.stderr = buffer
            try:
                yield
            finally:
                sys.stderr = saved_stream
                os.dup2(saved_fd, 2)
                sink.seek(0)
                text = buffer.getvalue() + sink.read(1 << 20).decode("utf-8", errors="replace")
                lines.extend(line.strip() for line in text.splitlines() if line.strip())
    finally:
        os.close(saved_fd)


def native_detail(lines: list) -> str:
    """The runtime's first log line (the cause; what follows unwinds it), as a suffix for a one-line message."""
    logged = [line for line in lines if line.startswith("[")]
    return f" ({logged[0][:200]})" if logged else ""


RUNTIMES = {"onnx": OnnxModel, "torchscript": TorchScriptModel, "executorch": ExecuTorchModel}


# ---------------------------------------------------------------------------------------------
# Inputs


def _resolve_specs(model_specs: list[dict], manifest: dict | None, fmt: str) -> tuple[list[dict], str, list[str]]:
    """The input specs to feed, where they came from, and notes. The manifest wins when it fits."""
    listed = []
    if manifest and isinstance(manifest.get("inputs"), list):
        for raw in manifest["inputs"]:
            try:
                listed.append({
                    "name": str(raw["name"]),
                    "shape": [None if d is None else int(d) for d in raw["shape"]],
                    "dtype": str(raw.get("dtype", "float32")),
                    "dynamic_axes": {int(k): str(v) for k, v in dict(raw.get("dynamic_axes") or {}).items()},
                    "value_range": _value_range(raw.get("value_range")),
                })
            except (KeyError, TypeError, ValueError) as exc:
                raise RunnerUsageError(f"malformed input spec in {MANIFEST_NAME}: {exc!r}") from None
    if not listed:
        if fmt == "executorch":
            note = (f"no {MANIFEST_NAME} lists the program: axis 0 of each input is taken as its batch axis, "
                    "the other axes at the program's planned (largest) sizes")
            return model_specs, "model", [note]
        return model_specs, "model", []
    if fmt == "onnx" and sorted(s["name"] for s in listed) != sorted(s["name"] for s in model_specs):
        names = ", ".join(s["name"] for s in model_specs)
        return model_specs, "model", [f"{MANIFEST_NAME} inputs do not match the model's ({names}); used the model's"]
    if fmt == "torchscript" and model_specs and len(listed) > len(model_specs):
        raise RunnerUsageError(f"{MANIFEST_NAME} lists {len(listed)} inputs; the model takes {len(model_specs)}")
    if fmt == "executorch" and len(listed) != len(model_specs):  # the manifest names the axes, the program bounds them
        raise RunnerUsageError(f"{MANIFEST_NAME} lists {len(listed)} inputs; the program takes {len(model_specs)}")
    return listed, "manifest", []


def _value_range(raw) -> tuple[float, float] | None:
    """A manifest's ``value_range`` ([low, high) of valid values, e.g. token ids), if usable."""
    try:
        low, high = float(raw[0]), float(raw[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return (low, high) if math.isfinite(low) and math.isfinite(high) and high > low else None


def _dtype(name: str):
    import numpy as np

    try:
        return np.dtype(name)
    except TypeError:
        raise RunnerUsageError(f"unsupported input dtype {name!r}") from None


def _random(shape, dtype, rng, value_range=None):
    """Seeded random data; within ``value_range`` [low, high) when the manifest gives one."""
    if dtype.kind == "f":
        if value_range:
            return rng.uniform(value_range[0], value_range[1], size=shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        low, high = (math.ceil(value_range[0]), math.ceil(value_range[1])) if value_range else (0, 2)
        return rng.integers(low, max(high, low + 1), size=shape).astype(dtype)  # default: safe as ids
    raise RunnerUsageError(f"cannot make random data of dtype {dtype}")


def _check_shape(spec: dict, shape: tuple[int, ...]) -> None:
    known = spec.get("shape")
    if known is None:
        return
    if len(known) != len(shape):
        raise RunnerUsageError(f"input {spec['name']!r} has rank {len(known)}; --shape gives {len(shape)} dims")
    for axis, (want, got) in enumerate(zip(known, shape)):
        if spec.get("bounded") and want is not None and got > want:  # a lone .pte: its planned sizes are bounds
            raise RunnerUsageError(f"input {spec['name']!r} axis {axis} is at most {want}; --shape gives {got}")
        if not spec.get("bounded") and want is not None and want != got:
            raise RunnerUsageError(f"input {spec['name']!r} has fixed axis {axis} = {want}; --shape gives {got}")


def _load_npz(path: str) -> dict:
    import numpy as np

    if not Path(path).is_file():
        raise RunnerUsageError(f"input file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise RunnerUsageError(f"{path} is not a readable .npz of plain arrays ({_first_line(exc)})") from None


def make_inputs(specs: list[dict], shapes: dict, npz: dict | None, batch: int, seed: int) -> tuple[dict, int, list[str]]:
    """Arrays by input name (model order), the batch for throughput, and notes."""
    import numpy as np

    names = [s["name"] for s in specs]
    given = {**(npz or {}), **shapes}
    unknown = [n for n in given if n not in names]
    if unknown:
        source = "--input file" if npz and unknown[0] in npz else "--shape"
        raise RunnerUsageError(f"{source} names input {unknown[0]!r}, which the model does not have (inputs: {', '.join(names) or 'none'})")
    rng = np.random.default_rng(seed)
    arrays, notes = {}, []
    _check_input_memory(specs, shapes, npz, batch)
    for spec in specs:
        name, dtype = spec["name"], _dtype(spec.get("dtype") or "float32")
        if npz is not None:
            if name not in npz:
                raise RunnerUsageError(f"--input file has no array {name!r} (the model's inputs: {', '.join(names)})")
            array = npz[name]
            if array.dtype != dtype:
                notes.append(f"input {name!r} cast from {array.dtype} to {dtype}")
                array = array.astype(dtype)
            arrays[name] = np.ascontiguousarray(array)
            continue
        if name in shapes:
            shape = tuple(shapes[name])
            _check_shape(spec, shape)
        elif spec.get("shape") is None:
            raise RunnerUsageError(f"no shape known for input {name!r} (no {MANIFEST_NAME} beside the model); pass --shape {name}=1x3x224x224")
        else:
            shape = tuple(batch if d is None else d for d in spec["shape"])
        arrays[name] = _random(shape, dtype, rng, spec.get("value_range"))
    first = specs[0] if specs else None
    if first and first.get("shape") and first["shape"][0] is None and arrays[first["name"]].ndim:
        batch = int(arrays[first["name"]].shape[0])
    return arrays, batch, notes


def _available_mb() -> float | None:
    """Memory available to new allocations now (MiB): /proc/meminfo, else psutil, else None."""
    for line in (_read_text("/proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            return _number(line.split()[1], 1024)
    try:
        import psutil

        return psutil.virtual_memory().available / MIB
    except ImportError:
        return None


def _check_input_memory(specs: list[dict], shapes: dict, npz: dict | None, batch: int) -> None:
    """Refuse inputs that could not be allocated (a huge --batch or --shape) before trying."""
    if npz is not None:
        return  # already in memory
    total, largest = 0, ("", ())
    for spec in specs:
        if spec["name"] in shapes:
            shape = tuple(shapes[spec["name"]])
        elif spec.get("shape") is not None:
            shape = tuple(batch if d is None else d for d in spec["shape"])
        else:
            continue
        size = math.prod(shape) * _dtype(spec.get("dtype") or "float32").itemsize
        total += size
        largest = max(largest, (spec["name"], shape), key=lambda item: math.prod(item[1]) if item[1] else 0)
    available = _available_mb()
    if available is None or total / MIB <= available * INPUT_MEMORY_SHARE:
        return
    raise RunnerUsageError(
        f"the inputs need {total / MIB:,.0f} MiB of memory (input {largest[0]!r} of shape "
        f"{'x'.join(str(d) for d in largest[1])}), more than this host can spare ({available:,.0f} MiB available); "
        "lower --batch or --shape"
    )


# ---------------------------------------------------------------------------------------------
# Measurement


@contextlib.contextmanager
def _gc_paused(collect: bool = True):
    """Keep the cyclic GC out of the timed region (as timeit does), collecting first if asked."""
    enabled = gc.isenabled()
    if collect:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def timed_calls(fn, args: tuple, n: int) -> list[int]:
    """Call ``fn(*args)`` n times; per-call wall time in ns (perf_counter_ns).

    Nothing but the call sits between the two clock reads. The one- and two-argument cases are
    spelled out: ``fn(a, b)`` costs ~40 ns less than ``fn(*args)``, about 1 % of a 4 us model.
    """
    clock = time.perf_counter_ns
    out = [0] * n
    if len(args) == 2:
        a, b = args
        for i in range(n):
            start = clock()
            fn(a, b)
            out[i] = clock() - start
    elif len(args) == 1:
        (a,) = args
        for i in range(n):
            start = clock()
            fn(a)
            out[i] = clock() - start
    else:
        for i in range(n):
            start = clock()
            fn(*args)
            out[i] = clock() - start
    return out


def timed_until(fn, args: tuple, min_runs: int, min_time_s: float, max_runs: int, chunk: int = 1000) -> list[int]:
    """Timed calls until both ``min_runs`` and ``min_time_s`` (summed call time) are reached, or ``max_runs``.

    Runs in chunks sized from the mean so far, so the stopping test stays out of the timed loop
    and a slow model does not overshoot the time by more than about one call.
    """
    min_ns = min_time_s * 1e9
    samples = timed_calls(fn, args, min(min_runs, max_runs))
    total = sum(samples)
    while len(samples) < max_runs and total < min_ns:
        mean = total / len(samples)
        n = max(1, min(chunk, max_runs - len(samples), math.ceil((min_ns - total) / mean) if mean > 0 else chunk))
        block = timed_calls(fn, args, n)
        samples += block
        total += sum(block)
    return samples


def _other_threads_running() -> int | None:
    """How many threads of this process, other than the calling one, are running or runnable.

    From /proc/self/task/*/stat (Linux); None where that cannot be read. A spin-waiting thread is
    runnable ("R") even while the scheduler has it off the CPU; a parked one sleeps ("S").
    """
    me = threading.get_native_id()
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return None
    running = 0
    for tid in tids:
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii", errors="replace") as fh:
                state = fh.read().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue  # the thread has ended
        running += state == "R"
    return running


def settle(max_s: float = 0.5, poll_s: float = 0.001, quiet_polls: int = 2) -> float | None:
    """Wait until this process's worker threads have stopped spinning; returns the seconds waited.

    After a call, ONNX Runtime's intra-op workers spin-wait for more work (~35 ms on x86) and
    OpenMP's do too (GOMP_SPINCOUNT, ~13 ms). A model timed in another process meanwhile shares
    its cores with them: on a 2-core host a 40 us TorchScript call measured 30-56 ms. So in serve
    mode a runner answers only once no other thread of it has been runnable for ``quiet_polls``
    polls in a row (a CPU-time test is fooled by a spinner the scheduler has parked for a while).
    None where /proc cannot tell (then it does not wait).
    """
    start = time.perf_counter()
    if _other_threads_running() is None:
        return None
    quiet = 0
    while time.perf_counter() - start < max_s:
        quiet = quiet + 1 if _other_threads_running() == 0 else 0
        if quiet >= quiet_polls:
            break
        time.sleep(poll_s)
    return time.perf_counter() - start


class Benchmark:
    """One model loaded, its first call and warm-up done, ready for timed calls."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.samples: list[int] = []
        model = Path(args.model)
        if not model.is_file():
            raise RunnerUsageError(f"model file not found: {model}")
        manifest, entry, self.notes = read_manifest_entry(model)
        self.format = detect_format(model, entry, args.format)
        self.model = model_info(model, self.format, entry)
        engine = args.engine or ((entry or {}).get("details") or {}).get("quantized_engine")
        shapes = {}
        for text in args.shape or []:
            name, shape = _parse_shape_arg(text)
            if name in shapes:
                raise RunnerUsageError(f"--shape names input {name!r} twice")
            shapes[name] = shape
        npz = _load_npz(args.input) if args.input else None

        started = time.perf_counter_ns()
        import numpy  # noqa: F401 - part of the baseline, before the model is loaded

        runtime_class = RUNTIMES[self.format]
        if self.format == "onnx":
            import onnxruntime  # noqa: F401
        elif self.format == "executorch":
            import_executorch(args.threads)  # sizes the threadpool too (before the load)
        else:
            import torch  # noqa: F401
        import_ms = (time.perf_counter_ns() - started) / 1e6

        self.rss_before = rss_mb()
        started = time.perf_counter_ns()
        self.runtime = runtime_class(model, args.threads, engine)
        self.load_ms = (time.perf_counter_ns() - started) / 1e6
        rss_loaded = rss_mb()
        self.load_growth = None if self.rss_before is None or rss_loaded is None else rss_loaded - self.rss_before

        specs, source, notes = _resolve_specs(self.runtime.input_specs(), manifest, self.format)
        self.notes += notes
        self.input_source = "npz" if npz is not None else ("shape" if shapes else source)
        arrays, self.batch, notes = make_inputs(specs, shapes, npz, args.batch, args.seed)
        self.notes += notes
        self.input_shapes = {name: [int(d) for d in a.shape] for name, a in arrays.items()}
        self.fn, self.fn_args = self.runtime.bind(arrays)

        failure = None
        with self.runtime.context():
            try:
                started = time.perf_counter_ns()
                self.fn(*self.fn_args)
                self.first_run_ms = (time.perf_counter_ns() - started) / 1e6
            except Exception as exc:  # noqa: BLE001 - runtime-specific exception types
                failure = _first_line(exc)
            else:
                for _ in range(args.warmup):
                    self.fn(*self.fn_args)
        if failure is not None:  # raised here: the runtime's own explanation is in its log by now
            raise RunnerError(f"the first inference failed: {failure}{native_detail(getattr(self.runtime, 'log', []))}")
        self.runtime.info["import_ms"] = import_ms

    def run_plain(self) -> None:
        a = self.args
        with self.runtime.context(), _gc_paused():
            self.samples = timed_until(self.fn, self.fn_args, a.min_runs, a.min_time, a.max_runs)

    def run_block(self, n: int, warm: int = 0) -> list[int]:
        """``warm`` untimed calls (threads asleep and caches cold after another model's turn), then n timed."""
        # No collection per block: it would cost more than a block of a small model.
        with self.runtime.context(), _gc_paused(collect=False):
            for _ in range(warm):
                self.fn(*self.fn_args)
            block = timed_calls(self.fn, self.fn_args, n)
        self.samples.extend(block)
        return block

    def result(self) -> dict:
        a = self.args
        timing = {"load": self.load_ms, "first_run": self.first_run_ms, **summarize_ns(self.samples)}
        notes = list(self.notes)
        reached = timing["runs"] >= a.min_runs and timing["total_s"] >= a.min_time
        if not reached and timing["runs"] >= a.max_runs:
            notes.append(f"stopped at --max-runs {a.max_runs} before reaching --min-time {a.min_time:g} s")
        peak, before, growth = peak_rss_mb(), self.rss_before, self.load_growth
        if peak is None or before is None:
            notes.append("resident memory is not readable on this host; memory figures are 0")
        mode = a.mode if not (a.emulated and a.mode == "local") else "emulated"
        return {
            "model": self.model,
            "runtime": {**self.runtime.info, "torch_imported": "torch" in sys.modules},
            "input_shapes": self.input_shapes,
            "settings": {"warmup": a.warmup, "min_runs": a.min_runs, "min_time_s": a.min_time,
                         "max_runs": a.max_runs, "batch": self.batch, "seed": a.seed,
                         "inputs": self.input_source, "serve": bool(a.serve)},
            "timing": timing,
            "throughput_per_s": self.batch * timing["runs"] / timing["total_s"] if timing["total_s"] > 0 else 0.0,
            "memory": {"peak_rss": peak or 0.0, "rss_before_load": before or 0.0, "load_growth": growth or 0.0},
            "host": host_facts(emulated=a.emulated),
            "mode": mode,
            "target": a.target,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "notes": notes,
        }


def document(result: dict) -> dict:
    return {"schema": BENCH_SCHEMA, "schema_version": BENCH_SCHEMA_VERSION, "results": [result]}


def write_json_atomic(path: str, obj) -> None:
    """Write to a temporary file beside ``path``, fsync, then rename over it."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; match a plain open()
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


# ---------------------------------------------------------------------------------------------
# Command line


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _parse_shape_arg(text: str):
    try:
        return parse_shape(text)
    except ValueError as exc:
        raise RunnerUsageError(str(exc)) from None


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line on stderr, exit 2 (argparse prints the whole usage)
        raise RunnerUsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="runner.py", description="Time one model file (edgekit bench runner).")
    p.add_argument("model", help="model file: .onnx, TorchScript .pt or ExecuTorch .pte")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: all usable cores)")
    p.add_argument("--warmup", type=int, default=10, help="untimed runs after the first (default 10)")
    p.add_argument("--min-runs", type=int, default=50, help="at least this many timed runs (default 50)")
    p.add_argument("--min-time", type=float, default=1.0, help="and at least this many seconds of them (default 1)")
    p.add_argument("--max-runs", type=int, default=100_000, help="safety cap on timed runs (default 100000)")
    p.add_argument("--batch", type=int, default=1, help="size of dynamic axes (default 1)")
    p.add_argument("--shape", action="append", metavar="NAME=DIMS", help="input shape, e.g. input=1x1x8x8 (repeatable)")
    p.add_argument("--input", metavar="FILE.npz", help="input arrays by input name")
    p.add_argument("--engine", help="torch quantized engine (default: the manifest's)")
    p.add_argument("--format", choices=FORMATS, help="runtime, when the file name does not tell")
    p.add_argument("--json", metavar="PATH", help="write the result here (default, or '-': stdout)")
    p.add_argument("--serve", action="store_true", help="after loading, take JSON-line commands on stdin")
    p.add_argument("--emulated", action="store_true", help="record that this host emulates the target")
    p.add_argument("--mode", choices=MODES, default="local", help="how this run was started (default local)")
    p.add_argument("--target", help="target name to record in the result")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    return p


def parse_args(argv) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.threads is None:
        args.threads = usable_cores()
    checks = [
        (args.threads >= 1, f"--threads must be at least 1, got {args.threads}"),
        (args.warmup >= 0, f"--warmup must be 0 or more, got {args.warmup}"),
        (args.min_runs >= 1, f"--min-runs must be at least 1, got {args.min_runs}"),
        (math.isfinite(args.min_time) and args.min_time >= 0, f"--min-time must be 0 or more seconds, got {args.min_time}"),
        (args.max_runs >= args.min_runs, f"--max-runs ({args.max_runs}) must be at least --min-runs ({args.min_runs})"),
        (args.batch >= 1, f"--batch must be at least 1, got {args.batch}"),
        (not (args.serve and args.json), "--serve and --json do not go together"),
        (not (args.shape and args.input), "--shape and --input do not go together (the arrays carry their shapes)"),
    ]
    for ok, message in checks:
        if not ok:
            raise RunnerUsageError(message)
    return args


def _reply(out, obj) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def _count_ok(value, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_BLOCK


def serve(bench: Benchmark, inp, out) -> int:
    """The --serve loop (protocol in the module docstring)."""
    gc.collect()  # once, here: blocks do not collect
    settle()
    _reply(out, {"event": "ready", "load_ms": bench.load_ms, "first_run_ms": bench.first_run_ms,
                 "input_shapes": bench.input_shapes, "pid": os.getpid()})
    while line := inp.readline():
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            cmd = msg.get("cmd") if isinstance(msg, dict) else None
        except json.JSONDecodeError:
            cmd, msg = None, None
        if cmd == "run":
            n, warm = msg.get("n"), msg.get("warm", 0)
            if not _count_ok(n, 1) or not _count_ok(warm, 0):
                _reply(out, {"ok": False, "error": f"run needs an integer n within 1..{MAX_BLOCK} (and warm 0..{MAX_BLOCK})"})
                continue
            samples = bench.run_block(n, warm)
            waited = settle()
            _reply(out, {"ok": True, "ns": samples, "settle_ms": None if waited is None else waited * 1e3})
        elif cmd == "finish":
            if not bench.samples:
                _reply(out, {"ok": False, "error": "no timed runs yet"})
                continue
            _reply(out, {"ok": True, "result": bench.result()})
            return EXIT_OK
        else:
            _reply(out, {"ok": False, "error": f"unknown command {line.strip()[:80]!r}; expected run or finish"})
    return EXIT_OK


def main(argv=None, out=None, protect_stdout: bool = False) -> int:
    """Run the runner; returns the exit code. ``protect_stdout`` (script use) sends anything the
    runtimes print on fd 1 to stderr, so stdout carries only our JSON."""
    if protect_stdout:
        sys.stdout.flush()
        out = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)
    with warnings.catch_warnings():
        if not os.environ.get("EDGEKIT_DEBUG"):
            warnings.simplefilter("ignore")  # torch/ORT deprecation chatter is not the user's business
        try:
            return _main(sys.argv[1:] if argv is None else argv, out or sys.stdout)
        except RunnerUsageError as exc:
            print(f"Error: {_first_line(exc)}", file=sys.stderr)
            return EXIT_USAGE
        except RunnerError as exc:
            print(f"Error: {_first_line(exc)}", file=sys.stderr)
            return EXIT_FAILED
        except KeyboardInterrupt:
            print("Error: interrupted", file=sys.stderr)
            return 130
        except Exception as exc:  # noqa: BLE001 - last line of defence: one line, not a traceback
            if os.environ.get("EDGEKIT_DEBUG"):
                import traceback

                traceback.print_exc()
            print(f"Error: {type(exc).__name__}: {_first_line(exc)}", file=sys.stderr)
            return EXIT_FAILED


def _main(argv, out) -> int:
    args = parse_args(argv)
    bench = Benchmark(args)
    if args.serve:
        return serve(bench, sys.stdin, out)
    bench.run_plain()
    doc = document(bench.result())
    if args.json and args.json != "-":
        write_json_atomic(args.json, doc)
    else:
        out.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        out.flush()
    return EXIT_OK


if __name__ == "__main__":
    if not os.environ.get("EDGEKIT_DEBUG"):
        # torch's C++ deprecation warnings bypass Python's warnings module; set before torch loads.
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    sys.exit(main(protect_stdout=True))
