"""The decoder families a GGUF's ``general.architecture`` maps to (``config["family"]``), and the
zoo entry ``llama`` that builds any of them: one entry, so every stage that runs a language model
with a KV cache (generate, serve, bench, the int4/int8 programs) takes them all."""

from __future__ import annotations

import inspect

from edgekit.core.input_spec import InputSpec
from edgekit.llm.models.gemma import Gemma3
from edgekit.llm.models.llama import Llama
from edgekit.llm.models.phi3 import Phi3
from edgekit.llm.models.qwen import Qwen2, Qwen3
from edgekit.models.registry import ModelSpec, register_model

FAMILIES = {"llama": Llama, "qwen2": Qwen2, "qwen3": Qwen3, "gemma3": Gemma3, "phi3": Phi3}
# keys only some families use, with the value that means "not used"
FAMILY_DEFAULTS = {"rope_freq_factors": [], "sliding_window": 0, "sliding_pattern": 0, "rope_local_theta": 10000.0,
                   "rope_linear_factor": 1, "rope_short_factors": [], "rope_long_factors": [],
                   "rope_original_context": 0, "rope_attn_factor": 1.0}


def build_decoder(family: str = "llama", **config) -> Llama:
    """The decoder of ``family`` (llama, qwen2, qwen3, gemma3, phi3) from a config; keys another family
    uses must keep their defaults."""
    if family not in FAMILIES:
        raise ValueError(f"unknown decoder family {family!r}; known: {', '.join(FAMILIES)}")
    cls = FAMILIES[family]
    accepted = inspect.signature(cls).parameters
    foreign = [k for k, v in config.items() if k not in accepted and v != FAMILY_DEFAULTS.get(k)]
    if foreign:
        raise ValueError(f"a {family} decoder has no {', '.join(foreign)}")
    return cls(**{k: v for k, v in config.items() if k in accepted})


def _token_input(cfg) -> tuple[InputSpec, ...]:
    return (InputSpec("tokens", (None, None), "int64", {0: "batch", 1: "sequence"}),)


register_model(
    ModelSpec(
        name="llama",
        factory=build_decoder,
        default_config={"family": "llama", "vocab_size": 256, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                        "hidden_dim": 128, "head_dim": 0, "rope_theta": 10000.0, "norm_eps": 1e-5,
                        "max_len": 256, "tie_embeddings": True, **FAMILY_DEFAULTS},
        input_spec=_token_input,
        outputs=("logits",),
        task={"type": "language-modeling", "dataset": "pydoc-text", "metric": "next_token_accuracy"},
        description="Llama-family decoders (Llama, Qwen2, Qwen3, Gemma 3, Phi-3: GQA, RoPE, a static KV cache); "
                    "pretrained ones come from GGUF files",
        onnx_exporter="dynamo",
    )
)
