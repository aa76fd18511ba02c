"""The manifest beside a model file (read raw: edgekit's own loader is not on a board), which
runtime a file needs, and the facts about the file a result records."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .errors import BoardUsageError
from .runtimes import RUNTIMES

FORMATS = tuple(RUNTIMES)  # the formats the board's runtimes run (a test holds them to edgekit's table)

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "edgekit.manifest"
MAX_MANIFEST_BYTES = 16 << 20
# An ExecuTorch program is a flatbuffer whose file identifier, at bytes 4..8, is "ET" and a
# two-digit schema version (executorch's schema/program.fbs: file_identifier "ET12").
PTE_IDENTIFIER = b"ET"


def read_json_object(path: Path) -> dict:
    """A JSON object from ``path`` (bounded in size); BoardUsageError for anything else."""
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise BoardUsageError(f"{path} is larger than {MAX_MANIFEST_BYTES >> 20} MiB; not an edgekit file")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BoardUsageError(f"{path} is not valid JSON ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise BoardUsageError(f"{path} must hold a JSON object")
    return data


def read_manifest_entry(model: Path) -> tuple[dict | None, dict | None, list[str]]:
    """(manifest, this file's entry, notes) from ``manifest.json`` beside ``model``, if it lists it."""
    path = model.parent / MANIFEST_NAME
    if not path.is_file():
        return None, None, []
    manifest = read_json_object(path)
    if manifest.get("schema") != MANIFEST_SCHEMA:
        return None, None, [f"{path} is not an edgekit manifest; ignored"]
    for entry in manifest.get("files") or []:
        if isinstance(entry, dict) and (model.parent / str(entry.get("path", ""))).resolve() == model.resolve():
            return manifest, entry, []
    return None, None, [f"{path} does not list {model.name}; ignored"]


def detect_format(model: Path, entry: dict | None, override: str | None) -> str:
    """The runtime's format for ``model``: ``override``, else its manifest entry's, else its name or content."""
    from .runtimes import detect

    if override:
        return override
    listed = (entry or {}).get("format")
    if listed == "checkpoint":
        raise BoardUsageError(f"{model} is a training checkpoint, not a runnable model; export it first")
    if listed in RUNTIMES:
        return listed
    found = detect(model)
    if found is None:
        raise BoardUsageError(f"cannot tell the runtime for {model.name}; expected .onnx, TorchScript .pt or "
                              "ExecuTorch .pte (or pass --format)")
    return found


def is_executorch_program(path: Path) -> bool:
    """Whether ``path`` starts like an ExecuTorch program (its flatbuffer file identifier)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return len(head) == 8 and head[4:6] == PTE_IDENTIFIER and head[6:8].isdigit()


def model_info(model: Path, fmt: str, entry: dict | None) -> dict:
    entry = entry or {}
    metrics = entry.get("metrics") if isinstance(entry.get("metrics"), dict) else {}
    details = entry.get("details") if isinstance(entry.get("details"), dict) else {}

    def metric(key):
        value = metrics.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    digest = hashlib.sha256()
    with open(model, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    size = model.stat().st_size
    for data in entry.get("data_files") or []:  # ONNX external data: part of the model's size
        name = data.get("path") if isinstance(data, dict) else None
        if isinstance(name, str) and name and os.path.basename(name) == name and (model.parent / name).is_file():
            size += (model.parent / name).stat().st_size
    return {
        "path": str(model), "format": fmt, "bytes": size, "sha256": digest.hexdigest(),
        "precision": str(entry.get("precision") or "fp32"), "variant": str(details.get("variant") or ""),
        "accuracy": metric("accuracy"), "float_accuracy": metric("float_accuracy"),
        "fidelity": fidelity_summary(metrics.get("fidelity")),
    }


def fidelity_summary(fidelity) -> dict | None:
    """What a gate's fidelity budgets read of a manifest's ``metrics.fidelity`` (edgekit quantize's
    record): the evidence, and per output its kind, cosine, SQNR, agreement and correlation."""
    if not isinstance(fidelity, dict) or not isinstance(fidelity.get("outputs"), list):
        return None

    def number(value):
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    outputs = {}
    for out in fidelity["outputs"]:
        if not isinstance(out, dict) or not isinstance(out.get("metrics"), dict):
            continue
        found = out["metrics"]
        agreement = found.get("top1_agreement", found.get("timestep_agreement"))
        outputs[str(out.get("output"))[:200]] = {
            "kind": str(out.get("kind"))[:20], "cosine": number(found.get("cosine")),
            "sqnr_db": number(found.get("sqnr_db")), "agreement": number(agreement),
            "correlation": number(found.get("correlation")), "ok": out.get("ok") is True}
    evidence = fidelity.get("evidence")
    return {"evidence": str(evidence)[:40] if evidence is not None else None, "outputs": outputs}
