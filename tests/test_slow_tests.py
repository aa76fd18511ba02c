"""tests/slow_tests.py names real tests: a renamed or deleted file or test there would silently put a
slow test back into the inner loop (or drop nothing)."""

from __future__ import annotations

import re
from pathlib import Path

from slow_tests import SLOW_FILES, SLOW_TESTS, is_slow

REPO = Path(__file__).resolve().parent.parent


def test_every_listed_file_exists():
    for path in SLOW_FILES:
        assert (REPO / path).is_file(), f"tests/slow_tests.py lists {path}, which does not exist"


def test_every_listed_test_exists_in_its_file():
    for nodeid in SLOW_TESTS:
        path, _, name = nodeid.partition("::")
        source = (REPO / path).read_text(encoding="utf-8")
        function = name.split("[", 1)[0].split("::")[-1]
        assert re.search(rf"^\s*def {re.escape(function)}\(", source, re.M), f"no test {name} in {path}"


def test_a_listed_file_marks_each_of_its_tests_and_nothing_else():
    for path in list(SLOW_FILES)[:3]:
        assert is_slow(f"{path}::test_anything[param]")
    assert not is_slow("tests/test_slow_tests.py::test_every_listed_file_exists")
