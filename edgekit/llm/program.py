"""A Llama-family model as an ExecuTorch program with its KV cache inside: fp32, int8 or int4.

The program's ``forward(tokens (1, T), input_pos (T,), key_pos (S,))`` is ``Llama.step`` returning
the last position's logits (1, 1, vocab) (programs of older edgekits return every position's, (1, T,
vocab); readers take the last row of either): T up to ``max_prefill`` for the prompt, then 1 per new
token; ``key_pos`` is 0 .. S-1 with S the last fed position + 1, the cells attended to (programs of
older edgekits, and those with the fused kernels, have no third input); each layer's cache is a
mutable buffer of the program, the linears delegated to XNNPACK. The cache is updated and attended
to either with ExecuTorch's standard operators (``kernels="portable"``: an in-place ``index_put``
and attention over the positions fed so far; ``edgekit-run`` runs it on a board, no Python) or with
its fused LLM kernels (``kernels="llm"``: ``llama::update_cache``, ``llama::custom_sdpa``; only the
``executorch`` Python package has them).

Precisions (torchao ``quantize_`` on the module before ``torch.export``):

- ``int8``: every linear, int8 weights per output channel, activations quantized to int8 per token
  at run time ("8da8w", XNNPACK's qd8 x qc8w kernels). Weight-only int8 (float activations) is not
  kept int8 by the XNNPACK lowering: its dequantized weights are folded back into float constants
  (a SmolLM2-135M program came out at 541.7 MB, fp32's 621.7 MB);
- ``int4``: every linear but the LM head int4 weights in groups of ``group_size`` along the input,
  activations quantized to int8 per token at run time (torchao's "8da4w", XNNPACK's qd8 x qb4w
  kernels); linears still on their GGUF's 4-bit grid keep its codes exactly (``grid_int4``);
- both: the LM head int8 (8da8w: an int4 head cost SmolLM2 17 points of perplexity), untied from
  the token embedding, which is int8 per row (``quantized_decomposed::embedding_byte``); norms and
  rotary tables stay float.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.errors import UsageError, EdgekitError, first_line
from edgekit.formats import executorch
from edgekit.formats.executorch import native, quiet_imports
from edgekit.llm.grid_int4 import MARK, grid_codes, replace_grid_linears

PRECISIONS = ("fp32", "int8", "int4")
DEFAULT_GROUP_SIZE = 32
MAX_PREFILL = 128  # prompt tokens one call takes; longer prompts go in slices (edgekit.llm.cached)
# How the cache is updated and attended to: "portable", with ExecuTorch's standard operators (the
# native runner, edgekit-run, has their kernels: a board runs the program without Python); "llm",
# with ExecuTorch's fused LLM kernels, which only its Python package carries (host only).
KERNELS = ("portable", "llm")
DEFAULT_KERNELS = "portable"
# the manifest's "logits" of a program that returns only the last fed position's (older ones: every position's)
LAST_POSITION = "last position"
# the manifest's "attention" of a program whose third input, key_pos (S,) = 0 .. S-1, sizes its
# attention by the cells filled so far (older programs, and those with the fused kernels, read
# the whole cache or find the filled cells themselves)
FILLED_ONLY = "positions 0..S-1 of key_pos (S,)"


# The shared libraries of the executorch wheel that hold its LLM kernels (llama::update_cache,
# llama::custom_sdpa) and quantized kernels (quantized_decomposed::embedding_byte): loading one
# registers both its torch ops and its ExecuTorch kernels in this process.
KERNEL_LIBRARIES = (("executorch.extension.llm.custom_ops", "custom_ops_aot_lib"),
                    ("executorch.kernels.quantized", "quantized_ops_aot_lib"))
_LOADED: list = []


def load_runtime_kernels() -> None:
    """What running a program needs besides XNNPACK: the two kernel libraries, loaded by path (their
    Python packages would import the whole export toolchain)."""
    if _LOADED:
        return
    import importlib.util

    import torch


    native()  # the runtime first: the libraries register into it
    for package, stem in KERNEL_LIBRARIES:
        spec = importlib.util.find_spec(package)
        found = [lib for place in (spec.submodule_search_locations or []) if spec
                 for lib in sorted(Path(place).glob(f"lib{stem}.*")) if lib.suffix in (".so", ".dylib", ".dll")]
        if not found:
            raise EdgekitError(f"the executorch package has no {stem} library (needed by language-model programs)")
        torch.ops.load_library(str(found[0]))
    _LOADED.append(True)


def load_kernels() -> None:
    """``load_runtime_kernels`` plus the export-time ops (``quantized_decomposed`` meta kernels)."""
    quiet_imports()
    load_runtime_kernels()
    import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401 - quantized_decomposed ops
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - the llama ops' meta kernels


def check_settings(precision: str, group_size: int, dim: int, hidden_dim: int) -> None:
    if precision not in PRECISIONS:
        raise UsageError(f"unknown LLM precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")
    if precision == "int4":
        if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 16 \
                or group_size & (group_size - 1):
            raise UsageError(f"--group-size must be a power of two >= 16, got {group_size!r}")
        for width in (dim, hidden_dim):
            if width % group_size:
                raise UsageError(f"--group-size {group_size} does not divide the model's width {width}")


class Int8Embedding:
    """Builds the int8-per-row replacement of an ``nn.Embedding`` (a torch module, made lazily so
    this module imports without torch)."""

    @staticmethod
    def replace(embedding):
        import torch
        from torch import nn

        class QuantizedEmbedding(nn.Module):
            def __init__(self, weight):
                super().__init__()
                scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0
                self.register_buffer("weight", torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8))
                self.register_buffer("scales", scale.float())

            def forward(self, ids):
                return torch.ops.quantized_decomposed.embedding_byte(self.weight, self.scales, None, -127, 127, ids)

        return QuantizedEmbedding(embedding.weight.detach().float())


def quantize_module(model, precision: str, group_size: int = DEFAULT_GROUP_SIZE) -> dict:
    """Quantize ``model`` (an ``edgekit.llm.models.llama.Llama``) in place for export; what was done."""
    import torch

    from edgekit.llm.models.llama import join_shared_inputs

    joined = join_shared_inputs(model, _same_route(precision, group_size))
    shared = {"joined_linears": f"{joined} groups: each layer's query/key/value and gate/up projections as one "
                                "product over their shared input"} if joined else {}
    if precision == "fp32":
        return {"precision": "fp32", "weights": "float32 (the source's values)", **shared}
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    if model.output.weight is model.tok_embeddings.weight:  # tied: the head gets its own quantized copy
        model.output.weight = torch.nn.Parameter(model.tok_embeddings.weight.detach().clone())

    int8 = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    body = lambda module, fqn: isinstance(module, torch.nn.Linear) and fqn != "output" and not getattr(module, MARK, False)
    kept = 0
    if precision == "int8":
        quantize_(model, int8, filter_fn=body)
        linears = "int8 weights per output channel (symmetric), int8 activations per token at run time (torchao 8da8w)"
    else:
        kept = replace_grid_linears(model) if group_size == 32 else 0
        int4 = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group_size))
        linears = (f"int4 weights in groups of {group_size} (symmetric), int8 activations per token at run time "
                   "(torchao 8da4w)")
        if kept:
            # A file that stores some matrices in 4-bit blocks gave the others more bits on purpose
            # (Q4_K_M: Q5_0, Q6_K, Q8_0 for the sensitive ones); int4 would undo that choice. Gemma 3
            # 270M's program read 324 % worse than float that way, 0.9 % better with them in int8.
            higher = sum(1 for fqn, module in model.named_modules() if body(module, fqn))
            quantize_(model, int8, filter_fn=body)
            linears = (f"the source's 4-bit blocks in int4 ({kept} linears); the {higher} it stores in more bits "
                       "in int8 per output channel; int8 activations per token at run time") if higher else linears
        else:
            quantize_(model, int4, filter_fn=body)
    quantize_(model, int8, filter_fn=lambda module, fqn: fqn == "output" and isinstance(module, torch.nn.Linear))
    model.tok_embeddings = Int8Embedding.replace(model.tok_embeddings)
    return {
        "precision": precision,
        "linears": linears,
        **({"gguf_4bit_blocks_kept": kept, "gguf_4bit_blocks": "linears on the source's 4-bit grid (Q4_0, Q4_1, "
            "Q4_K) keep its codes and scales exactly: d*(q-8) in int4 plus an int8 linear over each 32-block's input "
            "sum (the m + 8d term)"}
           if kept else {}),
        "lm_head": "int8 weights per output channel, int8 activations per token (8da8w; untied from the embedding)",
        "embedding": "int8 per row (symmetric)",
        "float": ["RMSNorm weights", "rotary tables", "KV cache", "attention scores and softmax"],
        **({"group_size": group_size} if precision == "int4" else {}),
        **shared,
        "api": "torchao quantize_",
    }


def _same_route(precision: str, group_size: int):
    """Which linears may be joined: those the quantizer treats alike. An int4 program keeps a GGUF's
    4-bit blocks only where a whole linear is on the grid (``replace_grid_linears``), so a linear on
    it is never joined with one that is not (Q4_K_M files mix Q4_K with Q6_K projections)."""
    if precision != "int4" or group_size != 32:
        return lambda parts: True
    return lambda parts: len({grid_codes(part.weight) is None for part in parts}) == 1


def check_kernels(kernels: str) -> None:
    if kernels not in KERNELS:
        raise UsageError(f"unknown --kernels {kernels!r}; choose one of: {', '.join(KERNELS)}")


def export_program(model, precision: str, path: Path, provenance: dict, group_size: int = DEFAULT_GROUP_SIZE,
                   max_prefill: int = MAX_PREFILL, kernels: str = DEFAULT_KERNELS, progress=None) -> dict:
    """Quantize (in place), export and lower ``model`` to ``path``; the file's details for the manifest."""
    import torch

    from edgekit.llm.models.llama import CachedStep

    say = progress or (lambda message: None)
    check_settings(precision, group_size, model.tok_embeddings.embedding_dim,
                   model.layers[0].feed_forward.w1.out_features)
    check_kernels(kernels)
    load_kernels()
    max_prefill = max(1, min(max_prefill, model.max_len))
    model.eval()
    say(f"quantizing ({precision})")
    recipe = quantize_module(model, precision, group_size)
    model.use_fused_kernels(kernels == "llm")
    length = torch.export.Dim("tokens", min=1, max=max_prefill)
    examples = (torch.zeros(1, 2, dtype=torch.long), torch.arange(2))
    shapes = ({1: length}, {0: length})
    sized_attention = not model.fused_kernels  # the third input, key_pos: attention over the filled cells only
    if sized_attention:
        examples += (torch.arange(3),)
        shapes += ({0: torch.export.Dim("keys", min=1, max=int(model.max_len))},)
    say("torch.export")
    try:
        with torch.no_grad():
            program = torch.export.export(CachedStep(model), examples, dynamic_shapes=shapes, strict=False)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many types
        raise EdgekitError(f"torch.export cannot capture the language model: {first_line(exc, 300)}") from None
    finally:
        model.use_fused_kernels(False)
    details = {"variant": f"{precision}-executorch", "delegate": "xnnpack", "api": "torch.export",
               "kv_cache": "static, inside the program", "context": int(model.max_len), "max_prefill": max_prefill,
               "logits": LAST_POSITION, **({"attention": FILLED_ONLY} if sized_attention else {}),
               "quantization": recipe, "precision": precision, "kernels": kernels}
    say("lowering to XNNPACK (minutes for a 100M-parameter model)")
    details["delegated_subgraphs"] = executorch.lower(program, path, {**provenance, **details},
                                                      in_place_buffers=kernels == "portable")
    return details
