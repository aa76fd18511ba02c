"""The board package as a bundle carries it (``edgekit_board/`` + entry scripts), installed once into
a temporary folder: tests run ``RUNNER``, ``CHECK`` and ``PROBE`` the way a board runs them."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from edgekit.board.entries import ENTRIES, install

BOARD_DIR = Path(tempfile.mkdtemp(prefix="edgekit-test-board-"))
atexit.register(shutil.rmtree, BOARD_DIR, True)
install(BOARD_DIR, entries=tuple(ENTRIES))
RUNNER = BOARD_DIR / "runner.py"
CHECK = BOARD_DIR / "check_outputs.py"
PROBE = BOARD_DIR / "probe.py"
