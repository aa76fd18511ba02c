"""The format table: every model file format edgekit writes, and everything that differs by format.

One module per format (``onnx.py``, ``torchscript.py``, ``executorch.py``) registers one ``Format``
entry at module level, its facts in four groups: ``Files`` (file name, suffixes, external data),
``Host`` (backend module, host modules and extra, defaults, table order), ``Board`` (the runtime
and what bundles pin and pick) and ``Quantization`` (layer names, packed engine, QAT API, target
recipe) (``FORMAT = register(Format(...))``: that line is how the table tells its
built-in modules from the helpers beside them, without importing any); every stage asks this
table instead of testing format names. The table is data: an entry names its own module
(``host.backend``: export_float / copy_quantized / predictor / check_file) and nothing above it. Its int8 routes register themselves in ``edgekit.quantize.routes``, its board
runtime in ``edgekit.board.runtimes``. A format from outside edgekit is a package with three
modules, each found through an entry point: the entry (``edgekit.formats``: a module that calls
``register``), its routes (``edgekit.quantize_routes``) and its board runtime
(``edgekit.board_runtimes``). A format module's entry is light (no torch, no runtime import);
its functions import what they need.

Beside the table: ``reference`` (the reference inputs every artifact is checked on) and
``parity`` (the check itself). Where float models come from is ``edgekit.sources``.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import UsageError

ENTRY_POINTS = "edgekit.formats"  # plug-in formats: modules that call register()
_ENTRY_LINE = re.compile(r"^FORMAT = register\(", re.MULTILINE)


@dataclass(frozen=True)
class Files:
    """What the format's files are."""

    file_name: str  # inside an artifact or bundle folder
    suffixes: tuple[str, ...]  # file suffixes that identify it
    external_data: bool = False  # weights may sit in files beside the model file (the backend's data_files(path) names them)


@dataclass(frozen=True)
class Host:
    """What this host needs to write or run the format."""

    backend: str  # module with export_float / copy_quantized / predictor / check_file
    modules: tuple[str, ...] = ()  # modules this host needs to write or run the format
    extra: str | None = None  # the pip extra that installs ``modules``
    needs_torch_model: bool = True  # written from a torch module (an .onnx source cannot feed it)
    default: bool = True  # written by export/quantize/pipeline when no format is asked for
    table_order: int = 100  # built-in formats are listed (names, messages, default outputs) lowest first


@dataclass(frozen=True)
class Board:
    """How a bundle runs the format on the board."""

    runtime: str  # the distribution that runs it on the board (bundle pins, memory estimates)
    requirements: tuple[str, ...] = ()  # more distributions the board needs besides numpy
    # the board installs exactly the pinned list (pip --no-deps): the runtime's declared dependencies
    # include export-time tools (hydra, omegaconf -> antlr4, source-only) a board neither needs nor builds
    no_deps: bool = False
    # installed with their own dependencies when another index replaces index_url (verify
    # --index-url): PyPI's aarch64 torch is a CUDA build that loads CUDA libraries at import
    with_deps_off_index: tuple[str, ...] = ()
    footprint_mb: float = 256.0  # resident memory of the runtime itself (limits.py)
    index_url: str | None = None  # a wheel index for the board runtime, when PyPI's is wrong for it
    extra_index_url: str | None = None  # where the rest comes from when index_url is not a full index
    check_wheel: bool = False  # bundle asks the index whether the runtime has a wheel for the board
    standalone_server: bool = False  # bundles carry serve.py (FastAPI + the runtime, no edgekit) for it
    native_runner: bool = False  # edgekit-run (edgekit.native) runs it with no Python on the board
    # its Python bundle is counted with its own runtime (a small self-contained aarch64 wheel) in the
    # arm64 rootfs, Python's per-call work included (emulate.icount_python): by bench --emulate when
    # edgekit-run does not run it, and by the pipeline's runtime choice beside edgekit-run's count when it does
    counted_in_python: bool = False
    preference: int = 100  # bundle/serve pick the lowest present when no format is given


@dataclass(frozen=True)
class Quantization:
    """What quantize needs to know of the format."""

    layer_names: str = "torch"  # what --exclude names for this format: "torch" modules or "onnx" nodes
    packed_engine: bool = False  # int8 weights are packed for one of torch's quantized engines (--engine)
    qat_api: str = "torch.ao"  # formats sharing an API share one QAT fine-tune; others need their own run
    target_recipe: bool = False  # int8 files record the target's [runtime.onnx_quant] settings

    @property
    def onnx_graph(self) -> bool:
        """The quantizer edits an ONNX graph (ORT recipes, graph layouts, per-node error reports)."""
        return self.layer_names == "onnx"


