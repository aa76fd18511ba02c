"""Model inputs: specs (the manifest's, else the model's own), seeded random arrays, ``.npz`` files,
and the reference cases of a ``reference.npz``."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

from .errors import BoardUsageError, first_line
from .facts import MIB, available_mb
from .manifest import MANIFEST_NAME

INPUT_MEMORY_SHARE = 0.5  # random inputs may take at most this share of the memory available now


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"input=1x1x8x8"`` -> ``("input", (1, 1, 8, 8))``; raises ValueError with a clear message."""
    name, sep, dims = str(text).partition("=")
    name, dims = name.strip(), dims.strip()
    if not sep or not name or not dims:
        raise ValueError(f"malformed shape {text!r}; expected NAME=DIMS such as input=1x1x8x8")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        raise ValueError(f"malformed shape {text!r}; dimensions must be integers joined by 'x'") from None
    if any(d <= 0 for d in shape):
        raise ValueError(f"malformed shape {text!r}; every dimension must be positive")
    return name, shape


def resolve_specs(runtime, manifest: dict | None) -> tuple[list[dict], str, list[str]]:
    """The input specs to feed ``runtime``'s model, where they came from, and notes.

    The manifest wins when it fits the model. How it must fit is the runtime's ``spec_match``:
    "names" (the model names its inputs: the manifest must list the same names), "at_most" (the
    model knows only how many inputs it takes, maybe not even that) or "count" (the model
    bounds every axis; the manifest names them and must list as many inputs).
    """
    model_specs = runtime.input_specs()
    listed = []
    if manifest and isinstance(manifest.get("inputs"), list):
        for raw in manifest["inputs"]:
            try:
                listed.append({
                    "name": str(raw["name"]),
                    "shape": [None if d is None else int(d) for d in raw["shape"]],
                    "dtype": str(raw.get("dtype", "float32")),
                    "dynamic_axes": {int(k): str(v) for k, v in dict(raw.get("dynamic_axes") or {}).items()},
                    "value_range": _value_range(raw.get("value_range")),
                })
            except (KeyError, TypeError, ValueError, OverflowError) as exc:
                raise BoardUsageError(f"malformed input spec in {MANIFEST_NAME}: {first_line(exc)[:200]}") from None
    match = runtime.spec_match
    if not listed:
        if match == "count":
            note = (f"no {MANIFEST_NAME} lists the program: axis 0 of each input is taken as its batch axis, "
                    "the other axes at the program's planned (largest) sizes")
            return model_specs, "model", [note]
        return model_specs, "model", []
    if match == "names" and sorted(s["name"] for s in listed) != sorted(s["name"] for s in model_specs):
        names = ", ".join(s["name"] for s in model_specs)
        return model_specs, "model", [f"{MANIFEST_NAME} inputs do not match the model's ({names}); used the model's"]
    if match == "at_most" and model_specs and len(listed) > len(model_specs):
        raise BoardUsageError(f"{MANIFEST_NAME} lists {len(listed)} inputs; the model takes {len(model_specs)}")
    if match == "count" and len(listed) != len(model_specs):
        raise BoardUsageError(f"{MANIFEST_NAME} lists {len(listed)} inputs; the program takes {len(model_specs)}")
    return listed, "manifest", []


