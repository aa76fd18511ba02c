"""One class per runtime, one interface (``Runtime`` in base.py); ``open_model`` picks the class.

A runtime module imports its runtime only when a model is opened, so importing this package
costs nothing on a board that has only one of them installed.

A built-in format's runtime is the module ``<format>_runtime.py`` of this package that names its
class ``RUNTIME``; the files are listed, not imported (a bundle carries every one of them, so a
board finds what the host does). ``native_runtime.py`` names no ``RUNTIME``: it is the native
runner's class, not a format's.

A format from outside edgekit brings its runtime as one module of this package: a file that
imports ``from .base import Runtime`` (or another runtime here) and names its class ``RUNTIME``.
On the host it is found through the ``edgekit.board_runtimes`` entry point (name: the format,
value: the module, located, not imported, then loaded as a module of this package); a bundle
carries it as ``extra_<format>.py`` beside the built-in ones.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

BUILTIN_SUFFIX = "_runtime"
EXTRA_PREFIX = "extra_"
ENTRY_POINTS = "edgekit.board_runtimes"
_FORMAT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")
_RUNTIME_LINE = re.compile(r"^RUNTIME = ", re.MULTILINE)


def _builtin() -> dict[str, str]:
    """format -> "module:RUNTIME" for the ``<format>_runtime.py`` files here that name a ``RUNTIME``."""
    found = {}
    for path in sorted(Path(__file__).parent.glob(f"*{BUILTIN_SUFFIX}.py")):
        fmt = path.stem[:-len(BUILTIN_SUFFIX)]
        if (not path.name.startswith(EXTRA_PREFIX) and _FORMAT_NAME.match(fmt)
                and _RUNTIME_LINE.search(path.read_text(encoding="utf-8"))):
            found[fmt] = f"{path.stem}:RUNTIME"
    return found


# format -> "module:class" (relative to this package): the table the board scripts use. In file-name
# order, which content sniffing (``detect``) follows: a .pte (executorch) before a zip (torchscript).
RUNTIMES = _builtin()


def _extra_files() -> dict[str, Path]:
    """format -> the file of its runtime, for formats from outside edgekit (a bundle's files first)."""
    found = {p.stem[len(EXTRA_PREFIX):]: p for p in sorted(Path(__file__).parent.glob(f"{EXTRA_PREFIX}*.py"))}
    try:
        from importlib.metadata import entry_points
    except ImportError:  # a board's Python without importlib.metadata: the bundle's files are all there is
        return found
    for point in entry_points(group=ENTRY_POINTS):
        try:
            spec = importlib.util.find_spec(point.value)
        except (ImportError, ValueError):
            continue  # a broken plug-in is not this board's business unless its format is asked for
        if spec is not None and spec.origin:
            found.setdefault(point.name, Path(spec.origin))
    return {fmt: path for fmt, path in found.items() if _FORMAT_NAME.match(fmt) and fmt not in RUNTIMES}


EXTRA_FILES = _extra_files()
RUNTIMES.update({fmt: f"{EXTRA_PREFIX}{fmt}:RUNTIME" for fmt in EXTRA_FILES})


def detect(path) -> str | None:
    """The format of the file at ``path``: by its suffix, else by its content; None when no runtime knows it."""
    classes = [runtime_class(fmt) for fmt in RUNTIMES]
    suffix = Path(path).suffix.lower()
    for cls in classes:
        if suffix in cls.suffixes:
            return cls.format
    return next((cls.format for cls in classes if cls.claims(Path(path))), None)


def runtime_class(fmt: str):
    module, _, name = RUNTIMES[fmt].partition(":")
    if fmt in EXTRA_FILES and f"{__name__}.{module}" not in sys.modules:
        _load_extra(f"{__name__}.{module}", EXTRA_FILES[fmt])
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def _load_extra(qualified: str, path: Path) -> None:
    spec = importlib.util.spec_from_file_location(qualified, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[qualified]
        raise


def open_model(fmt: str, path, threads: int, engine: str | None = None):
    """The model file at ``path`` loaded by ``fmt``'s runtime (BoardError when it will not load)."""
    return runtime_class(fmt)(path, threads, engine)
