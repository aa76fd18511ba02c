"""Handlers a package above the stages lends them, asked for by name.

A stage cannot import a package above it (``tests/test_layers.py``). Where a stage meets an
artifact that package owns (a language model: its bundle, its emulated check, its tokens per
second; the HTTP server a bundle carries), the package registers the handler here and the stage
asks for it by name. Providers are declared under the ``edgekit.handlers`` entry point group
(``pyproject.toml``: ``edgekit.llm.handlers``, ``edgekit.serve.handlers``) and loaded on the first
question, so a stage finds them whichever module was imported first.
"""

from __future__ import annotations

from typing import Any

from edgekit.core.errors import UsageError
from edgekit.core.plugins import load_plugins

GROUP = "edgekit.handlers"

# the names stages ask for, and what each is
LANGUAGE_MODEL_BUNDLE = "bundle.language-model"  # a module: check_program, check_data, write_reference, run_script, ...
LANGUAGE_MODEL_CHECK = "emulate.language-model"  # verify_llm(bundle, ...): the bundle's greedy ids under QEMU
GENERATION_RATES = "bench.generation-rates"  # with_generation_rates(models, results, threads, tokens)
SERVER_FILES = "bundle.server-files"  # () -> (serve.py's source, the standalone server's modules): edgekit.serve

_registered: dict[str, Any] = {}
_loaded = False


def register(name: str, handler: Any) -> None:
    _registered[name] = handler


def handler(name: str) -> Any:
    """The handler registered as ``name``; the declared providers are imported on the first question."""
    global _loaded
    if name not in _registered and not _loaded:
        _loaded = True
        load_plugins(GROUP, "handler")
    try:
        return _registered[name]
    except KeyError:
        raise UsageError(f"no edgekit handler provides {name!r}: edgekit's entry points are not installed "
                         "(reinstall it: pip install -e .)") from None
