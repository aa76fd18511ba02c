"""What serving lends the bundle stage below it (``edgekit.core.handlers``): the standalone server a
bundle carries. Declared under the ``edgekit.handlers`` entry point group in ``pyproject.toml``;
importing this module registers it."""

from __future__ import annotations

from pathlib import Path

import edgekit.serve
from edgekit.core import handlers


def server_files() -> tuple[Path, list[Path]]:
    """(the bundle's serve.py source, the standalone modules of edgekit.serve)."""
    package = Path(edgekit.serve.__file__).resolve().parent
    return package / "bundle_entry.py", [package / name for name in edgekit.serve.STANDALONE]


handlers.register(handlers.SERVER_FILES, server_files)
