"""``edgekit import gguf:PATH``: a Llama-family GGUF file as an edgekit checkpoint artifact.

The artifact is what training writes (``checkpoint.pt``: plain float32 tensors + JSON config,
``manifest.json`` of kind checkpoint, model ``llama``, task ``language-modeling``) plus the
model's ``tokenizer.json`` (Hugging Face ``tokenizers``) and ``chat_template.jinja``, both
carried with their checksums. "fp32" here is the GGUF's own values dequantized (a Q4_1 file's
weights in float), the baseline every later figure compares with; the manifest says so and
records the GGUF's name, size, SHA-256, tensor types and special token ids.

``gguf:NAME`` names a GGUF shipped in an installed package (``PACKAGED``); the package is found,
never imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.outputs import safe_text, commit_dir
from edgekit.llm.gguf.arch import model_config, state_key
from edgekit.llm.gguf.file import GGUFFile, check_context, read_gguf
from edgekit.llm.gguf.phi3_layout import unfused
from edgekit.llm.gguf.packages import PACKAGED  # gguf:NAME (the ``llm-models`` extra)
from edgekit.formats.artifacts import TOKENIZER_FILE, Manifest, describe_file, finalize, load_manifest
from edgekit.core.device import select_device
from edgekit.core.fileio import sha256_file, write_text
from edgekit.llm.cached import torch_cached
from edgekit.llm.gguf.tokenizer import build_tokenizer, special_ids
from edgekit.llm.lm_runtime import llm_text
from edgekit.models.registry import check_model_memory, get_spec
from edgekit.sources.checkpoint import CHECKPOINT_FILE, save_checkpoint

PREFIX = "gguf:"
DEFAULT_CONTEXT = 1024  # the cache an import plans for (the GGUF's own may be 8k+: that much cache costs memory)
CHAT_TEMPLATE_FILE = "chat_template.jinja"
FP32_MEANS = "the GGUF's own values, dequantized to float32"


def is_gguf_source(source) -> bool:
    text = str(source)
    return text.startswith(PREFIX) or (text.endswith(".gguf") and Path(text).is_file())


def gguf_path(source: str | Path) -> Path:
    """The file a ``gguf:PATH`` / ``gguf:NAME`` source (or a plain ``.gguf`` path) names."""
    text = str(source)
    text = text[len(PREFIX):] if text.startswith(PREFIX) else text
    if not text:
        raise UsageError(f"gguf: needs a file or a packaged model name ({', '.join(PACKAGED)})")
    if text in PACKAGED:
        from edgekit.llm.gguf.packages import packaged_path

        return packaged_path(text)
    path = Path(text)
    if not path.exists():
        hint = f" (packaged models: {', '.join(PACKAGED)})" if "/" not in text and not text.endswith(".gguf") else ""
        raise UsageError(f"GGUF file not found: {safe_text(text)}{hint}")
    if path.is_dir():
        raise UsageError(f"{safe_text(text)} is a folder; name the .gguf file")
    return path


@dataclass
class OpenedGGUF:
    """A validated GGUF file and everything an import derives from it (nothing written yet)."""

    gguf: GGUFFile
    config: dict  # edgekit.llm.models.llama config, max_len included
    gguf_context: int
    tokenizer: object  # tokenizers.Tokenizer
    specials: dict  # bos_id, eos_id, ...
    chat_template: str | None

    def source_info(self, sha256: str | None = None) -> dict:
        g = self.gguf
        meta = g.metadata
        return {"format": "gguf", "file": g.path.name, "bytes": g.size, "sha256": sha256, "version": g.version,
                "name": _short(meta.get("general.name")), "architecture": g.architecture,
                "quant_types": g.quant_types(), "parameters": g.parameters(), "context_length": self.gguf_context,
                "license": _short(meta.get("general.license")), "fp32": FP32_MEANS,
                "int4_codes": int4_codes(g.quant_types())}

    def tokenizer_info(self) -> dict:
        tok = self.tokenizer
        names = {key: tok.id_to_token(value) for key, value in self.specials.items()}
        return {"file": TOKENIZER_FILE, "kind": "huggingface-tokenizers", **self.specials,
                "bos": names.get("bos_id"), "eos": names.get("eos_id"),
                "add_bos": bool(self.gguf.metadata.get("tokenizer.ggml.add_bos_token", False)),
                "chat_template": CHAT_TEMPLATE_FILE if self.chat_template else None}


def int4_codes(quant_types: dict) -> str:
    """What an int4 program made from this file does with its quantized matrices, in words."""
    from edgekit.llm.gguf.quants import INT4_GRID

    kept = [t for t in quant_types if t in INT4_GRID]
    other = [t for t in quant_types if t not in INT4_GRID and t not in ("F32", "F16", "BF16")]
    parts = []
    if kept:
        parts.append(f"{', '.join(kept)} codes kept exactly (each 32 values m + d*q, q in 0..15)")
    if other:
        parts.append(f"{', '.join(other)} in int8 per output channel (the file gives them more than 4 bits)" if kept
                     else f"{', '.join(other)} dequantized here and re-quantized to int4 for an int4 program")
    return "; ".join(parts) or "float weights: an int4 program quantizes them"


def _short(value) -> str | None:
    return safe_text(str(value))[:200] if isinstance(value, str) else None


def open_gguf(source: str | Path, context: int | None = None) -> OpenedGGUF:
    """Read, validate and size-check a GGUF source; nothing is dequantized yet."""
    from edgekit.llm.models.families import build_decoder

    if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 1):
        raise UsageError(f"--context must be a positive number of tokens, got {context!r}")
    gguf = read_gguf(gguf_path(source))
    try:
        config, gguf_context = model_config(gguf)
        config["max_len"] = check_context(context, gguf_context, DEFAULT_CONTEXT)
        where = safe_text(str(gguf.path))
        template = gguf.metadata.get("tokenizer.chat_template")
        if template is not None and not isinstance(template, str):
            raise InputFileError(f"{where}: tokenizer.chat_template is not text")
        from edgekit.llm.chat import check_template

        if template is not None:
            check_template(template, where)
        check_model_memory(f"{where} ({config['family']}, {config['n_layers']} layers)",
                           lambda: build_decoder(**config))
        tokenizer = build_tokenizer(gguf.metadata, where, config["vocab_size"])
        return OpenedGGUF(gguf, config, gguf_context, tokenizer, special_ids(gguf.metadata, where, config["vocab_size"]),
                          template)
    except BaseException:
        gguf.close()
        raise


def state_dict(opened: OpenedGGUF) -> dict:
    """Every tensor dequantized to float32, under ``edgekit.llm.models.llama``'s keys (tied: both keys, one tensor)."""
    import numpy as np
    import torch

    state = {}
    for name in opened.gguf.tensors:
        values = opened.gguf.array(name)
        if not np.isfinite(values).all():
            bad = int(values.size - np.isfinite(values).sum())
            raise InputFileError(f"{opened.gguf.path.name}: tensor {name} holds {bad:,} values that are NaN or "
                                 "infinite; the file is damaged (a model's weights are finite numbers)")
        for part, part_values in unfused(name, values, opened.config):  # Phi-3's fused tensors, split
            key = state_key(part)
            if key is not None:  # rope_freqs: read into the config
                state[key] = torch.from_numpy(part_values)
    if opened.config["tie_embeddings"]:
        state["output.weight"] = state["tok_embeddings.weight"]
    return state


