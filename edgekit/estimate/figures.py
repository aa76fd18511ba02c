"""The published on-board latencies the cost model is fitted to and checked against (``published.toml``)."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from edgekit.core.errors import InputFileError

ROLES = ("fit", "check", "aside")  # aside: shown with its error, in neither the fit nor the medians (why: in the file)
SOURCE_KEYS = ("runtime", "repo", "path", "commit", "url", "statistic")
FIGURE_KEYS = ("source", "board", "core", "mhz", "model", "threads", "ms", "role")


@dataclass(frozen=True)
class Source:
    name: str
    runtime: str
    repo: str
    path: str
    commit: str
    url: str
    statistic: str


@dataclass(frozen=True)
class Figure:
    source: Source
    board: str
    core: str  # QEMU's CPU name, e.g. cortex-a72
    mhz: float  # the clock the source states for the board
    model: str
    threads: int
    ms: float
    role: str  # fit | check | aside

    @property
    def label(self) -> str:
        return f"{self.source.name} {self.board} {self.model} {self.threads}t"


def default_path() -> Path:
    return Path(str(resources.files("edgekit.estimate") / "published.toml"))


def load_figures(path: Path | None = None) -> list[Figure]:
    """Every figure of ``path`` (default: the shipped ``published.toml``), each checked: a known
    source with its provenance, a positive clock, latency and thread count, a role of fit|check|aside."""
    path = Path(path) if path is not None else default_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputFileError(f"cannot read published figures {path}: {exc}") from None
    sources = {name: _source(name, table, path) for name, table in (data.get("sources") or {}).items()}
    figures = [_figure(entry, sources, path, i) for i, entry in enumerate(data.get("figures") or [])]
    labels = [f.label for f in figures]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise InputFileError(f"{path}: figure {twice[0]} is listed more than once")
    return figures


def _source(name: str, table, path: Path) -> Source:
    if not isinstance(table, dict) or set(table) != set(SOURCE_KEYS) or \
            not all(isinstance(table[key], str) and table[key].strip() for key in SOURCE_KEYS):
        raise InputFileError(f"{path}: source {name!r} must give {', '.join(SOURCE_KEYS)} as non-empty strings")
    return Source(name, **table)


def _figure(entry, sources: dict[str, Source], path: Path, index: int) -> Figure:
    where = f"{path}: figure {index + 1}"
    if not isinstance(entry, dict) or set(entry) != set(FIGURE_KEYS):
        raise InputFileError(f"{where} must give exactly {', '.join(FIGURE_KEYS)}")
    if entry["source"] not in sources:
        raise InputFileError(f"{where} names source {entry['source']!r}, not one of: {', '.join(sources) or 'none'}")
    if entry["role"] not in ROLES:
        raise InputFileError(f"{where}: role must be one of {', '.join(ROLES)}, got {entry['role']!r}")
    for key in ("board", "core", "model"):
        if not isinstance(entry[key], str) or not entry[key]:
            raise InputFileError(f"{where}: {key} must be a non-empty string")
    threads = entry["threads"]
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
        raise InputFileError(f"{where}: threads must be an integer from 1 to 1024, got {threads!r}")
    for key in ("mhz", "ms"):
        value = entry[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InputFileError(f"{where}: {key} must be a positive number, got {value!r}")
    return Figure(sources[entry["source"]], entry["board"], entry["core"], float(entry["mhz"]), entry["model"],
                  threads, float(entry["ms"]), entry["role"])
