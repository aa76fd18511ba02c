"""Request bodies -> validated input arrays, checked against the model's input spec.

Three body forms: JSON (``{"inputs": {"name": nested lists}}``, or ``{"inputs": nested lists}``
for a one-input model), a ``.npy`` file (one-input models) and an ``.npz`` archive (arrays by
input name). Every failure is an ``InputError`` with an HTTP status and a JSON-able detail
naming the input and what was expected (``decode`` turns anything else a parser raises into a
422 too: a body is the client's, whatever it holds); nothing here allocates more than the
body's size allows (``.npy`` headers that claim a huge shape are refused before any allocation,
``.npz`` members are read only up to the body limit, decompressed).

``.npy`` headers are read by a strict parser of their three keys (``descr``, ``fortran_order``,
``shape``: the literal numpy writes, keys in any order, Python 2's ``L`` suffixes), never by a
general literal evaluator; JSON integers longer than ``MAX_INT_DIGITS`` are refused.

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
MAX_DIMS = 32  # numpy allows 64; no model input has more than a handful
MAX_DIM = 2**31 - 1  # one axis (an empty array could otherwise claim any size)
MAX_MEMBERS = 256  # arrays in one .npz
MAX_INT_DIGITS = 20  # a JSON integer past this fits no input dtype (uint64 has 20 digits)
MAX_HEADER = 1 << 16  # bytes of one .npy header


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
        # the longest a dynamic axis may be (a language model's context, a program's memory plan)
        "max_sizes": {int(k): int(v) for k, v in (data.get("max_sizes") or {}).items()},
    }


def batchable(specs: list[dict]) -> bool:
    """Requests can be stacked along axis 0 when every input's first axis is dynamic."""
    return bool(specs) and all(s["shape"] is not None and len(s["shape"]) >= 1 and s["shape"][0] is None for s in specs)


# -- decoding ------------------------------------------------------------------------------------


