"""Request bodies -> validated input arrays, checked against the model's input spec.

Three body forms: JSON (``{"inputs": {"name": nested lists}}``, or ``{"inputs": nested lists}``
for a one-input model), a ``.npy`` file (one-input models) and an ``.npz`` archive (arrays by
input name). Every failure is an ``InputError`` with an HTTP status and a JSON-able detail
naming the input and what was expected; nothing here allocates more than the body's size
allows (``.npy`` headers that claim a huge shape are refused before any allocation).

Standalone: the standard library and numpy only (copied into bundles).
"""

from __future__ import annotations

import io
import json
import math
import re
import zipfile

import numpy as np

NPY_TYPES = ("application/x-npy", "application/npy")
NPZ_TYPES = ("application/x-npz", "application/npz", "application/zip")
_DTYPES = {"float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool"}


class InputError(Exception):
    """A request the model cannot take: ``status`` (413 or 422) and a JSON-able ``detail``."""

    def __init__(self, status: int, message: str, **detail):
        super().__init__(message)
        self.status = status
        self.detail = {"error": message, **detail}


def spec_from_dict(data: dict) -> dict:
    """A manifest input spec (``InputSpec.to_dict()``), normalised: int axis keys, tuple shape."""
    dtype = str(data.get("dtype") or "float32")
    if dtype not in _DTYPES:
        raise ValueError(f"input {data.get('name')!r} has dtype {dtype!r}, which serving does not support")
    shape = data.get("shape")
    value_range = data.get("value_range")
    return {
        "name": str(data["name"]),
        "shape": None if shape is None else tuple(None if d is None else int(d) for d in shape),
        "dtype": dtype,
        "dynamic_axes": {int(k): str(v) for k, v in (data.get("dynamic_axes") or {}).items()},
        "value_range": None if value_range is None else (float(value_range[0]), float(value_range[1])),
    }


def batchable(specs: list[dict]) -> bool:
    """Requests can be stacked along axis 0 when every input's first axis is dynamic."""
    return bool(specs) and all(s["shape"] is not None and len(s["shape"]) >= 1 and s["shape"][0] is None for s in specs)


# -- decoding ------------------------------------------------------------------------------------


def decode(body: bytes, content_type: str, specs: list[dict], max_bytes: int) -> dict[str, np.ndarray]:
    """The arrays in ``body`` by input name (not yet validated against ``specs``)."""
    kind = (content_type or "application/json").split(";")[0].strip().lower()
    if kind in NPY_TYPES or (kind == "application/octet-stream" and body[:6] == b"\x93NUMPY"):
        if len(specs) != 1:
            raise InputError(422, "a .npy body holds one array; this model has several inputs: send .npz or JSON",
                             inputs=[s["name"] for s in specs])
        return {specs[0]["name"]: read_npy(body, specs[0]["name"])}
    if kind in NPZ_TYPES or (kind == "application/octet-stream" and body[:2] == b"PK"):
        return read_npz(body, max_bytes)
    if kind in ("application/json", "text/json") or kind.endswith("+json"):
        return read_json(body, specs)
    raise InputError(415, f"unsupported content type {kind!r}; send application/json, application/x-npy or application/x-npz")


def _reject_constant(token: str):
    raise ValueError(f"{token} is not a number JSON allows")


def read_json(body: bytes, specs: list[dict]) -> dict[str, np.ndarray]:
    try:
        doc = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, NaN/Infinity tokens, deep nesting
        raise InputError(422, f"malformed JSON body: {str(exc)[:200]}") from None
    if not isinstance(doc, dict) or "inputs" not in doc:
        raise InputError(422, 'the JSON body must be an object with "inputs": {"<input name>": [...]}',
                         inputs=[s["name"] for s in specs])
    raw = doc["inputs"]
    if isinstance(raw, list):
        if len(specs) != 1:
            raise InputError(422, "this model has several inputs; name them: {\"inputs\": {\"<name>\": [...]}}",
                             inputs=[s["name"] for s in specs])
        raw = {specs[0]["name"]: raw}
    if not isinstance(raw, dict):
        raise InputError(422, '"inputs" must be an object of arrays by input name')
    arrays = {}
    for name, value in raw.items():
        if not isinstance(value, list):
            raise InputError(422, f"input {name!r} must be a (nested) JSON array", input=name)
        try:
            array = np.array(value)
        except (ValueError, TypeError, RecursionError):
            raise InputError(422, f"input {name!r} is not a rectangular array of numbers", input=name) from None
        if array.dtype.kind not in "biuf":
            raise InputError(422, f"input {name!r} is not a rectangular array of numbers", input=name)
        arrays[str(name)] = array
    return arrays


# The header numpy writes (keys sorted, a plain dtype string): read without ``ast.literal_eval``.
_NPY_HEADER = re.compile(r"\{'descr': '([<>|=][a-zA-Z][0-9]{1,2})', 'fortran_order': (True|False), "
                         r"'shape': \(((?:[0-9]{1,19}, ?)*(?:[0-9]{1,19})?)\), \} *\n?")


def _npy_header(body: bytes) -> tuple[tuple, bool, np.dtype, int] | None:
    """(shape, fortran order, dtype, data offset) of a header in numpy's own layout; None for others."""
    if len(body) < 10 or body[:6] != b"\x93NUMPY":
        return None
    if body[6] == 1:
        start, length = 10, int.from_bytes(body[8:10], "little")
    elif body[6] in (2, 3) and len(body) >= 12:
        start, length = 12, int.from_bytes(body[8:12], "little")
    else:
        return None
    found = _NPY_HEADER.fullmatch(body[start:start + length].decode("latin-1"))
    if found is None:
        return None
    try:
        dtype = np.dtype(found.group(1))
    except TypeError:
        return None
    shape = tuple(int(d) for d in found.group(3).replace(" ", "").split(",") if d)
    return shape, found.group(2) == "True", dtype, start + length


