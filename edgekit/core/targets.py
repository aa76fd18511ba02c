"""Target device profiles, loaded from ``targets/*.toml`` (data, not code)."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from edgekit.core.errors import InputFileError, unknown_name
from edgekit.core.fileio import read_toml

ARCHES = ("aarch64", "armv7l", "x86_64")
ENGINES = ("qnnpack", "x86", "fbgemm", "onednn")
QUANT_TYPES = ("int8", "uint8")
BUDGET_KEYS = ("max_size_mb", "max_p50_ms", "max_p99_ms", "max_peak_rss_mb", "max_accuracy_drop", "max_error_rate",
               "max_ttft_ms", "min_decode_tps", "min_cosine", "min_agreement", "min_sqnr_db", "min_correlation")
# Strings from a target reach file names, README.txt and command lines: plain tokens only.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}\Z")
PLATFORM_PATTERN = re.compile(r"^[A-Za-z0-9_]{0,64}\Z")
MCPU_PATTERN = re.compile(r"[a-z0-9][a-z0-9.+_-]{0,39}")  # reaches the compiler's argument list
CORE_PATTERN = re.compile(r"^[A-Za-z0-9._ +-]{1,64}\Z")  # a CPU's name, e.g. "Cortex-A72", "generic x86-64"
LIMITS = {"cpu.cores": 1024, "cpu.ram_mb": 1 << 24, "cpu.max_mhz": 100_000, "runtime.threads": 1024}
MAX_DESCRIPTION = 200
MAX_TARGET_BYTES = 1 << 20


@dataclass(frozen=True)
class OnnxQuantSettings:
    activation_type: str = "uint8"
    weight_type: str = "int8"
    per_channel: bool = True
    reduce_range: bool = False


@dataclass(frozen=True)
class PteQuantSettings:
    """PT2E int8 for ``.pte`` files (``[runtime.executorch_quant]``): XNNPACK's symmetric recipe."""

    per_channel: bool = True  # weights per output channel (XNNPACK's recommended recipe)


@dataclass(frozen=True)
class TorchQuantSettings:
    """torch.ao int8 for TorchScript files (``[runtime.torch_quant]``)."""

    # weights per output channel; None: the engine's default recipe (qnnpack: per tensor, x86: per channel)
    per_channel: bool | None = None


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    arch: str
    core: str
    cores: int
    ram_mb: int
    isa: tuple[str, ...]
    threads: int
    quantized_engine: str
    onnx_opset: int
    python_platform: str
    onnx_quant: OnnxQuantSettings
    budgets: dict[str, float] = field(default_factory=dict)
    max_mhz: int | None = None
    pte_quant: PteQuantSettings = field(default_factory=PteQuantSettings)
    torch_quant: TorchQuantSettings = field(default_factory=TorchQuantSettings)
    mcpu: str = ""  # the compiler's name for the core (-mcpu= on ARM): what native runners are tuned for
    source: str = ""

    @property
    def is_arm(self) -> bool:
        return self.arch in ("aarch64", "armv7l")

    def has_isa(self, flag: str) -> bool:
        return flag in self.isa


def _targets_dirs() -> list[Path]:
    dirs = []
    if env := os.environ.get("EDGEKIT_TARGETS_DIR"):
        dirs.append(Path(env))
    dirs.append(Path(__file__).resolve().parents[2] / "targets")  # source checkout / editable install
    packaged = resources.files("edgekit") / "_targets"  # wheel install
    dirs.append(Path(str(packaged)))
    return [d for d in dirs if d.is_dir()]


def available_targets() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in reversed(_targets_dirs()):  # earlier folders win
        for path in folder.glob("*.toml"):
            found[path.stem] = path
    return dict(sorted(found.items()))


def load_target(name_or_path: str | os.PathLike) -> Target:
    """Load a target by name (``rpi4``) or from a TOML file path."""
    text = str(name_or_path)
    if text.endswith(".toml") or os.sep in text:
        path = Path(text)
        if not path.is_file():
            raise InputFileError(f"target file not found: {path}")
    else:
        known = available_targets()
        if text not in known:
            raise unknown_name("target", text, known)
        path = known[text]

    return parse_target(read_toml(path, "target file", max_bytes=MAX_TARGET_BYTES), str(path))


