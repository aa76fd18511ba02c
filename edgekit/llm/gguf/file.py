"""A GGUF file (llama.cpp's model format), read and validated before anything in it is trusted.

The header, metadata and tensor table are parsed here, from a read-only memory map, with every
count, string length, dimension and offset checked against the bytes the file really has (a
lying header is one ``InputFileError`` line, never a huge allocation or a read past the end).
Tensors of every ggml type are measured (so a file edgekit cannot run is still checked, and all
its blockers named at once by ``edgekit.llm.gguf.arch``); ``GGUFFile.array(name)``
dequantizes one tensor to float32 (numpy, in (out, in) order) with ``edgekit.llm.gguf.quants``.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.outputs import safe_text
from edgekit.llm.gguf.arch import model_config

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 used 32-bit counts and is long gone
DEFAULT_ALIGNMENT = 32
MAX_TENSORS = 1 << 16  # a 405B Llama has ~1,100
MAX_KEYS = 1 << 16
MAX_KEY_BYTES = 1 << 16
MAX_STRING_BYTES = 1 << 24  # a chat template is kilobytes; 16 MiB is past any real one
MAX_ARRAY_ITEMS = 1 << 22  # vocabularies and merges: at most ~256k in real models
MAX_DIMS = 4
MAX_ELEMENTS = 1 << 36
MAX_HEADER_BYTES = 1 << 30

# value types: id -> (name, struct code, size); 8 string, 9 array
_SCALARS = {0: ("u8", "<B", 1), 1: ("i8", "<b", 1), 2: ("u16", "<H", 2), 3: ("i16", "<h", 2), 4: ("u32", "<I", 4),
            5: ("i32", "<i", 4), 6: ("f32", "<f", 4), 7: ("bool", "<?", 1), 10: ("u64", "<Q", 8), 11: ("i64", "<q", 8),
            12: ("f64", "<d", 8)}
_STRING, _ARRAY = 8, 9
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8", 12: "<f8"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order: (out, in) for a weight matrix (GGUF stores it innermost first)
    type_name: str
    offset: int  # absolute, in the file
    nbytes: int


@dataclass
class GGUFFile:
    path: Path
    size: int
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    _map: Any = field(default=None, repr=False)

    # ---- what the model is -------------------------------------------------------------------
    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def quant_types(self) -> dict[str, int]:
        """Tensor type -> how many tensors have it (e.g. {"Q4_1": 210, "F32": 61, "Q8_0": 1})."""
        counts: dict[str, int] = {}
        for info in self.tensors.values():
            counts[info.type_name] = counts.get(info.type_name, 0) + 1
        return dict(sorted(counts.items()))

    def parameters(self) -> int:
        total = 0
        for info in self.tensors.values():
            n = 1
            for d in info.shape:
                n *= d
            total += n
        return total

    def array(self, name: str):
        """Tensor ``name`` dequantized to a float32 numpy array of its shape."""
        import numpy as np

        from edgekit.llm.gguf.quants import dequantize

        info = self.tensors[name]
        raw = np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.offset)
        return dequantize(raw, info.type_name, info.shape)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


class _Cursor:
    def __init__(self, buf, size: int, where: str):
        self.buf, self.size, self.pos, self.where = buf, size, 0, where

    def _need(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.size:
            raise InputFileError(f"{self.where}: {what} runs past the end of the file ({self.size:,} bytes): "
                                 "truncated, or not a GGUF file")
        at = self.pos
        self.pos += n
        return at

    def scalar(self, type_id: int, what: str):
        _, code, size = _SCALARS[type_id]
        return struct.unpack_from(code, self.buf, self._need(size, what))[0]

    def u32(self, what: str) -> int:
        return self.scalar(4, what)

    def u64(self, what: str) -> int:
        return self.scalar(10, what)

    def string(self, what: str, limit: int = MAX_STRING_BYTES) -> str:
        n = self.u64(f"the length of {what}")
        if n > limit:
            raise InputFileError(f"{self.where}: {what} claims {n:,} bytes (at most {limit:,})")
        at = self._need(n, what)
        try:
            return bytes(self.buf[at:at + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise InputFileError(f"{self.where}: {what} is not UTF-8 text") from None

    def value(self, type_id: int, what: str, depth: int = 0):
        if type_id in _SCALARS:
            return self.scalar(type_id, what)
        if type_id == _STRING:
            return self.string(what)
        if type_id != _ARRAY:
            raise InputFileError(f"{self.where}: {what} has an unknown value type {type_id}")
        item_type = self.u32(f"the item type of {what}")
        count = self.u64(f"the length of {what}")
        if count > MAX_ARRAY_ITEMS or depth > 1:
            raise InputFileError(f"{self.where}: {what} claims {count:,} items (at most {MAX_ARRAY_ITEMS:,})"
                                 if depth <= 1 else f"{self.where}: {what} nests arrays too deeply")
        if item_type in _SCALARS:
            import numpy as np

            size = _SCALARS[item_type][2]
            at = self._need(count * size, what)
            values = np.frombuffer(self.buf, dtype=_NUMPY[item_type], count=count, offset=at)
            return values.astype(bool).tolist() if item_type == 7 else values.tolist()
        if item_type == _STRING:  # each string is at least its 8-byte length
            if count * 8 > self.size - self.pos:
                raise InputFileError(f"{self.where}: {what} claims {count:,} strings, more than the file can hold")
            return [self.string(f"{what}[{i}]") for i in range(count)]
        return [self.value(item_type, f"{what}[{i}]", depth + 1) for i in range(count)]


def read_gguf(path: str | os.PathLike) -> GGUFFile:
    """Parse and bound-check ``path``; the tensors stay in the file (memory-mapped) until asked for."""
    path = Path(path)
    where = safe_text(str(path))
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputFileError(f"cannot read GGUF file {where}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(f"{where} is not a regular file")
    if st.st_size < 24:
        raise InputFileError(f"{where} is {st.st_size} bytes: too short for a GGUF file")
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        parsed = _parse(mapped, st.st_size, path, where)
    except BaseException:
        mapped.close()
        raise
    return parsed


def _parse(buf, size: int, path: Path, where: str) -> GGUFFile:
    from edgekit.llm.gguf.quants import TYPES, size_of

    if bytes(buf[:4]) != MAGIC:
        raise InputFileError(f"{where} is not a GGUF file (it does not start with 'GGUF')")
    cur = _Cursor(buf, min(size, MAX_HEADER_BYTES), where)
    cur.pos = 4
    version = cur.u32("the version")
    if version not in VERSIONS:
        hint = " (a big-endian file?)" if version > 0xFFFF else ""
        raise InputFileError(f"{where} is GGUF version {version}{hint}; edgekit reads versions {', '.join(map(str, VERSIONS))}")
    n_tensors = cur.u64("the tensor count")
    n_keys = cur.u64("the metadata count")
    # every tensor entry takes at least 24 bytes, every key at least 12: a count the file cannot hold lies
    if n_tensors > MAX_TENSORS or n_tensors * 24 > size:
        raise InputFileError(f"{where}: the header claims {n_tensors:,} tensors, more than the file can hold")
    if n_keys > MAX_KEYS or n_keys * 12 > size:
        raise InputFileError(f"{where}: the header claims {n_keys:,} metadata entries, more than the file can hold")
    metadata: dict[str, Any] = {}
    for i in range(n_keys):
        key = cur.string(f"metadata key {i}", MAX_KEY_BYTES)
        type_id = cur.u32(f"the type of {key!r}")
        if key in metadata:
            raise InputFileError(f"{where}: metadata key {safe_text(key)} appears twice")
        metadata[key] = cur.value(type_id, f"metadata {safe_text(key)}")
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or not 1 <= alignment <= 1 << 16 \
            or alignment & (alignment - 1):
        raise InputFileError(f"{where}: general.alignment {alignment!r} is not a power of two up to 65536")
    raw = []
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor {i}", 256)
        n_dims = cur.u32(f"the rank of tensor {safe_text(name)}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise InputFileError(f"{where}: tensor {safe_text(name)} claims {n_dims} dimensions (1 to {MAX_DIMS})")
        dims = [cur.u64(f"the shape of tensor {safe_text(name)}") for _ in range(n_dims)]
        type_id = cur.u32(f"the type of tensor {safe_text(name)}")
        offset = cur.u64(f"the offset of tensor {safe_text(name)}")
        raw.append((name, dims, type_id, offset))
    data_start = -(-cur.pos // alignment) * alignment
    tensors: dict[str, TensorInfo] = {}
    for name, dims, type_id, offset in raw:
        label = safe_text(name)
        if name in tensors:
            raise InputFileError(f"{where}: tensor {label} appears twice")
        sizes = size_of(type_id)
        if sizes is None:
            raise InputFileError(f"{where}: tensor {label} is {_type_name(type_id)}; edgekit dequantizes "
                                 f"{', '.join(t.name for t in TYPES.values())}")
        type_name, block, block_bytes = sizes
        elements = 1
        for d in dims:
            if not 1 <= d <= MAX_ELEMENTS:
                raise InputFileError(f"{where}: tensor {label} has a dimension of {d:,}")
            elements *= d
        if elements > MAX_ELEMENTS:
            raise InputFileError(f"{where}: tensor {label} claims {elements:,} elements")
        if dims[0] % block:
            raise InputFileError(f"{where}: tensor {label} ({type_name}) has rows of {dims[0]}, not a multiple of {block}")
        nbytes = elements // block * block_bytes
        if offset % alignment:
            raise InputFileError(f"{where}: tensor {label}'s offset {offset:,} is not aligned to {alignment}")
        start = data_start + offset
        if start + nbytes > size:
            raise InputFileError(f"{where}: tensor {label} ({nbytes:,} bytes at {start:,}) runs past the end of the "
                                 f"file ({size:,} bytes): truncated, or its header lies")
        tensors[name] = TensorInfo(name, tuple(reversed(dims)), type_name, start, nbytes)
    spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in tensors.values())
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            raise InputFileError(f"{where}: tensors {safe_text(a)} and {safe_text(b)} overlap (the header lies)")
    return GGUFFile(path, size, version, metadata, tensors, buf)


def _type_name(type_id: int) -> str:
    try:
        from gguf.constants import GGMLQuantizationType

        return f"type {GGMLQuantizationType(type_id).name}"
    except (ImportError, ValueError):
        return f"an unknown type (id {type_id})"


# ---- the model it holds ----------------------------------------------------------------------
def llama_config(gguf: GGUFFile) -> tuple[dict, int]:
    """The decoder config (without ``max_len``) and the GGUF's own context length
    (``edgekit.llm.gguf.arch``: every blocker in one refusal)."""
    return model_config(gguf)


def check_context(context: int | None, gguf_context: int, default: int) -> int:
    """The cache length an import uses: ``context`` (default ``default``, capped at the GGUF's)."""
    if context is None:
        return min(default, gguf_context)
    if isinstance(context, bool) or not isinstance(context, int) or not 1 <= context <= gguf_context:
        raise UsageError(f"--context must be between 1 and {gguf_context:,} (the model's own context length), "
                         f"got {context!r}")
    return context