def read_npy(body: bytes, name: str) -> np.ndarray:
    """One ``.npy`` array; its header's shape must match the bytes that follow (no pickles)."""
    fast = _npy_header(body)
    if fast is not None:
        shape, fortran, dtype, offset = fast
    else:
        fp = io.BytesIO(body)
        try:
            version = np.lib.format.read_magic(fp)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except (ValueError, OSError, SyntaxError, TypeError) as exc:
            raise InputError(422, f"input {name!r} is not a readable .npy array: {str(exc)[:160]}", input=name) from None
        offset = fp.tell()
    if dtype.hasobject or dtype.kind not in "biuf":
        raise InputError(422, f"input {name!r} has dtype {dtype}; only numeric arrays are accepted", input=name)
    count = math.prod(shape)
    payload = memoryview(body)[offset:]
    if count * dtype.itemsize != len(payload):
        raise InputError(422, f"input {name!r}: the .npy header claims shape {list(shape)} ({count * dtype.itemsize} bytes) "
                              f"but {len(payload)} bytes follow", input=name)
    array = np.frombuffer(payload, dtype=dtype, count=count)
    return array.reshape(shape, order="F" if fortran else "C").copy()


def read_npz(body: bytes, max_bytes: int) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz``; members may not expand past ``max_bytes`` in total (no zip bombs)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(body))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InputError(422, f"the body is not a readable .npz archive: {str(exc)[:160]}") from None
    if sum(m.file_size for m in members) > max_bytes:
        raise InputError(413, f"the .npz archive expands past the {max_bytes}-byte limit")
    arrays = {}
    for member in members:
        name = member.filename[:-4] if member.filename.endswith(".npy") else member.filename
        try:
            data = archive.read(member)
        except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as exc:
            raise InputError(422, f"input {name!r} in the .npz cannot be read: {str(exc)[:160]}", input=name) from None
        arrays[name] = read_npy(data, name)
    return arrays


# -- validation ----------------------------------------------------------------------------------


def validate(arrays: dict[str, np.ndarray], specs: list[dict], allow_nonfinite: bool = False) -> dict[str, np.ndarray]:
    """The model's feed, in input order, each array cast to its input's dtype; InputError (422) otherwise."""
    names = [s["name"] for s in specs]
    unknown = [n for n in arrays if n not in names]
    if unknown:
        raise InputError(422, f"unknown input {unknown[0]!r}; the model's inputs are: {', '.join(names)}",
                         input=unknown[0], inputs=names)
    feed = {}
    batch = None
    for spec in specs:
        name = spec["name"]
        if name not in arrays:
            raise InputError(422, f"missing input {name!r}", input=name, expected=describe(spec))
        array = _cast(arrays[name], spec)
        _check_shape(array, spec)
        if spec["dtype"].startswith("float") and not allow_nonfinite and not np.isfinite(array).all():
            raise InputError(422, f"input {name!r} holds NaN or infinite values", input=name)
        low_high = spec.get("value_range")
        if low_high is not None and array.size and (array.min() < low_high[0] or array.max() >= low_high[1]):
            raise InputError(422, f"input {name!r} has values outside [{low_high[0]:g}, {low_high[1]:g})",
                             input=name, expected=describe(spec))
        if batchable(specs):
            if batch is not None and array.shape[0] != batch:
                raise InputError(422, f"input {name!r} has batch {array.shape[0]}, the others {batch}", input=name)
            batch = array.shape[0]
        feed[name] = np.ascontiguousarray(array)
    return feed


def describe(spec: dict) -> dict:
    shape = spec["shape"]
    dims = None if shape is None else [spec["dynamic_axes"].get(i, "any") if d is None else d for i, d in enumerate(shape)]
    return {"dtype": spec["dtype"], "shape": dims}


def _cast(array: np.ndarray, spec: dict) -> np.ndarray:
    want = np.dtype(spec["dtype"])
    name = spec["name"]
    kind = array.dtype.kind
    if want.kind == "f" and kind in "iuf":
        return array.astype(want, copy=False)
    if want.kind in "iu" and kind in "iu":
        info = np.iinfo(want)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise InputError(422, f"input {name!r} has values that do not fit {want}", input=name, expected=describe(spec))
        return array.astype(want, copy=False)
    if want.kind == "b" and kind == "b":
        return array
    raise InputError(422, f"input {name!r} expects {want} values, got {array.dtype}", input=name,
                     expected=describe(spec), got={"dtype": str(array.dtype), "shape": list(array.shape)})


def _check_shape(array: np.ndarray, spec: dict) -> None:
    shape = spec["shape"]
    if shape is None:
        return
    name = spec["name"]
    got = {"dtype": str(array.dtype), "shape": list(array.shape)}
    if array.ndim != len(shape):
        raise InputError(422, f"input {name!r} must have {len(shape)} dimensions, got {array.ndim}", input=name,
                         expected=describe(spec), got=got)
    for axis, (want, have) in enumerate(zip(shape, array.shape)):
        if want is not None and want != have:
            raise InputError(422, f"input {name!r} axis {axis} must be {want}, got {have}", input=name,
                             expected=describe(spec), got=got)
        if have == 0:
            raise InputError(422, f"input {name!r} axis {axis} is empty", input=name, expected=describe(spec), got=got)