class _Reader:
    """Typed access to one TOML table that reports unknown keys and wrong types by name."""

    def __init__(self, table: Any, where: str, source: str):
        if not isinstance(table, dict):
            raise InputFileError(f"{source}: [{where}] must be a table")
        self.table, self.where, self.source, self.used = table, where, source, set()

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., choices=None):
        self.used.add(key)
        if key not in self.table:
            if default is ...:
                raise InputFileError(f"{self.source}: missing key {self.where}.{key}")
            return default
        value = self.table[key]
        if isinstance(value, bool) and kind in (int, float, (int, float)):
            raise InputFileError(f"{self.source}: {self.where}.{key} must be a number, not a boolean")
        if not isinstance(value, kind):
            expected = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise InputFileError(f"{self.source}: {self.where}.{key} must be {expected}, got {value!r}")
        if choices is not None and value not in choices:
            raise InputFileError(
                f"{self.source}: {self.where}.{key} = {value!r}; allowed: {', '.join(choices)}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise InputFileError(f"{self.source}: {self.where}.{key} must be a finite number, got {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            raise InputFileError(f"{self.source}: {self.where}.{key} must be positive, got {value!r}")
        return value

    def done(self) -> None:
        extra = sorted(set(self.table) - self.used)
        if extra:
            raise InputFileError(f"{self.source}: unknown key(s) in [{self.where}]: {', '.join(extra)}")


def _check_strings(target: Target, source: str) -> None:
    """Names are plain tokens, numbers within what any board has, text printable on one line."""
    if not NAME_PATTERN.match(target.name):
        raise InputFileError(f"{source}: target.name {target.name[:80]!r} must be 1-64 of A-Z a-z 0-9 . _ -")
    if target.mcpu and not MCPU_PATTERN.fullmatch(target.mcpu):
        raise InputFileError(f"{source}: cpu.mcpu {target.mcpu[:80]!r} must be a compiler CPU name such as cortex-a72")
    if target.core and not CORE_PATTERN.match(target.core):
        raise InputFileError(f"{source}: cpu.core {target.core[:80]!r} must be 1-64 of A-Z a-z 0-9 . _ + - and spaces")
    if not PLATFORM_PATTERN.match(target.python_platform):
        raise InputFileError(f"{source}: runtime.python_platform {target.python_platform[:80]!r} must be a wheel platform tag")
    for flag in target.isa:
        if not NAME_PATTERN.match(flag):
            raise InputFileError(f"{source}: cpu.isa entry {flag[:80]!r} must be 1-64 of A-Z a-z 0-9 . _ -")
    if len(target.description) > MAX_DESCRIPTION or not target.description.isprintable():
        raise InputFileError(f"{source}: target.description must be one printable line of at most {MAX_DESCRIPTION} characters")
    values = {"cpu.cores": target.cores, "cpu.ram_mb": target.ram_mb, "cpu.max_mhz": target.max_mhz,
              "runtime.threads": target.threads}
    for key, value in values.items():
        if value is not None and value > LIMITS[key]:
            raise InputFileError(f"{source}: {key} = {value} is larger than any board ({LIMITS[key]} at most)")


def parse_target(data: dict, source: str = "<target>") -> Target:
    top = _Reader(data, "target", source)
    name = top.get("name", str)
    description = top.get("description", str, "")
    cpu = _Reader(top.get("cpu", dict), "cpu", source)
    runtime = _Reader(top.get("runtime", dict), "runtime", source)
    oq = _Reader(runtime.get("onnx_quant", dict, {}), "runtime.onnx_quant", source)
    pq = _Reader(runtime.get("executorch_quant", dict, {}), "runtime.executorch_quant", source)
    tq = _Reader(runtime.get("torch_quant", dict, {}), "runtime.torch_quant", source)
    budgets_raw = _Reader(top.get("budgets", dict, {}), "budgets", source)
    top.done()

    isa = cpu.get("isa", list, [])
    if not all(isinstance(flag, str) for flag in isa):
        raise InputFileError(f"{source}: cpu.isa must be a list of strings")
    onnx_quant = OnnxQuantSettings(
        activation_type=oq.get("activation_type", str, "uint8", QUANT_TYPES),
        weight_type=oq.get("weight_type", str, "int8", QUANT_TYPES),
        per_channel=oq.get("per_channel", bool, True),
        reduce_range=oq.get("reduce_range", bool, False),
    )
    oq.done()
    pte_quant = PteQuantSettings(per_channel=pq.get("per_channel", bool, True))
    pq.done()
    torch_quant = TorchQuantSettings(per_channel=tq.get("per_channel", bool, None))
    tq.done()
    budgets = {key: float(budgets_raw.get(key, (int, float))) for key in BUDGET_KEYS if key in budgets_raw.table}
    budgets_raw.done()
    target = Target(
        name=name,
        description=description,
        arch=cpu.get("arch", str, choices=ARCHES),
        core=cpu.get("core", str, ""),
        cores=cpu.get("cores", int),
        ram_mb=cpu.get("ram_mb", int),
        isa=tuple(isa),
        max_mhz=cpu.get("max_mhz", int, None),
        mcpu=cpu.get("mcpu", str, ""),
        threads=runtime.get("threads", int),
        quantized_engine=runtime.get("quantized_engine", str, choices=ENGINES),
        onnx_opset=runtime.get("onnx_opset", int, 17),
        python_platform=runtime.get("python_platform", str, ""),
        onnx_quant=onnx_quant,
        pte_quant=pte_quant,
        torch_quant=torch_quant,
        budgets=budgets,
        source=source,
    )
    cpu.done()
    runtime.done()
    _check_strings(target, source)
    if not 7 <= target.onnx_opset <= 23:
        raise InputFileError(f"{source}: runtime.onnx_opset = {target.onnx_opset} is outside 7..23")
    return target