def build_model(opened: OpenedGGUF):
    """The float decoder (eval mode) with the GGUF's weights, built in memory."""
    from edgekit.llm.models.families import build_decoder

    model = build_decoder(**opened.config)
    model.load_state_dict(state_dict(opened), strict=True)
    return model.eval()


def import_gguf(source: str | Path, out: str | Path, context: int | None = None, force: bool = False,
                progress=None):
    """Write ``source`` (``gguf:PATH``/``gguf:NAME``) as a checkpoint artifact at ``out``.

    Returns ``(folder, manifest)``. ``out`` is replaced only when it is a checkpoint artifact
    edgekit wrote (else ``force``); it is built under a temporary name and swapped in whole.
    """
    opened = open_gguf(source, context)
    try:
        spec = get_spec("llama")
        with commit_dir(out, "checkpoint", inputs=[opened.gguf.path], force=force) as work:
            if progress:
                progress(f"dequantizing {len(opened.gguf.tensors)} tensors")
            state = state_dict(opened)
            digest = sha256_file(opened.gguf.path)
            source_info = opened.source_info(digest)
            tokenizer_info = opened.tokenizer_info()
            save_checkpoint(work / CHECKPOINT_FILE, state,
                            {"model": "llama", "model_config": opened.config, "source": source_info,
                             "tokenizer_info": tokenizer_info})
            del state
            write_text(work / TOKENIZER_FILE, opened.tokenizer.to_str())
            if opened.chat_template:
                write_text(work / CHAT_TEMPLATE_FILE, opened.chat_template)
            config = opened.config
            manifest = Manifest(
                kind="checkpoint",
                model={"name": "llama", "config": config, "source": source_info, "tokenizer": tokenizer_info},
                inputs=spec.input_spec(config),
                outputs=spec.outputs,
                files=(describe_file(work, CHECKPOINT_FILE, "checkpoint",
                                     details={"weights": f"dequantized from GGUF ({', '.join(source_info['quant_types'])})",
                                              "int4_codes": source_info["int4_codes"],
                                              "fp32": FP32_MEANS, "context": config["max_len"]}),),
                task={"type": "language-modeling", "metric": "perplexity"},
                metrics={},
            )
            _ = manifest.to_dict()
            manifest = finalize(manifest, work)
    finally:
        opened.gguf.close()

    return load_manifest(out, verify=False)


def generate_from_gguf(source: str, context: int | None, device: str, threads: int | None):
    """What ``generate_text`` needs to run a ``gguf:`` source without writing anything: the text
    side (``lm_runtime.LLMText``), a loader of the float model with its cache (built in memory
    from the file), the cache length and the name to show."""
    opened = open_gguf(source, context)
    where = f"gguf:{opened.gguf.path.name}"
    text_side = llm_text(opened.tokenizer, opened.chat_template, opened.tokenizer_info())

    def open_lm():
        import torch


        if threads:
            torch.set_num_threads(threads)
        try:
            model = build_model(opened).to(select_device(device))
        finally:
            opened.gguf.close()
        return torch_cached(model, opened.gguf.path)

    return text_side, open_lm, opened.config["max_len"], where