def decode(body: bytes, content_type: str, specs: list[dict], max_bytes: int) -> dict[str, np.ndarray]:
    """The arrays in ``body`` by input name (not yet validated against ``specs``); ``InputError``
    for every body that is not one, whatever the parsers beneath (zipfile, zlib, json) raise."""
    try:
        return _decode(body, content_type, specs, max_bytes)
    except InputError:
        raise
    except RecursionError:
        raise InputError(422, "the body is nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - a malformed body is the client's error, never the server's
        raise InputError(422, f"the body cannot be read: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:160]


def _decode(body: bytes, content_type: str, specs: list[dict], max_bytes: int) -> dict[str, np.ndarray]:
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


def _bounded_int(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits fits no input type")
    return int(text)


def parse_json(body: bytes):
    """``json.loads`` with the body bounds: no NaN/Infinity tokens, no integer past ``MAX_INT_DIGITS``
    digits (both ValueError, like malformed JSON; deep nesting is json's RecursionError)."""
    doc = json.loads(body, parse_constant=_reject_constant, parse_int=_bounded_int)
    _check_strings(doc)
    return doc


def _check_strings(doc) -> None:
    """Every string of a body (keys too) is valid Unicode: JSON's ``\\ud800`` escapes decode to lone
    surrogates, which tokenizers and the response's encoder then fail on (HTTP 500)."""
    pending = [doc]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"a string holds a lone surrogate (U+{ord(item[exc.start]):04X}); "
                                 "text must be valid Unicode") from None


def read_json(body: bytes, specs: list[dict]) -> dict[str, np.ndarray]:
    try:
        doc = parse_json(body)
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
        except (ValueError, TypeError, OverflowError, RecursionError):
            raise InputError(422, f"input {name!r} is not a rectangular array of numbers", input=name) from None
        if array.dtype.kind not in "biuf":
            raise InputError(422, f"input {name!r} is not a rectangular array of numbers", input=name)
        arrays[str(name)] = array
    return arrays


# The three values of a .npy header, each read where it starts (no general literal parser).
_KEY = re.compile(r"""\s*(['"])(descr|fortran_order|shape)\1\s*:\s*""")
_DESCR = re.compile(r"""(['"])([<>|=]?[a-zA-Z][0-9]{0,2})\1""")
_BOOL = re.compile(r"True|False")
_SHAPE = re.compile(r"\(([0-9L,\s]*)\)")
_DIM = re.compile(r"[0-9]{1,19}L?")
_VALUE = {"descr": _DESCR, "fortran_order": _BOOL, "shape": _SHAPE}
_OPEN = re.compile(r"\s*\{")
_NEXT = re.compile(r"\s*(,\s*\}|,|\})")


def _unreadable(name: str, why: str) -> InputError:
    return InputError(422, f"input {name!r} is not a readable .npy array: {why}", input=name)


def _npy_header(body: bytes, name: str) -> tuple[tuple, bool, np.dtype, int]:
    """(shape, fortran order, dtype, data offset) of a ``.npy`` body; ``InputError`` for anything else."""
    if len(body) < 10 or body[:6] != b"\x93NUMPY":
        raise _unreadable(name, "it does not start with the .npy magic")
    version = (body[6], body[7])
    if version == (1, 0):
        start, length, encoding = 10, int.from_bytes(body[8:10], "little"), "latin-1"
    elif version in ((2, 0), (3, 0)) and len(body) >= 12:
        start, length = 12, int.from_bytes(body[8:12], "little")
        encoding = "latin-1" if version == (2, 0) else "utf-8"
    else:
        raise _unreadable(name, f"unsupported .npy version {version[0]}.{version[1]}")
    if length > MAX_HEADER or start + length > len(body):
        raise _unreadable(name, f"the header claims {length} bytes")
    try:
        text = body[start:start + length].decode(encoding)
    except UnicodeDecodeError:
        raise _unreadable(name, "the header is not text") from None
    values = _header_values(text)
    if values is None:
        raise _unreadable(name, "the header is not {'descr': ..., 'fortran_order': ..., 'shape': (...)}")
    descr, fortran, shape = values
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError):
        raise _unreadable(name, f"unknown dtype {descr!r}") from None
    if len(shape) > MAX_DIMS or any(d > MAX_DIM for d in shape):
        raise _unreadable(name, f"the header claims shape {list(shape)[:MAX_DIMS + 1]}")
    return shape, fortran, dtype, start + length


def _header_values(text: str) -> tuple[str, bool, tuple] | None:
    """(descr, fortran_order, shape) from a header's dict literal, or None when it is not exactly one."""
    opening = _OPEN.match(text)
    if opening is None:
        return None
    pos, found = opening.end(), {}
    while True:
        key = _KEY.match(text, pos)
        if key is None or key.group(2) in found:
            return None
        name = key.group(2)
        value = _VALUE[name].match(text, key.end())
        if value is None:
            return None
        if name == "descr":
            found[name] = value.group(2)
        elif name == "fortran_order":
            found[name] = value.group() == "True"
        else:
            found[name] = _dims(value.group(1))
            if found[name] is None:
                return None
        step = _NEXT.match(text, value.end())
        if step is None:
            return None
        pos = step.end()
        if step.group(1) != ",":
            break
    if text[pos:].strip() or set(found) != {"descr", "fortran_order", "shape"}:
        return None
    return found["descr"], found["fortran_order"], found["shape"]


def _dims(inner: str) -> tuple | None:
    """The ints of a tuple literal's inside (``"1, 8"``, ``"3,"``, ``""``); None for ``"3"`` (an int, not a tuple)."""
    parts = [p.strip() for p in inner.split(",")]
    if parts == [""]:
        return ()
    if len(parts) == 1:
        return None  # "(3)" is the int 3
    if parts[-1] == "":
        parts = parts[:-1]
    if not all(_DIM.fullmatch(p) for p in parts):
        return None
    return tuple(int(p.rstrip("L")) for p in parts)


def read_npy(body: bytes, name: str) -> np.ndarray:
    """One ``.npy`` array; its header's shape must match the bytes that follow (no pickles)."""
    shape, fortran, dtype, offset = _npy_header(body, name)
    if dtype.hasobject or dtype.kind not in "biuf":
        raise InputError(422, f"input {name!r} has dtype {dtype}; only numeric arrays are accepted", input=name)
    count = math.prod(shape)
    payload = memoryview(body)[offset:]
    if count * dtype.itemsize != len(payload):
        raise InputError(422, f"input {name!r}: the .npy header claims shape {list(shape)} ({count * dtype.itemsize} bytes) "
                              f"but {len(payload)} bytes follow", input=name)
    try:
        array = np.frombuffer(payload, dtype=dtype, count=count).reshape(shape, order="F" if fortran else "C")
    except ValueError as exc:
        raise _unreadable(name, _first_line(exc)) from None
    return array.copy()


def read_npz(body: bytes, max_bytes: int) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz``; members may not expand past ``max_bytes`` in total (no zip bombs),
    counted as declared and again as read."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(body))
        members = archive.infolist()
    except Exception as exc:  # noqa: BLE001 - BadZipFile, struct/zlib errors, bad names: not an archive
        raise InputError(422, f"the body is not a readable .npz archive: {_first_line(exc)}") from None
    if len(members) > MAX_MEMBERS:
        raise InputError(422, f"the .npz archive holds {len(members)} members; at most {MAX_MEMBERS} are read")
    if sum(m.file_size for m in members) > max_bytes:
        raise InputError(413, f"the .npz archive expands past the {max_bytes}-byte limit", limit=max_bytes)
    arrays, total = {}, 0
    for member in members:
        name = member.filename[:-4] if member.filename.endswith(".npy") else member.filename
        if member.flag_bits & 0x1:
            raise InputError(422, f"input {name!r} in the .npz is encrypted", input=name)
        if name in arrays:
            raise InputError(422, f"input {name!r} appears twice in the .npz", input=name)
        try:
            with archive.open(member) as fh:
                data = fh.read(member.file_size + 1)  # a member that says less than it holds stops here
        except Exception as exc:  # noqa: BLE001 - CRC errors, zlib/bz2/lzma errors, unsupported methods
            raise InputError(422, f"input {name!r} in the .npz cannot be read: {_first_line(exc)}", input=name) from None
        total += len(data)
        if len(data) != member.file_size or total > max_bytes:
            raise InputError(422, f"input {name!r} in the .npz holds more than its declared {member.file_size} bytes",
                             input=name)
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
        most = spec.get("max_sizes", {}).get(axis)
        if most is not None and have > most:
            raise InputError(422, f"input {name!r} axis {axis} ({spec['dynamic_axes'].get(axis, 'dynamic')}) is {have} "
                                  f"long; the model takes at most {most}", input=name, expected=describe(spec), got=got)
