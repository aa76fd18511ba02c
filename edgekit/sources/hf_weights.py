"""The trained weights of a Hugging Face folder (``hf:FOLDER``), loaded as ``from_pretrained`` loads them.

Where they come from, in this order: ``--state-dict FILE``, else the folder's ``model.safetensors``,
its shard index ``model.safetensors.index.json``, ``pytorch_model.bin`` or
``pytorch_model.bin.index.json``. safetensors is the format (plain tensors by construction); a
PyTorch ``.bin`` is read with ``torch.load(weights_only=True)`` only, so pickled code is refused.

What ``from_pretrained`` tolerates is tolerated, and recorded: a buffer the model keeps out of its
state dict (``embeddings.position_ids``, saved by older transformers versions), weights of parts
the encoder does not have (a task model's head, ``cls.*``, ``classifier.*``: a
``BertForMaskedLM`` folder's ``bert.`` prefix is dropped), a tied weight stored once, the old
``LayerNorm.gamma``/``beta`` names, and a pooler missing from the file (the pooler is not part of
``last_hidden_state``). Anything else is a real mismatch and refused with one line naming the first
missing, unexpected and mis-shaped keys and how many there are.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import InputFileError, UsageError, first_line
from edgekit.core.fileio import read_json, sha256_file, signature_kind
from edgekit.core.safeload import load_plain

# In the order from_pretrained prefers them.
WEIGHT_FILES = (
    ("model.safetensors", "safetensors"),
    ("model.safetensors.index.json", "safetensors"),
    ("pytorch_model.bin", "pytorch"),
    ("pytorch_model.bin.index.json", "pytorch"),
)
MAX_SHARDS = 4096
MEMORY_SHARE = 0.6  # the weights are held beside the model while they are copied in
SHOWN = 3  # keys named per kind of mismatch
RECORDED = 20  # keys kept per list in the manifest
_SHARD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}\Z")


@dataclass(frozen=True)
class Weights:
    files: tuple[Path, ...]
    format: str  # safetensors | pytorch
    index: Path | None = None  # a sharded checkpoint's index

    @property
    def label(self) -> str:
        return str(self.index if self.index is not None else self.files[0])

    def describe(self) -> dict:
        about = {"kind": "pretrained", "format": self.format, "files": [p.name for p in self.files],
                 "sha256": [sha256_file(p) for p in self.files], "bytes": sum(p.stat().st_size for p in self.files)}
        if self.index is not None:
            about["index"] = self.index.name
        return about


def find_weights(folder: Path) -> Weights | None:
    """The weights a ``save_pretrained`` folder holds, or None when it holds none."""
    for name, _ in WEIGHT_FILES:
        if (folder / name).is_file():
            return weights_file(folder / name)
    return None


def weights_file(path: Path) -> Weights:
    """``--state-dict FILE`` for an ``hf:`` model: a .safetensors file, a shard index (``*.index.json``)
    or a plain-tensor PyTorch file."""
    if not path.is_file():
        raise InputFileError(f"weights file not found: {path}")
    if path.name.endswith(".index.json"):
        return _sharded(path)
    _check_safetensors_name(path)
    return Weights((path,), "safetensors" if _is_safetensors(path) else "pytorch")


def _check_safetensors_name(path: Path) -> None:
    """A file named .safetensors must start as one (its header length, then ``{``) before the
    safetensors library is handed it."""
    if path.suffix != ".safetensors":
        return

    try:
        other = signature_kind(path)
    except OSError as exc:
        raise InputFileError(f"cannot read weights file {path}: {exc.strerror or exc}") from None
    if other != "a safetensors file":
        shown = other or "not a safetensors file by its first bytes"
        raise InputFileError(f"weights file {path} is named .safetensors but is {shown}")


def _is_safetensors(path: Path) -> bool:
    """By name, or by content: 8 bytes of header length, then the JSON header."""
    if path.suffix == ".safetensors":
        return True
    with open(path, "rb") as fh:
        head = fh.read(9)
    if len(head) < 9:
        return False
    size = int.from_bytes(head[:8], "little")
    return head[8:9] == b"{" and 0 < size < path.stat().st_size


def _sharded(index: Path) -> Weights:
    doc = read_json(index, "shard index")
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InputFileError(f"{index} is not a shard index (no weight_map of tensor name -> shard file)")
    # a dict keeps the first-seen order and makes the duplicate check linear; the limit is checked as
    # the set grows, so an index naming 100,000 shards is refused after MAX_SHARDS + 1 of them
    shards: dict[str, None] = {}
    for key, name in weight_map.items():
        if not isinstance(name, str) or not _SHARD_NAME.match(name) or Path(name).name != name:
            raise InputFileError(f"{index}: tensor {str(key)[:80]!r} names the shard {str(name)[:80]!r}, "
                                 "not a file name beside the index")
        if name not in shards:
            shards[name] = None
            if len(shards) > MAX_SHARDS:
                raise InputFileError(f"{index} names more than {MAX_SHARDS} shards")
    files = tuple(index.parent / name for name in shards)
    for path in files:
        if not path.is_file():
            raise InputFileError(f"{index} names the shard {path.name}, which is not in {index.parent}")
        _check_safetensors_name(path)
    formats = {"safetensors" if _is_safetensors(p) else "pytorch" for p in files}
    if len(formats) > 1:
        raise InputFileError(f"{index} mixes safetensors and PyTorch shards")
    return Weights(files, formats.pop(), index)


def read_weights(weights: Weights) -> dict:
    """Every tensor of ``weights`` by name (shards merged; a name in two shards is refused)."""
    import psutil

    total = sum(p.stat().st_size for p in weights.files)
    available = psutil.virtual_memory().available
    if total > MEMORY_SHARE * available:
        raise InputFileError(f"{weights.label} holds {total / 2**30:.1f} GiB of weights; this machine has "
                             f"{available / 2**30:.1f} GiB available")
    state: dict = {}
    for path in weights.files:
        part = _read_safetensors(path) if weights.format == "safetensors" else _read_pytorch(path)
        twice = next((k for k in part if k in state), None)
        if twice is not None:
            raise InputFileError(f"{weights.label}: tensor {twice!r} is in two shards")
        state.update(part)
    if not state:
        raise InputFileError(f"{weights.label} holds no tensors")
    return state


def _read_safetensors(path: Path) -> dict:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise UsageError("reading .safetensors weights needs the safetensors package (pip install safetensors)") from None
    try:
        return load_file(os.fspath(path), device="cpu")
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - SafetensorError, OSError, ValueError on damaged files
        raise InputFileError(f"{path} is not a readable safetensors file ({first_line(exc, 160)})") from None


def _read_pytorch(path: Path) -> dict:
    import torch


    state = load_plain(path, "weights file")
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]  # an edgekit checkpoint payload
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise InputFileError(f"{path} does not hold a state dict (tensor name -> tensor)")
    return state


def _renamed(key: str) -> str:
    """The names very old checkpoints used for LayerNorm's parameters (transformers renames them too)."""
    if key.endswith(".gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith(".beta"):
        return key[: -len("beta")] + "bias"
    return key


def _matches(patterns, key: str) -> bool:
    return any(re.search(p, key) for p in (patterns or ()))


def _list(keys, limit: int = SHOWN) -> str:
    keys = list(keys)
    shown = ", ".join(keys[:limit])
    return shown + (f", ... and {len(keys) - limit} more" if len(keys) > limit else "")


def _dims(shape) -> str:
    return "x".join(map(str, shape)) or "scalar"


def describe_mismatch(missing, unexpected, shaped) -> str:
    """"2 missing (a, b); 1 unexpected (c); 1 with another shape (d: 3x4 in the file, 4x4 in the model)"."""
    parts = [f"{len(missing)} missing ({_list(missing)})" if missing else "",
             f"{len(unexpected)} unexpected ({_list(unexpected)})" if unexpected else "",
             f"{len(shaped)} with another shape ({_list(shaped, 2)})" if shaped else ""]
    return "; ".join(p for p in parts if p)


def strict_mismatch(model, state: dict) -> str | None:
    """What keeps ``state`` from loading into ``model`` with strict=True, in one line (None: it loads)."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shaped = [f"{k}: {_dims(v.shape)} in the file, {_dims(expected[k].shape)} in the model"
              for k, v in state.items() if k in expected and hasattr(v, "shape")
              and tuple(v.shape) != tuple(expected[k].shape)]
    return describe_mismatch(missing, unexpected, shaped) if missing or unexpected or shaped else None


def fit_weights(model, state: dict, where: str) -> dict:
    """Load ``state`` into the transformers ``model`` as ``from_pretrained`` would; refuse a real
    mismatch with one line. Returns what was loaded and what was tolerated, for the manifest."""
    expected = model.state_dict()
    children = {name for name, _ in model.named_children()}
    non_persistent = {name for name, _ in model.named_buffers()} - set(expected)
    state = {_renamed(k): v for k, v in state.items()}
    prefix = getattr(model, "base_model_prefix", "") or ""
    head: list[str] = []
    if prefix and not any(k.startswith(prefix + ".") for k in expected) \
            and any(k.startswith(prefix + ".") for k in state):
        # a task model's checkpoint (BertForMaskedLM: bert.*, cls.*) into its base model
        stripped = {}
        for key, value in state.items():
            if key.startswith(prefix + "."):
                stripped[key[len(prefix) + 1:]] = value
            else:
                head.append(key)
        state = stripped

    # tied weights: several names, one parameter; storing any one of them is storing all
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    tied = {name: names for names in groups.values() if len(names) > 1 for name in names}

    ignore_missing = getattr(model, "_keys_to_ignore_on_load_missing", None)
    ignore_unexpected = getattr(model, "_keys_to_ignore_on_load_unexpected", None)
    missing, unexpected, shaped = [], [], []
    tolerated = {"non_persistent_buffers": [], "unused": list(head), "tied": [], "not_in_file": []}
    for key, value in state.items():
        if key in expected:
            if tuple(value.shape) != tuple(expected[key].shape):
                shaped.append(f"{key}: {_dims(value.shape)} in the file, {_dims(expected[key].shape)} in the model")
        elif key in non_persistent:
            tolerated["non_persistent_buffers"].append(key)
        elif _matches(ignore_unexpected, key) or key.split(".")[0] not in children:
            tolerated["unused"].append(key)  # a part this model does not have (a head, a pooler)
        else:
            unexpected.append(key)
    for key in expected:
        if key in state:
            continue
        if any(other in state for other in tied.get(key, ())):
            tolerated["tied"].append(key)
        elif _matches(ignore_missing, key) or key.startswith("pooler."):
            tolerated["not_in_file"].append(key)  # not part of last_hidden_state: keeps its initial values
        else:
            missing.append(key)
    if missing or unexpected or shaped:
        raise InputFileError(f"{where} does not match the {type(model).__name__} its config builds: "
                             + describe_mismatch(missing, unexpected, shaped))
    model.load_state_dict({k: v for k, v in state.items() if k in expected}, strict=False)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    dtypes = sorted({str(v.dtype).replace("torch.", "") for k, v in state.items() if k in expected})
    report = {"loaded": sum(k in expected for k in state), "dtypes": dtypes}
    for kind, keys in tolerated.items():
        if keys:
            report[kind] = {"count": len(keys), "keys": keys[:RECORDED]}
    heads = [k for k in tolerated["unused"] if not k.startswith("pooler.")]
    if heads:  # the user may have expected a task head to count
        report["warning"] = (f"{where}: {len(heads)} weight(s) of parts the encoder does not have were not loaded "
                             f"({_list(heads)}); edgekit quantizes the encoder's last_hidden_state")
    return report