def _value_range(raw) -> tuple[float, float] | None:
    """A manifest's ``value_range`` ([low, high) of valid values, e.g. token ids), if usable."""
    try:
        low, high = float(raw[0]), float(raw[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return (low, high) if math.isfinite(low) and math.isfinite(high) and high > low else None


def _dtype(name: str):
    import numpy as np

    try:
        return np.dtype(name)
    except TypeError:
        raise BoardUsageError(f"unsupported input dtype {name!r}") from None


def _random(shape, dtype, rng, value_range=None):
    """Seeded random data; within ``value_range`` [low, high) when the manifest gives one."""
    if dtype.kind == "f":
        if value_range:
            return rng.uniform(value_range[0], value_range[1], size=shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        low, high = (math.ceil(value_range[0]), math.ceil(value_range[1])) if value_range else (0, 2)
        return rng.integers(low, max(high, low + 1), size=shape).astype(dtype)  # default: safe as ids
    raise BoardUsageError(f"cannot make random data of dtype {dtype}")


def _check_shape(spec: dict, shape: tuple[int, ...]) -> None:
    known = spec.get("shape")
    if known is None:
        return
    if len(known) != len(shape):
        raise BoardUsageError(f"input {spec['name']!r} has rank {len(known)}; --shape gives {len(shape)} dims")
    for axis, (want, got) in enumerate(zip(known, shape)):
        if spec.get("bounded") and want is not None and got > want:  # a lone .pte: its planned sizes are bounds
            raise BoardUsageError(f"input {spec['name']!r} axis {axis} is at most {want}; --shape gives {got}")
        if not spec.get("bounded") and want is not None and want != got:
            raise BoardUsageError(f"input {spec['name']!r} has fixed axis {axis} = {want}; --shape gives {got}")


def load_npz(path: str) -> dict:
    import numpy as np

    if not Path(path).is_file():
        raise BoardUsageError(f"input file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise BoardUsageError(f"{path} is not a readable .npz of plain arrays ({first_line(exc)})") from None


def make_inputs(specs: list[dict], shapes: dict, npz: dict | None, batch: int, seed: int) -> tuple[dict, int, list[str]]:
    """Arrays by input name (model order), the batch for throughput, and notes."""
    import numpy as np

    names = [s["name"] for s in specs]
    given = {**(npz or {}), **shapes}
    unknown = [n for n in given if n not in names]
    if unknown:
        source = "--input file" if npz and unknown[0] in npz else "--shape"
        raise BoardUsageError(f"{source} names input {unknown[0]!r}, which the model does not have (inputs: {', '.join(names) or 'none'})")
    rng = np.random.default_rng(seed)
    arrays, notes = {}, []
    _check_input_memory(specs, shapes, npz, batch)
    for spec in specs:
        name, dtype = spec["name"], _dtype(spec.get("dtype") or "float32")
        if npz is not None:
            if name not in npz:
                raise BoardUsageError(f"--input file has no array {name!r} (the model's inputs: {', '.join(names)})")
            array = npz[name]
            if array.dtype != dtype:
                notes.append(f"input {name!r} cast from {array.dtype} to {dtype}")
                array = array.astype(dtype)
            arrays[name] = np.ascontiguousarray(array)
            continue
        if name in shapes:
            shape = tuple(shapes[name])
            _check_shape(spec, shape)
        elif spec.get("shape") is None:
            raise BoardUsageError(f"no shape known for input {name!r} (no {MANIFEST_NAME} beside the model); pass --shape {name}=1x3x224x224")
        else:
            shape = tuple(batch if d is None else d for d in spec["shape"])
        arrays[name] = _random(shape, dtype, rng, spec.get("value_range"))
    first = specs[0] if specs else None
    if first and first.get("shape") and first["shape"][0] is None and arrays[first["name"]].ndim:
        batch = int(arrays[first["name"]].shape[0])
    return arrays, batch, notes


def _check_input_memory(specs: list[dict], shapes: dict, npz: dict | None, batch: int) -> None:
    """Refuse inputs that could not be allocated (a huge --batch or --shape) before trying."""
    if npz is not None:
        return  # already in memory
    total, largest = 0, ("", ())
    for spec in specs:
        if spec["name"] in shapes:
            shape = tuple(shapes[spec["name"]])
        elif spec.get("shape") is not None:
            shape = tuple(batch if d is None else d for d in spec["shape"])
        else:
            continue
        size = math.prod(shape) * _dtype(spec.get("dtype") or "float32").itemsize
        total += size
        largest = max(largest, (spec["name"], shape), key=lambda item: math.prod(item[1]) if item[1] else 0)
    available = available_mb()
    if available is None or total / MIB <= available * INPUT_MEMORY_SHARE:
        return
    raise BoardUsageError(
        f"the inputs need {total / MIB:,.0f} MiB of memory (input {largest[0]!r} of shape "
        f"{'x'.join(str(d) for d in largest[1])}), more than this host can spare ({available:,.0f} MiB available); "
        "lower --batch or --shape"
    )


def read_reference(path: str | Path, need_outputs: bool = True,
                   every_output: bool = False) -> dict[int, tuple[dict, object]]:
    """{batch: ({input name: array}, float output or None)} from a reference.npz, batches ascending;
    with ``every_output`` the float outputs are the list of every output the file holds.

    Keys are ``b{batch}/input/{name}``, ``b{batch}/output`` (the first output) and
    ``b{batch}/outputs/{k}`` (output k = 1, 2, ... where the model has more: older files hold the
    first alone); an input name is everything after ``input/`` (ONNX names may hold ``/``, e.g.
    ``gpu_0/data_0``)."""
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise BoardUsageError(f"reference data not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            items = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise BoardUsageError(f"cannot read {path}: {first_line(exc)}") from None
    cases: dict[int, tuple[dict, dict]] = {}
    for key, value in items.items():
        head, _, rest = key.partition("/")
        kind, _, name = rest.partition("/")
        if not head.startswith("b") or not head[1:].isdigit() or not 0 < int(head[1:]) < 1_000_000:
            raise BoardUsageError(f"{path}: unexpected array {key[:80]!r}")
        inputs, outputs = cases.setdefault(int(head[1:]), ({}, {}))
        if kind == "input" and name:
            inputs[name] = value
        elif kind == "output" and not name:
            outputs[0] = value
        elif kind == "outputs" and _output_index(name):
            outputs[int(name)] = value
        else:
            raise BoardUsageError(f"{path}: unexpected array {key[:80]!r}")
    if not cases or any(not ins or (need_outputs and 0 not in outs) for ins, outs in cases.values()):
        raise BoardUsageError(f"{path} lacks inputs or outputs for some batch")
    for batch, (_, outs) in cases.items():
        if outs and sorted(outs) != list(range(len(outs))):
            raise BoardUsageError(f"{path}: batch {batch} lacks output {min(set(range(len(outs))) - set(outs))}")
    if len({len(outs) for _, outs in cases.values() if outs}) > 1:
        raise BoardUsageError(f"{path}: its batches hold different numbers of outputs")
    return {batch: (ins, [outs[k] for k in sorted(outs)] if every_output else outs.get(0))
            for batch, (ins, outs) in sorted(cases.items())}


def output_key(batch: int, index: int) -> str:
    """The key of output ``index`` of batch ``batch`` in a reference or probe .npz."""
    return f"b{batch}/output" if index == 0 else f"b{batch}/outputs/{index}"


def output_of_key(key: str) -> tuple[int, int] | None:
    """(batch, output index) of an output key (``output_key``'s inverse); None for any other key."""
    head, _, rest = key.partition("/")
    kind, _, name = rest.partition("/")
    if not head.startswith("b") or not head[1:].isascii() or not head[1:].isdigit():
        return None
    if kind == "output" and not name:
        return int(head[1:]), 0
    if kind == "outputs" and _output_index(name):
        return int(head[1:]), int(name)
    return None


def _output_index(text: str) -> bool:
    """``outputs/{k}``: k a plain decimal 1..9999 (no sign, no leading zero)."""
    return text.isascii() and text.isdigit() and not text.startswith("0") and len(text) <= 4
