"""The stages reach language models and the bundled server only through ``edgekit.core.handlers`` (tests/test_layers.py
forbids the upward import): the providers load from the installed entry points on the first
question, whichever module was imported first."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from edgekit.core import handlers
from edgekit.core.errors import UsageError

ASK_FIRST = """
import json, sys
from edgekit.core import handlers
before = sorted(m for m in sys.modules if m.startswith("edgekit.llm"))
found = {name: getattr(handlers.handler(name), "__name__", None) for name in sys.argv[1:]}
modules = {name: getattr(handlers.handler(name), "__module__", None) for name in sys.argv[1:]}
print(json.dumps({"before": before, "found": found, "modules": modules}))
"""


def test_a_stage_finds_the_language_model_handlers_without_importing_llm_first():
    names = [handlers.LANGUAGE_MODEL_BUNDLE, handlers.LANGUAGE_MODEL_CHECK, handlers.GENERATION_RATES,
             handlers.SERVER_FILES]
    done = subprocess.run([sys.executable, "-c", ASK_FIRST, *names], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == []  # nothing of edgekit.llm was loaded before the question
    assert seen["found"] == {handlers.LANGUAGE_MODEL_BUNDLE: "edgekit.llm.bundle",
                             handlers.LANGUAGE_MODEL_CHECK: "verify_llm",
                             handlers.GENERATION_RATES: "with_generation_rates",
                             handlers.SERVER_FILES: "server_files"}
    assert seen["modules"][handlers.LANGUAGE_MODEL_CHECK] == "edgekit.llm.emulated"
    assert seen["modules"][handlers.GENERATION_RATES] == "edgekit.llm.tokens_per_s"
    assert seen["modules"][handlers.SERVER_FILES] == "edgekit.serve.handlers"


def test_the_server_files_a_bundle_copies_are_the_standalone_modules_and_import_nothing_of_edgekit():
    import ast

    import edgekit.serve

    script, modules = handlers.handler(handlers.SERVER_FILES)()
    assert script.name == "bundle_entry.py" and script.is_file()
    assert sorted(m.name for m in modules) == sorted(edgekit.serve.STANDALONE)
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # edgekit.board is tried first where edgekit is installed; bundles fall back to edgekit_board
                assert not node.module.startswith("edgekit.") or node.module == "edgekit.board", (module, node.module)


def test_a_name_no_provider_registers_is_one_line():
    with pytest.raises(UsageError) as caught:
        handlers.handler("stage.nobody-provides-this")
    assert "\n" not in str(caught.value) and "'stage.nobody-provides-this'" in str(caught.value)
