"""The fitted cost models (``cores.toml``, written by ``benchmarks/latency_estimate.py --write``) and
their use for a target: ``for_target``."""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Mapping

from edgekit.core.errors import InputFileError
from edgekit.estimate.costmodel import CLASSES, CoreModel, Estimate
from edgekit.core.fileio import write_text


def default_path() -> Path:
    return Path(str(resources.files("edgekit.estimate") / "cores.toml"))


def load_cores(path: Path | None = None) -> dict[str, CoreModel]:
    """Core name (QEMU's, e.g. cortex-a72) -> its fitted model; {} when no fit was written."""
    path = Path(path) if path is not None else default_path()
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputFileError(f"cannot read fitted core models {path}: {exc}") from None
    groups = data.get("groups") or {}
    if not groups or any(not isinstance(m, list) or not set(m) <= set(CLASSES) for m in groups.values()):
        raise InputFileError(f"{path}: [groups] must map each group to instruction classes of {', '.join(CLASSES)}")
    return {core: _core(core, table, {g: tuple(m) for g, m in groups.items()}, path)
            for core, table in (data.get("cores") or {}).items()}


def _core(core: str, table, groups, path: Path) -> CoreModel:
    try:
        cycles = {g: float(table["cycles"][g]) for g in groups}
        serial, sigma = float(table["serial_fraction"]), float(table["sigma"])
    except (KeyError, TypeError, ValueError):
        raise InputFileError(f"{path}: core {core} needs cycles for {', '.join(groups)}, serial_fraction and "
                             "sigma") from None
    values = [*cycles.values(), sigma]
    if not all(math.isfinite(v) and 0 <= v < 1000 for v in values) or not 0 <= serial <= 1:
        raise InputFileError(f"{path}: core {core} holds a parameter out of range")
    return CoreModel(core, groups, cycles, serial, sigma)


def core_name(target) -> str:
    """QEMU's name for a target's core: "Cortex-A72" -> "cortex-a72" (as ``emulate.host.qemu_cpu_for``)."""
    return (target.core or "").strip().lower().replace(" ", "-")


def for_target(target, classes: Mapping[str, float], threads: int | None = None,
               cores: Mapping[str, CoreModel] | None = None) -> Estimate | None:
    """The latency estimate of one inference with ``classes`` instructions on ``target`` at its
    ``max_mhz`` and ``threads`` (default: the target's), or None when its core has no fitted model
    or the target states no clock."""
    model = (load_cores() if cores is None else cores).get(core_name(target))
    if model is None or not target.max_mhz:
        return None
    return model.estimate(classes, float(target.max_mhz), threads or target.threads)


def write_cores(path: Path, models: Mapping[str, CoreModel], header: str) -> None:
    groups = next(iter(models.values())).groups
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += ["", "[groups]"]
    lines += [f"{g} = [{', '.join(repr(c).replace(chr(39), chr(34)) for c in members)}]" for g, members in groups.items()]
    for core, model in models.items():
        lines += ["", f'[cores."{core}"]',
                  "cycles = { " + ", ".join(f"{g} = {model.cycles[g]:.4f}" for g in groups) + " }",
                  f"serial_fraction = {model.serial_fraction:.4f}", f"sigma = {model.sigma:.4f}"]
    write_text(path, "\n".join(lines) + "\n")
