"""The decoder families a GGUF's ``general.architecture`` maps to (``config["family"]``)."""

from __future__ import annotations

from edgekit.models.gemma import Gemma3
from edgekit.models.llama import Llama
from edgekit.models.qwen import Qwen2, Qwen3

FAMILIES = {"llama": Llama, "qwen2": Qwen2, "qwen3": Qwen3, "gemma3": Gemma3}
