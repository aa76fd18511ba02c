"""Checkpoints: plain tensors + JSON-able metadata, read back with ``weights_only=True``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgekit.errors import InputFileError
from edgekit.fileio import atomic_path

CHECKPOINT_FILE = "checkpoint.pt"


def save_checkpoint(path: Path, state_dict: dict, meta: dict[str, Any]) -> None:
    import torch

    payload = {"model": {k: v.detach().cpu() for k, v in state_dict.items()}, "meta": json.dumps(meta)}
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load_checkpoint(path: Path) -> tuple[dict, dict[str, Any]]:
    """Load a checkpoint safely. Anything that needs code objects to unpickle is refused."""
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unsupported content"
        raise InputFileError(f"refusing to load {path}: it is not a plain-tensor checkpoint ({first})") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputFileError(f"checkpoint {path} is corrupt or truncated ({first})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("model"), dict):
        raise InputFileError(f"checkpoint {path} does not hold an edgekit model state")
    try:
        meta = json.loads(payload.get("meta", "{}"))
    except (TypeError, json.JSONDecodeError):
        raise InputFileError(f"checkpoint {path} has malformed metadata") from None
    return payload["model"], meta


def load_model_from_artifact(folder: Path, manifest) -> Any:
    """Rebuild a zoo model from a checkpoint artifact and load its weights (eval mode)."""
    from edgekit.models import build_model

    state, _ = load_checkpoint(folder / manifest.file("checkpoint").path)
    model = build_model(manifest.model["name"], manifest.model.get("config"))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise InputFileError(
            f"checkpoint in {folder} does not match model {manifest.model['name']!r}: {first}"
        ) from None
    return model.eval()