@dataclass(frozen=True)
class Format:
    """One format: its name and four groups of facts (files, host, board, quantization)."""

    name: str
    files: Files
    host: Host
    board: Board
    quantization: Quantization = Quantization()

    def available(self) -> bool:
        return all(importlib.util.find_spec(name) is not None for name in self.host.modules)

    def require(self) -> None:
        """UsageError naming the extra when this host cannot write or run the format."""
        if not self.available():
            raise UsageError(
                f"--format {self.name} needs the {self.host.extra} extra: pip install 'edgekit-ml[{self.host.extra}]'"
            )

    def ops(self):
        """The backend module (heavy imports happen inside its functions)."""
        self.require()
        return importlib.import_module(self.host.backend)


_TABLE: dict[str, Format] = {}


_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
_FIELD_TYPES = {"str": str, "bool": bool, "int": int, "float": (int, float)}


def _bad_field(entry: Format) -> str | None:
    """What is wrong with a plug-in's entry (a field of the wrong type, a file name that is a path), or None."""
    import math
    import typing

    if not _NAME.fullmatch(entry.name if isinstance(entry.name, str) else ""):
        return f"name {entry.name!r} is not a lowercase word (letters, digits, '-', '_')"
    for group, kind in (("files", Files), ("host", Host), ("board", Board), ("quantization", Quantization)):
        value = getattr(entry, group)
        if type(value) is not kind:
            return f"{group} is a {type(value).__name__}, not edgekit.formats.{kind.__name__}"
        for name, hint in typing.get_type_hints(kind).items():
            field = getattr(value, name)
            text = hint.__name__ if isinstance(hint, type) else str(hint)
            if text.startswith("tuple"):
                ok = isinstance(field, tuple) and all(isinstance(item, str) and item for item in field)
            elif "None" in text:
                ok = field is None or (isinstance(field, str) and bool(field))
            else:
                want = _FIELD_TYPES[text]
                ok = isinstance(field, want) and (want is bool or not isinstance(field, bool))
                ok = ok and (not isinstance(field, float) or math.isfinite(field))
                ok = ok and (want is not str or bool(field))
            if not ok:
                return f"{group}.{name} is {field!r}, not a {text.replace('typing.', '')}"
    file_name = entry.files.file_name
    if file_name in (".", "..") or "/" in file_name or "\\" in file_name or "\0" in file_name:
        return f"files.file_name {file_name!r} is not a plain file name"
    if not entry.files.suffixes or any(not suffix.startswith(".") or "/" in suffix for suffix in entry.files.suffixes):
        return f"files.suffixes {entry.files.suffixes!r} are not file suffixes ('.ext')"
    if entry.board.footprint_mb <= 0:
        return f"board.footprint_mb {entry.board.footprint_mb!r} is not a positive number of MB"
    if entry.quantization.layer_names not in ("torch", "onnx"):
        return f"quantization.layer_names {entry.quantization.layer_names!r} is not 'torch' or 'onnx'"
    return None


def register(entry: Format) -> Format:
    """Add ``entry`` to the table; a name, file name or suffix another format has is refused, and so
    is an entry that is not a well-formed Format (a plug-in's garbage fails here, not in a later command)."""
    if type(entry) is not Format:
        raise UsageError(f"format register() takes an edgekit.formats.Format, not a {type(entry).__name__}")
    problem = _bad_field(entry)
    if problem:
        raise UsageError(f"format {str(entry.name)[:40]!r} cannot be registered: its {problem}")
    for other in _TABLE.values():
        if other.name == entry.name and other == entry:
            return entry  # the same module imported again
        shared = set(other.files.suffixes) & set(entry.files.suffixes)
        clash = [f"{what} {value!r}" for what, value, same in (
            ("name", entry.name, other.name == entry.name),
            ("file name", entry.files.file_name, other.files.file_name == entry.files.file_name),
            ("suffix", min(shared, default=""), bool(shared))) if same]
        if clash:
            raise UsageError(f"format {entry.name!r} cannot be registered: the {clash[0]} is already format {other.name!r}'s")
    _TABLE[entry.name] = entry
    return entry


