"""The checkpoint format: a model's weights as plain tensors + JSON-able metadata, read back with
``weights_only=True`` (nothing that needs code objects to unpickle is accepted).

Training writes it (``edgekit.train``); export, quantize, serve and generate read it, so it lives
below all of them, with the other model sources (above ``edgekit.models``, whose builders it calls).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

from edgekit.core.errors import EdgekitError, InputFileError
from edgekit.core.fileio import atomic_path, loads_json
from edgekit.formats.artifacts import CHECKPOINT
from edgekit.core.safeload import load_plain
from edgekit.models import build_model

CHECKPOINT_FILE = "checkpoint.pt"  # the model: best weights by validation metric + config


def save_checkpoint(path: Path, state_dict: dict, meta: dict[str, Any]) -> None:
    payload = {"model": {k: v.detach().cpu() for k, v in state_dict.items()}, "meta": json.dumps(meta)}
    save_payload(payload, path)


def save_payload(payload: dict, path: Path) -> None:
    """torch.save, atomically, with a full disk reported as the OSError it is (torch's own
    writer turns it into an opaque RuntimeError)."""
    import torch

    with atomic_path(path) as tmp:
        try:
            torch.save(payload, tmp)
        except RuntimeError as exc:
            free = shutil.disk_usage(tmp.parent).free
            if free < max(tmp.stat().st_size, 1 << 20):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from None
            raise EdgekitError(f"cannot write {path}: {str(exc).strip().splitlines()[0][:200]}") from None


def load_payload(path: Path) -> dict:
    """``torch.load(weights_only=True)`` with edgekit's errors for missing, hostile or cut files."""
    path = Path(path)
    payload = load_plain(path, "checkpoint")
    if not isinstance(payload, dict) or not isinstance(payload.get("model"), dict):
        raise InputFileError(f"checkpoint {path} does not hold an edgekit model state")

    meta = payload.get("meta", "{}")
    if not isinstance(meta, (str, bytes)) or len(meta) > 64 << 20:
        raise InputFileError(f"checkpoint {path} has malformed metadata")
    try:  # numbers past 64 bits, deep nesting: refused like any JSON edgekit reads
        payload["meta"] = loads_json(meta, f"metadata of checkpoint {path}")
    except InputFileError:
        raise InputFileError(f"checkpoint {path} has malformed metadata") from None
    if not isinstance(payload["meta"], dict):
        raise InputFileError(f"checkpoint {path} has malformed metadata (not a JSON object)")
    return payload


def load_checkpoint(path: Path) -> tuple[dict, dict[str, Any]]:
    """Load a checkpoint safely. Anything that needs code objects to unpickle is refused."""
    payload = load_payload(path)
    return payload["model"], payload["meta"]


def load_model_from_artifact(folder: Path, manifest) -> Any:
    """Rebuild a zoo model from a checkpoint artifact and load its weights (eval mode)."""
    state, _ = load_checkpoint(folder / manifest.file(CHECKPOINT).path)
    model = build_model(manifest.model["name"], manifest.model.get("config"))
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, TypeError, ValueError, AttributeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise InputFileError(
            f"checkpoint in {folder} does not match model {manifest.model['name']!r}: {first}"
        ) from None
    return model.eval()
