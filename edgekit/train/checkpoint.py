"""Training state for resuming (``last.pt``): model, optimizer, scaler, step, RNG, in the
checkpoint format's safe container (``edgekit.sources.checkpoint``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgekit.core.errors import InputFileError
from edgekit.sources.checkpoint import load_payload, save_payload

STATE_FILE = "last.pt"  # everything a resumed run needs: model, optimizer, scaler, step, RNG


def save_train_state(
    path: Path, model_state: dict, optimizer_state: dict, rng: dict, meta: dict[str, Any]
) -> None:
    """Write the resumable state atomically: tensors as tensors, everything else as JSON.

    The optimizer's per-parameter tensors go under ``optimizer``; its param groups and any
    non-tensor per-parameter values go into the JSON ``meta``.
    """
    import torch

    tensors: dict[str, dict] = {}
    scalars: dict[str, dict] = {}
    for key, values in optimizer_state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors.setdefault(str(key), {})[name] = value.detach().cpu()
            else:
                scalars.setdefault(str(key), {})[name] = value
    meta = {
        **meta,
        "optimizer": {
            "param_groups": optimizer_state["param_groups"],
            "scalars": scalars,
            "keys": [str(k) for k in optimizer_state["state"]],
            "int_keys": all(isinstance(k, int) for k in optimizer_state["state"]),
        },
    }
    payload = {
        "model": {k: v.detach().cpu() for k, v in model_state.items()},
        "optimizer": tensors,
        "rng": {k: v.cpu() for k, v in rng.items()},
        "meta": json.dumps(meta),
    }
    save_payload(payload, path)


def load_train_state(path: Path) -> dict[str, Any]:
    """The inverse of ``save_train_state``: model, optimizer (a ``state_dict``), rng, meta."""
    payload = load_payload(path)
    meta = payload["meta"]
    try:
        info = meta.pop("optimizer")
        convert = int if info["int_keys"] else str
        state = {}
        for key in info["keys"]:
            state[convert(key)] = {**payload["optimizer"].get(key, {}), **info["scalars"].get(key, {})}
        optimizer = {"state": state, "param_groups": info["param_groups"]}
        rng = dict(payload["rng"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InputFileError(f"{path} is not an edgekit training state (no optimizer/RNG state)") from None
    return {"model": payload["model"], "optimizer": optimizer, "rng": rng, "meta": meta}
