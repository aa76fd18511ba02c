"""The board package as files in a folder: ``edgekit_board/`` plus one small entry script per tool.

A bundle (and the emulated board's work folder) holds exactly what ``install`` writes. An entry
script puts its own folder first on ``sys.path`` (so it works under ``python -I`` and from any
working folder) and calls its tool's ``main``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import BUNDLED_NAME

# entry script name -> (module of this package, the call that runs it)
ENTRIES = {
    "runner.py": ("runner", "main(protect_stdout=True)"),
    "check_outputs.py": ("check", "main(folder=HERE)"),
    "probe.py": ("probe", "main()"),
    "count_marks.py": ("count_marks", "main()"),
}
_TEMPLATE = '''#!/usr/bin/env python3
"""edgekit {module}: the code is in {package}/{module}.py (edgekit's board package)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if not os.environ.get("EDGEKIT_DEBUG"):
    # torch's C++ deprecation warnings bypass Python's warnings module; set before torch loads.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from {package}.{module} import main  # noqa: E402

sys.exit({call})
'''


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def entry_script(name: str) -> str:
    module, call = ENTRIES[name]
    return _TEMPLATE.format(module=module, package=BUNDLED_NAME, call=call)


def package_files() -> list[Path]:
    """The package's source files, relative to it (no caches)."""
    root = package_dir()
    return sorted(p.relative_to(root) for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def install(folder: str | os.PathLike, entries=("runner.py", "check_outputs.py"), formats=None) -> list[str]:
    """Write the package and the named entry scripts into ``folder``; the paths written, relative to it.

    ``formats``: the formats from outside edgekit whose runtimes go with it (None: every one this
    host has), each as ``runtimes/extra_<format>.py``."""
    from .runtimes import EXTRA_FILES, EXTRA_PREFIX

    folder = Path(folder)
    written = []
    extras = {Path("runtimes") / f"{EXTRA_PREFIX}{fmt}.py": path for fmt, path in EXTRA_FILES.items()
              if formats is None or fmt in formats}
    sources = {**{rel: package_dir() / rel for rel in package_files()}, **extras}
    for rel, source in sources.items():
        dest = folder / BUNDLED_NAME / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
        written.append(f"{BUNDLED_NAME}/{rel.as_posix()}")
    for name in entries:
        path = folder / name
        path.write_text(entry_script(name), encoding="utf-8")
        os.chmod(path, 0o755)
        written.append(name)
    return written
