"""``describe``: what an artifact or bundle holds, as one JSON-able summary (``edgekit info``).

Reads only the manifest (``manifest.json``) or bundle description (``bundle.json``) and the file
sizes on disk; no model is loaded, so it is quick and safe on any folder a user points at.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.errors import InputFileError
from edgekit.bundle.layout import read_bundle_json
from edgekit.formats.artifacts import load_manifest
from edgekit.llm.gguf.file import llama_config, read_gguf
from edgekit.llm.gguf.importer import gguf_path, is_gguf_source

SUMMARY_SCHEMA = "edgekit.cli.describe"
SUMMARY_VERSION = 1


def describe(path: str | Path, verify: bool = False) -> dict:
    """Summary of the artifact folder, model file inside one, or bundle folder at ``path``.

    ``verify``: also check every model file against its recorded size and SHA-256.
    """
    if is_gguf_source(path) or str(path).endswith(".gguf"):
        return gguf_summary(path)
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"artifact not found: {path}")
    folder = path if path.is_dir() else path.parent
    summary = _artifact(path, verify)
    if (folder / "bundle.json").is_file():
        summary.update(_bundle(folder))
    return summary


def manifest_summary(folder: Path, manifest) -> dict:
    """The summary of a loaded manifest (also what train/quantize/export print with ``--json``)."""
    files = []
    for entry in manifest.files:
        metrics = entry.metrics or {}
        fidelity = metrics.get("fidelity") or metrics.get("parity") or {}
        files.append({
            "path": entry.path,
            "format": entry.format,
            "precision": entry.precision,
            "bytes": entry.total_bytes,
            "sha256": entry.sha256,
            "variant": (entry.details or {}).get("variant"),
            "metric": metrics.get("metric") or ("accuracy" if metrics.get("accuracy") is not None else None),
            "accuracy": metrics.get("accuracy"),
            "float_accuracy": metrics.get("float_accuracy"),
            "accuracy_drop_points": metrics.get("accuracy_drop_points") if metrics.get("accuracy") is not None else None,
            "fidelity": {k: fidelity[k] for k in ("cosine", "sqnr_db", "top1_agreement", "evidence", "evidence_note",
                                                  "verdict", "headline") if k in fidelity} or None,
        })
    quantization = manifest.quantization or {}
    recipe = None
    if quantization:
        recipe = {
            "method": quantization.get("method"),
            "config": quantization.get("config"),
            "recipe_sha256": quantization.get("recipe_sha256"),
            "calibration": quantization.get("calibration"),
        }
    return {
        "schema": SUMMARY_SCHEMA,
        "schema_version": SUMMARY_VERSION,
        "type": "artifact",
        "path": str(folder),
        "kind": manifest.kind,
        "model": manifest.model.get("name"),
        "task": manifest.task.get("type"),
        "target": manifest.target,
        "recipe": recipe,
        "files": files,
        "total_bytes": sum(f["bytes"] for f in files),
        "metrics": manifest.metrics,
        "inputs": [spec.to_dict() for spec in manifest.inputs],
        "outputs": list(manifest.outputs),
        "provenance": {"created": manifest.created, "versions": manifest.versions, "parent": manifest.parent},
        "language_model": _language_model(folder, manifest),
    }


def _language_model(folder: Path, manifest) -> dict | None:
    """What a pretrained language model is (a llama imported from GGUF): None for other models."""
    source = manifest.model.get("source") if isinstance(manifest.model.get("source"), dict) else None
    if manifest.model.get("name") != "llama":
        return None
    config = manifest.model.get("config") or {}
    tokenizer = manifest.model.get("tokenizer") if isinstance(manifest.model.get("tokenizer"), dict) else {}
    return _llm_facts(config, source or {}, bool(tokenizer.get("chat_template")) or (Path(folder) / "chat_template.jinja").is_file())


def _llm_facts(config: dict, source: dict, chat: bool) -> dict:
    return {
        "architecture": source.get("architecture", "llama"),
        "parameters": source.get("parameters"),
        "layers": config.get("n_layers"),
        "heads": config.get("n_heads"),
        "kv_heads": config.get("n_kv_heads"),
        "dim": config.get("dim"),
        "context": config.get("max_len"),
        "model_context": source.get("context_length"),
        "vocabulary": config.get("vocab_size"),
        "gguf": {k: source.get(k) for k in ("file", "name", "bytes", "sha256", "quant_types")} if source else None,
        "chat_template": chat,
    }


def gguf_summary(path) -> dict:
    """``edgekit info`` on a ``.gguf`` file (or ``gguf:NAME``): what the header says, validated,
    without dequantizing anything."""
    gguf = read_gguf(gguf_path(path))
    try:
        config, context = llama_config(gguf)
        source = {"architecture": gguf.architecture, "parameters": gguf.parameters(), "context_length": context,
                  "file": gguf.path.name, "name": gguf.metadata.get("general.name"), "bytes": gguf.size,
                  "sha256": None, "quant_types": gguf.quant_types()}
        facts = _llm_facts({**config, "max_len": context}, source,
                           isinstance(gguf.metadata.get("tokenizer.chat_template"), str))
        return {"schema": SUMMARY_SCHEMA, "schema_version": SUMMARY_VERSION, "type": "gguf", "path": str(gguf.path),
                "version": gguf.version, "tensors": len(gguf.tensors), "language_model": facts}
    finally:
        gguf.close()


def _artifact(path: Path, verify: bool) -> dict:
    folder, manifest = load_manifest(path, verify=verify)
    summary = manifest_summary(folder, manifest)
    summary["verified"] = verify
    return summary


def _bundle(folder: Path) -> dict:
    """What bundle.json adds to the bundled manifest: the runtime pinned for the board, the host check."""
    info = read_bundle_json(folder)
    native = info.get("native") if isinstance(info.get("native"), dict) else None
    needs = (f"no Python: {native.get('runner')} for {native.get('arch')} with {len(native.get('libraries') or [])} "
             f"{native.get('runtime_label') or 'ExecuTorch'} libraries in lib/" if native else
             f"Python {info.get('python_version')} with pip, then requirements.txt ({', '.join(info.get('requirements') or [])})")
    return {
        "type": "bundle",
        "target": info["target"],
        "bundle": {
            "variant": info.get("variant"),
            "runtime": info.get("runtime"),
            "kind": "native" if native else "python",
            "board_needs": needs,
            "native": native,
            "python_platform": info.get("python_platform"),
            "python_version": info.get("python_version"),
            "host_check": info.get("host_check"),
            "folder_bytes": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()),
            "created": info.get("created"),
        },
    }