_LOADED: list[bool] = []


def _builtin_modules() -> list[str]:
    """The modules of this package that register a format (their source says so; none is imported here)."""
    here = Path(__file__).parent
    return [found.name for found in pkgutil.iter_modules([str(here)])
            if not found.ispkg and _ENTRY_LINE.search((here / f"{found.name}.py").read_text(encoding="utf-8"))]


def _load() -> dict[str, Format]:
    """The whole table: the built-in formats by ``table_order``, then the plug-ins (a format
    module imported first registers only itself)."""
    if not _LOADED:
        builtin = [importlib.import_module(f"{__name__}.{name}").FORMAT for name in _builtin_modules()]
        from edgekit.core.plugins import load_plugins

        load_plugins(ENTRY_POINTS, "format")
        ordered = {entry.name: entry for entry in sorted(builtin, key=lambda entry: entry.host.table_order)}
        ordered.update((name, entry) for name, entry in _TABLE.items() if name not in ordered)
        _TABLE.clear()
        _TABLE.update(ordered)
        _LOADED.append(True)
    return _TABLE


def names() -> tuple[str, ...]:
    """Every format, in table order."""
    return tuple(_load())


def default_names(need_torch: bool = True) -> tuple[str, ...]:
    """What export/quantize write when no format is asked for: the default formats this host can write."""
    return tuple(f.name for f in _load().values()
                 if f.host.default and f.available() and (need_torch or not f.host.needs_torch_model))


def available_names() -> tuple[str, ...]:
    return tuple(f.name for f in _load().values() if f.available())


def get(name: str) -> Format:
    """The entry named ``name``: a command resolves each of its formats once, at its front, and hands
    the entry down (``resolve``); the stages below take the entry rather than the name."""
    return _named(name)


def _named(name: str) -> Format:
    table = _load()
    if name not in table:
        raise UsageError(f"unknown format {name!r}; choose from: {', '.join(table)}")
    return table[name]


def entry(fmt: str | Format) -> Format:
    """``fmt`` itself when it is an entry already (resolved by the caller), else the entry named ``fmt``."""
    return fmt if isinstance(fmt, Format) else get(fmt)


def resolve(formats, given=None) -> dict[str, Format]:
    """{name: entry} for ``formats`` (names or entries), each resolved once: the caller's ``given``
    entries where it has them, else looked up; an unknown name or a missing extra is a one-line error."""
    given = given or {}
    out: dict[str, Format] = {}
    for fmt in formats:
        spec = fmt if isinstance(fmt, Format) else given.get(fmt) or get(fmt)
        spec.require()
        out[spec.name] = spec
    return out


def check(formats: tuple[str, ...] | list[str], what: str = "format") -> tuple[str, ...]:
    """``formats`` validated against the table (unknown names and a missing extra are one-line errors).
    A validation of a config's names, not a resolution: the entries are ``resolve``'s."""
    if not formats:
        raise UsageError(f"no output {what} given; choose from: {', '.join(names())}")
    for name in formats:
        _named(name).require()
    return tuple(formats)


def by_qat_api(names) -> dict[str, list[str]]:
    """``names`` grouped by the fake-quant API their QAT trains with, in order of first appearance."""
    apis: dict[str, list[str]] = {}
    for name in names:
        apis.setdefault(get(name).quantization.qat_api, []).append(name)
    return apis


def check_one_qat_api(names) -> None:
    """QAT fine-tunes one network per fake-quant API: formats of different APIs need separate runs."""
    apis = by_qat_api(names)
    if len(apis) > 1:
        groups = " and ".join(f"{'/'.join(v)} ({k})" for k, v in apis.items())
        raise UsageError(f"QAT trains one network per quantization API; {groups} need separate runs "
                         "(one --format group each, into different --out folders)")


def by_file_name(file_name: str) -> Format | None:
    return next((f for f in _load().values() if f.files.file_name == file_name), None)


def by_suffix(suffix: str) -> Format | None:
    return next((f for f in _load().values() if suffix.lower() in f.files.suffixes), None)


def preferred(present: tuple[str, ...] | list[str]) -> str | None:
    """The format a bundle or server picks among ``present`` when none is asked for."""
    known = [get(name) for name in present if name in _load()]
    return min(known, key=lambda f: f.board.preference).name if known else None
