"""Budgets: what a model must stay under, with units, and where each limit came from.

A budget limit can be written with a unit (``"4MB"``, ``"20ms"``, ``"1GiB"``) or as a plain
number in the metric's default unit. Canonical units, the ones the gate compares in:

========================  =========  ==================================================
key                       unit       accepted spellings (case-insensitive)
========================  =========  ==================================================
``max_size_mb``           MB         B, KB, KiB, MB, MiB, GB, GiB (bare number: MB)
``max_p50_ms``            ms         us, µs, ms, s (bare number: ms)
``max_p99_ms``            ms         us, µs, ms, s (bare number: ms)
``max_peak_rss_mb``       MB         B, KB, KiB, MB, MiB, GB, GiB (bare number: MB)
``max_accuracy_drop``     pt or %    pt, pts, pp (bare number: pt), or % (relative)
``max_error_rate``        %          % of requests that did not succeed (bare number: %);
                                     ``edgekit loadtest`` results only, skipped for others
========================  =========  ==================================================

Sizes are binary, like every size edgekit reports (``BenchResult.size_mb`` is bytes / 2**20 and
peak RSS is in MiB): ``MB`` and ``MiB`` both mean 2**20 bytes, so ``"512KiB"`` == ``"512KB"`` ==
0.5 MB and ``"1GiB"`` == 1024 MB.

Accuracy drop has two modes, chosen by the unit:

* **points** (``"1.0"``, ``"1pt"``): absolute percentage points, ``(float_acc - acc) * 100``.
  92.0 % -> 91.2 % is a drop of 0.8 pt. Target profiles use points.
* **relative** (``"0.5%"``): percent of the float model's accuracy,
  ``(float_acc - acc) / float_acc * 100``. 92.0 % -> 91.2 % is a relative drop of 0.87 %.

Where budgets come from, highest precedence first:

1. CLI flags / ``overrides`` (source ``"flag"``);
2. the project file, a model's own table before the shared one: ``edgekit.toml``
   ``[budgets.<name>]`` then ``[budgets]`` (or ``pyproject.toml``
   ``[tool.edgekit.budgets.<name>]`` then ``[tool.edgekit.budgets]``), where ``<name>`` is the
   result's variant, model file name, file stem or path;
3. the target profile's ``[budgets]`` (source ``"target rpi4"``).

Each metric is resolved on its own: a flag for p99 leaves the target's size budget in force. A
target's latency budgets hold only results measured on that board (``edgekit.gates.device``);
the user's own (flags, project file) hold every result they are given.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import Any, Iterable, Mapping

from edgekit.core.errors import InputFileError, UsageError
from edgekit.gates.device import Device
from edgekit.gates.units import METRIC_BY_KEY, METRICS, Metric, get_metric, parse_limit, parse_regression
from edgekit.core.targets import BUDGET_KEYS, Target, load_target
from edgekit.core.fileio import read_toml

PROJECT_FILE = "edgekit.toml"
PYPROJECT_FILE = "pyproject.toml"

ORIGINS = ("target", "file", "flag")

__all__ = [
    "METRICS",
    "METRIC_BY_KEY",
    "NO_BUDGET_HELP",
    "Budget",
    "Budgets",
    "Metric",
    "find_project_file",
    "get_metric",
    "load_project_budgets",
    "parse_limit",
    "parse_regression",
    "resolve_budgets",
    "result_names",
]


@dataclass(frozen=True)
class Budget:
    """One limit on one metric, in the metric's canonical unit, and where it came from.

    ``origin`` (target | file | flag) orders precedence; ``source`` is what reports show
    ("flag", "edgekit.toml", "target rpi4"). ``model`` scopes a project-file budget to the
    results whose variant / file name / stem / path equals it. ``device`` is the board a target's
    budget describes: its latency limits hold only results measured there (``edgekit.gates.device``).
    """

    metric: str
    limit: float
    unit: str
    source: str
    origin: str = "flag"
    model: str | None = None
    device: Device | None = None

    def __post_init__(self) -> None:
        spec = get_metric(self.metric)
        if spec.name != self.metric:
            object.__setattr__(self, "metric", spec.name)
        if self.unit not in spec.canonical_units:
            raise UsageError(
                f"{spec.key}: unit {self.unit!r} is not one of {', '.join(spec.canonical_units)}"
            )
        if isinstance(self.limit, bool) or not isinstance(self.limit, (int, float)) or not math.isfinite(self.limit):
            raise UsageError(f"{spec.key}: limit {self.limit!r} is not a finite number")
        if self.limit < 0 or (self.limit == 0 and not spec.allow_zero):
            raise UsageError(f"{spec.key}: limit {self.limit!r} must be {'zero or more' if spec.allow_zero else 'above zero'}")
        if spec.most is not None and self.limit > spec.most:
            raise UsageError(f"{spec.key}: limit {self.limit:g} is above {spec.most:g}, more than any {spec.label} can be")
        if self.origin not in ORIGINS:
            raise UsageError(f"budget origin {self.origin!r}; allowed: {', '.join(ORIGINS)}")
        object.__setattr__(self, "limit", float(self.limit))

    @classmethod
    def parse(
        cls, metric: str, value: Any, source: str, origin: str = "flag", model: str | None = None, where: str | None = None
    ) -> "Budget":
        """A budget from a user-written value (``"4MB"``, ``20``); ``where`` names it in errors."""
        spec = get_metric(metric)
        limit, unit = parse_limit(spec, value, where or f"{source}: {spec.key}")
        return cls(spec.name, limit, unit, source, origin, model)

    @property
    def spec(self) -> Metric:
        return METRICS[self.metric]

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def rank(self) -> int:
        """Precedence: flag (3) > project file, model table (2) > project file (1) > target (0)."""
        return {"target": 0, "file": 1, "flag": 3}[self.origin] + (1 if self.origin == "file" and self.model else 0)


def result_names(path: str, variant: str = "") -> tuple[str, ...]:
    """The names a result answers to, most specific first: variant, file name, stem, path."""
    names = [variant] if variant else []
    if path:
        pure = PurePath(path.replace("\\", "/"))
        names += [pure.name, pure.stem, path]
    return tuple(dict.fromkeys(n for n in names if n))


@dataclass(frozen=True)
class Budgets:
    """All budgets from all sources; ``for_model`` picks the winning one per metric."""

    entries: tuple[Budget, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def merged(self, *others: "Budgets") -> "Budgets":
        entries = list(self.entries)
        for other in others:
            entries += other.entries
        return Budgets(tuple(entries))

    @property
    def scopes(self) -> tuple[str, ...]:
        """Model names that have their own budgets."""
        return tuple(dict.fromkeys(b.model for b in self.entries if b.model))

    def for_model(self, names: Iterable[str] = ()) -> tuple[Budget, ...]:
        """The budget in force per metric (in METRICS order) for a result known by ``names``.

        ``names`` is most specific first (see ``result_names``); when two model tables match the
        same result, the more specific name wins (variant over file name).
        """
        names = tuple(names)
        chosen: dict[str, tuple[tuple[int, int], Budget]] = {}
        for budget in self.entries:
            if budget.model is not None and budget.model not in names:
                continue
            specificity = -names.index(budget.model) if budget.model is not None else 0
            order = (budget.rank, specificity)
            current = chosen.get(budget.metric)
            if current is None or order >= current[0]:  # later entries of equal rank win
                chosen[budget.metric] = (order, budget)
        return tuple(chosen[m][1] for m in METRICS if m in chosen)

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any] | None, source: str = "flag", origin: str = "flag"
    ) -> "Budgets":
        """Budgets from ``{budget key: value}``; ``None`` values are ignored (an unset flag)."""
        if not values:
            return cls()
        entries = []
        for key, value in values.items():
            if value is None:
                continue
            if key not in METRIC_BY_KEY:
                raise UsageError(f"unknown budget {key!r}; allowed: {', '.join(BUDGET_KEYS)}")
            where = f"--{key.replace('_', '-')}" if origin == "flag" else f"{source}: {key}"
            entries.append(Budget.parse(key, value, source, origin, where=where))
        return cls(tuple(entries))

    @classmethod
    def from_target(cls, target: "str | os.PathLike | Target") -> "Budgets":
        if not isinstance(target, Target):
            target = load_target(target)
        source = f"target {target.name}"
        device = Device.of(target)
        return cls(tuple(replace(Budget.parse(key, value, source, "target"), device=device)
                         for key, value in target.budgets.items()))


# -- project file ---------------------------------------------------------------------------------


MAX_PROJECT_FILE_BYTES = 4 << 20


def _read_toml(path: Path) -> dict:
    return read_toml(path, "budget config file", max_bytes=MAX_PROJECT_FILE_BYTES)


def _pyproject_budgets(data: dict) -> Any:
    tool = data.get("tool")
    edgekit = tool.get("edgekit") if isinstance(tool, dict) else None
    return edgekit.get("budgets") if isinstance(edgekit, dict) else None


def find_project_file(folder: str | os.PathLike | None = None) -> Path | None:
    """``edgekit.toml`` in ``folder`` (default: the current directory), else a ``pyproject.toml``
    there that has a ``[tool.edgekit.budgets]`` table, else None. Parent folders are not searched."""
    folder = Path(folder) if folder is not None else Path.cwd()
    candidate = folder / PROJECT_FILE
    if candidate.is_file():
        return candidate
    candidate = folder / PYPROJECT_FILE
    if candidate.is_file() and _pyproject_budgets(_read_toml(candidate)) is not None:
        return candidate
    return None


def load_project_budgets(path: str | os.PathLike) -> Budgets:
    """Budgets from a project file: ``[tool.edgekit.budgets]`` for a file named pyproject.toml,
    ``[budgets]`` for any other (edgekit.toml, or a file given with ``--config``).

    Keys are the budget keys (see the module doc); a sub-table ``[budgets.<name>]`` holds the
    budgets of one model (its variant, file name, stem or path). Unknown keys are an error.
    """
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"budget config file not found: {path}")
    data = _read_toml(path)
    label = path.name
    if path.name == PYPROJECT_FILE:
        table, prefix = _pyproject_budgets(data), "tool.edgekit.budgets"
    else:
        table, prefix = data.get("budgets"), "budgets"
    if table is None:
        raise InputFileError(f"{path} has no [{prefix}] table")
    if not isinstance(table, dict):
        raise InputFileError(f"{path}: [{prefix}] must be a table")

    entries: list[Budget] = []

    def read(tbl: dict, where: str, model: str | None) -> None:
        source = label if model is None else f"{label} [{where}]"
        for key, value in tbl.items():
            if isinstance(value, dict):
                if model is not None:
                    raise InputFileError(f"{path}: [{where}.{key}] is nested too deeply; model tables sit directly under [{prefix}]")
                read(value, f"{prefix}.{_toml_key(key)}", key)
                continue
            if key not in METRIC_BY_KEY:
                raise InputFileError(
                    f"{path}: unknown key {key!r} in [{where}]; allowed: {', '.join(BUDGET_KEYS)}"
                    " (or a [" + prefix + ".<model>] table)"
                )
            limit, unit = parse_limit(key, value, f"{path}: {where}.{key}")
            entries.append(Budget(key, limit, unit, source, "file", model))

    read(table, prefix, None)
    return Budgets(tuple(entries))


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- resolution -----------------------------------------------------------------------------------


def resolve_budgets(
    target: "str | os.PathLike | Target | None" = None,
    config_path: str | os.PathLike | None = None,
    overrides: Mapping[str, str | float | None] | None = None,
    *,
    search_dir: str | os.PathLike | None = None,
    discover: bool = True,
) -> Budgets:
    """Every budget from the three sources (flags > project file > target); see ``Budgets.for_model``.

    ``config_path`` names the project file; without it, ``edgekit.toml`` / ``pyproject.toml`` is
    looked for in ``search_dir`` (default: the current directory) unless ``discover`` is False.
    """
    layers = []
    if target is not None:
        layers.append(Budgets.from_target(target))
    project = Path(config_path) if config_path is not None else (find_project_file(search_dir) if discover else None)
    if project is not None:
        layers.append(load_project_budgets(project))
    layers.append(Budgets.from_mapping(overrides))
    return Budgets().merged(*layers)


NO_BUDGET_HELP = (
    "no budgets to check: give a target (--target rpi4), a project file ([budgets] in edgekit.toml or "
    "[tool.edgekit.budgets] in pyproject.toml, found in the current folder or given with --config), "
    "or a budget flag such as --max-size-mb 4"
)
