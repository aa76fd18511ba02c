"""``edgekit quantize DIR --method int4|int8`` and ``edgekit export DIR --format
executorch`` for a language model imported from GGUF: an artifact holding one ``.pte`` program
with its KV cache (``edgekit.llm.program``), the tokenizer and chat template carried over, and
the program's quality measured against the float checkpoint it came from (``edgekit.llm.quality``).

A quantized program whose perplexity grew past its budget (``quality.PPL_BUDGET``: 1 % for int8,
10 % for int4) is written, but its manifest says so and ``recommended`` is false: it is never
passed off as fit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from edgekit.core.errors import UsageError
from edgekit.formats.artifacts import (
    Manifest, check_carried, describe_file, finalize, load_manifest, parent_ref, is_cached_family,
)
from edgekit.core.outputs import commit_dir
from edgekit.llm import program, quality
from edgekit.llm.cached import open_cached, program_cached, program_format
from edgekit.llm.lm_runtime import load_llm_text
from edgekit.sources.checkpoint import load_model_from_artifact

METHODS = {"int8": "int8", "int4": "int4"}  # --method -> program precision
CARRIED = ("tokenizer.json", "chat_template.jinja")
PROGRAM_FILE = "model.pte"


def is_llm_method(method: str) -> bool:
    return method in METHODS


def _source(source) -> tuple[Path, object]:
    folder, manifest = load_manifest(source)
    if not is_cached_family(manifest):
        raise UsageError(f"{folder} holds {manifest.model.get('name')}; --method {'/'.join(METHODS)} is for language "
                         "models imported from GGUF (edgekit import gguf:...)")
    if "checkpoint" not in manifest.formats():
        raise UsageError(f"{folder} already holds a language model's {', '.join(manifest.formats())} program; "
                         "generate, bench or serve it as it is (quantize and export start from the imported checkpoint)")
    return folder, manifest


def check_eval_tokens(tokens: int) -> None:
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= 1 << 16:
        raise UsageError(f"--eval-tokens must be between 0 (no quality check) and 65536, got {tokens!r}")


def write_program(source, out, precision: str, *, kind: str, group_size: int = 32, eval_tokens: int | None = None,
                  eval_text: Path | None = None, threads: int | None = None, force: bool = False, progress=None,
                  target: str | None = None, kernels: str | None = None):
    """Write the artifact; returns ``(folder, manifest)``."""
    eval_tokens = quality.DEFAULT_EVAL_TOKENS if eval_tokens is None else eval_tokens
    check_eval_tokens(eval_tokens)
    folder, manifest = _source(source)
    config = manifest.model.get("config", {})
    program.check_settings(precision, group_size, int(config.get("dim", 0)), int(config.get("hidden_dim", 0)))
    kernels = kernels or program.DEFAULT_KERNELS
    program.check_kernels(kernels)
    for name in CARRIED:
        check_carried(folder, manifest, name)
    text = quality.heldout_text(eval_text) if eval_tokens else None  # a bad --eval-text fails before any work
    say = progress or (lambda message: None)
    with commit_dir(out, kind, inputs=[folder], force=force) as work:
        import torch

        if threads:
            torch.set_num_threads(threads)
        model = load_model_from_artifact(folder, manifest)
        provenance = {"source": manifest.model.get("source", {}).get("file"), "parent_kind": manifest.kind}
        details = program.export_program(model, precision, work / PROGRAM_FILE, provenance, group_size=group_size,
                                         kernels=kernels, progress=say)
        del model
        for name in CARRIED:
            if (folder / name).is_file():
                shutil.copyfile(folder / name, work / name)
        if text is not None:
            say(f"measuring perplexity on {eval_tokens} held-out tokens")
            details["quality"] = _quality(folder, manifest, work / PROGRAM_FILE, details, text, eval_tokens, threads)
        entry = describe_file(work, PROGRAM_FILE, program_format(), precision=precision, details=details)
        result = Manifest(
            kind=kind,
            model=manifest.model,
            inputs=manifest.inputs,
            outputs=manifest.outputs,
            files=(entry,),
            task=manifest.task,
            quantization=None if precision == "fp32" else {"method": _method_name(precision),
                                                           "config": details["quantization"]},
            metrics={k: v for k, v in details.get("quality", {}).items() if k != "text"},
            parent=parent_ref(folder, manifest),
            target=target,
        )
        finalize(result, work)
    return load_manifest(out, verify=False)


def _method_name(precision: str) -> str:
    return next(name for name, value in METHODS.items() if value == precision)


def _quality(folder, manifest, pte: Path, details: dict, text: tuple[str, str], eval_tokens: int, threads) -> dict:
    """Perplexity of the program and of the float checkpoint on the same held-out tokens, and the
    share of positions where their greedy tokens agree."""
    body, where = text
    tokenizer = load_llm_text(folder, manifest).tokenizer
    ids = tokenizer.encode(body, add_special_tokens=False).ids[:eval_tokens]
    reference = open_cached(folder, manifest, "checkpoint", threads)
    program = program_cached(pte, details, threads)
    float_q = quality.measure(reference, ids)
    got = quality.measure(program, ids, reference=reference)
    growth = got.perplexity / float_q.perplexity - 1.0
    budget = quality.PPL_BUDGET.get(details["precision"], 0.001)
    return {
        "text": where,
        "scored_tokens": got.tokens,
        "perplexity": round(got.perplexity, 4),
        "float_perplexity": round(float_q.perplexity, 4),
        "perplexity_growth": round(growth, 5),
        "perplexity_budget": budget,
        "greedy_agreement": round(got.greedy_agreement, 4),
        "recommended": growth <= budget,
    }
