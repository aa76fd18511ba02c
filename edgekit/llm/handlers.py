"""What language models lend the stages below them (``edgekit.core.handlers``): their bundle, their
emulated check and their tokens per second. Declared under the ``edgekit.handlers`` entry point
group in ``pyproject.toml``; importing this module registers them."""

from __future__ import annotations

from edgekit.core import handlers
from edgekit.llm import bundle
from edgekit.llm.emulated import verify_llm
from edgekit.llm.tokens_per_s import with_generation_rates

handlers.register(handlers.LANGUAGE_MODEL_BUNDLE, bundle)
handlers.register(handlers.LANGUAGE_MODEL_CHECK, verify_llm)
handlers.register(handlers.GENERATION_RATES, with_generation_rates)
