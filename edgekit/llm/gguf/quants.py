"""GGUF tensor types, dequantized to float32 with numpy (ggml's block layouts, written from its C
definitions in ``ggml-common.h``).

Each type is a table row: ggml's type id, name, elements per block, bytes per block, and a
function from a (blocks, bytes) uint8 array to (blocks, elements) float32 values. The arithmetic
follows ggml's reference ``dequantize_row_*`` in float32, in the same order (``(d * scale) * q -
dmin * min``), so the values equal llama.cpp's; tests check every type against the ``gguf``
package's own dequantizers.

``INT4_GRID`` names the types whose every 32 values are ``m + d*q`` with ``q`` in 0..15: the grid
the int4 program runs (``edgekit.llm.grid_int4``), where its codes are kept exactly. The other
types are dequantized, and re-quantized when an int4 program is made from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

QK_K = 256  # the k-quants' super-block


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte ``at`` of every block, as a (blocks, 1) float32 column."""
    return blocks[:, at:at + 2].copy().view("<f2").astype(np.float32)


def _nibbles(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return packed & 0x0F, packed >> 4


def _bits(packed: np.ndarray, count: int) -> np.ndarray:
    """Bit i of a little-endian bit string, for i < count: (blocks, count) uint8 of 0/1."""
    return np.unpackbits(packed, axis=-1, bitorder="little")[:, :count]


def _f32(blocks):
    return blocks.copy().view("<f4")


def _f16_values(blocks):
    return blocks.copy().view("<f2").astype(np.float32)


def _bf16(blocks):
    # bfloat16 is the top half of a float32
    return (blocks.copy().view("<u2").astype(np.uint32) << 16).view(np.float32)


def _q8_0(blocks):  # d, 32 x int8
    return _f16(blocks, 0) * blocks[:, 2:].view(np.int8).astype(np.float32)


def _q4_0(blocks):  # d, 16 bytes: value j in the low nibble of byte j, value j + 16 in its high nibble
    low, high = _nibbles(blocks[:, 2:])
    q = np.concatenate([low, high], axis=1).astype(np.int8) - 8
    return _f16(blocks, 0) * q.astype(np.float32)


def _q4_1(blocks):  # d, m, 16 bytes of nibbles as Q4_0
    low, high = _nibbles(blocks[:, 4:])
    q = np.concatenate([low, high], axis=1).astype(np.float32)
    return _f16(blocks, 0) * q + _f16(blocks, 2)


def _five_bit(low_nibbles: np.ndarray, high_bits: np.ndarray) -> np.ndarray:
    low, high = _nibbles(low_nibbles)
    return np.concatenate([low, high], axis=1) | (high_bits << 4)


def _q5_0(blocks):  # d, 32 fifth bits (a little-endian u32), 16 bytes of nibbles; codes 0..31 centred on 16
    q = _five_bit(blocks[:, 6:], _bits(blocks[:, 2:6], 32)).astype(np.int8) - 16
    return _f16(blocks, 0) * q.astype(np.float32)


def _q5_1(blocks):  # d, m, 32 fifth bits, 16 bytes of nibbles
    q = _five_bit(blocks[:, 8:], _bits(blocks[:, 4:8], 32)).astype(np.float32)
    return _f16(blocks, 0) * q + _f16(blocks, 2)


def _k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K super-block's 12 bytes.

    Sub-blocks 0-3 keep theirs in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks
    4-7 in the nibbles of bytes 8-11 (scale low, min high), with the top two bits of each in the
    spare top bits of bytes 0-3 (scales) and 4-7 (mins)."""
    a, b, c = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([a & 63, (c & 0x0F) | ((a >> 6) << 4)], axis=1)
    mins = np.concatenate([b & 63, (c >> 4) | ((b >> 6) << 4)], axis=1)
    return scales.astype(np.float32), mins.astype(np.float32)


def _k_affine(blocks, codes):
    """Q4_K/Q5_K: sub-block j's values are (d * scale_j) * q - dmin * min_j."""
    scales, mins = _k_scales(blocks[:, 4:16])
    step = (_f16(blocks, 0) * scales)[:, :, None]
    offset = (_f16(blocks, 2) * mins)[:, :, None]
    return (step * codes.reshape(len(blocks), 8, 32).astype(np.float32) - offset).reshape(len(blocks), QK_K)


def _k_nibbles(packed: np.ndarray) -> np.ndarray:
    """128 bytes -> 256 codes: each 32 bytes hold two sub-blocks, the low nibbles first."""
    chunks = packed.reshape(len(packed), 4, 32)
    low, high = _nibbles(chunks)
    return np.stack([low, high], axis=2).reshape(len(packed), QK_K)


def _q4_k(blocks):  # d, dmin, 12 bytes of scales/mins, 128 bytes of nibbles
    return _k_affine(blocks, _k_nibbles(blocks[:, 16:]))


def _q5_k(blocks):  # d, dmin, scales/mins, 32 bytes of fifth bits (bit j of byte l: sub-block j, value l), nibbles
    fifth = np.unpackbits(blocks[:, 16:48], axis=-1, bitorder="little").reshape(len(blocks), 32, 8)
    return _k_affine(blocks, _k_nibbles(blocks[:, 48:]) | (fifth.transpose(0, 2, 1).reshape(len(blocks), QK_K) << 4))


def _q6_k(blocks):
    """Q6_K: 128 bytes of low nibbles, 64 bytes of high bit pairs, 16 int8 scales (one per 16
    values), d. Each half of 128 values takes 64 low bytes and 32 high bytes: values l, l+32,
    l+64, l+96 are byte l's low nibble, byte l+32's low nibble, byte l's high nibble, byte l+32's
    high nibble, topped by bit pairs 0-1, 2-3, 4-5, 6-7 of high byte l; codes are centred on 32."""
    n = len(blocks)
    low = blocks[:, :128].reshape(n, 2, 2, 32)  # half, which 32 bytes, l
    high = blocks[:, 128:192].reshape(n, 2, 1, 32)
    low_nibbles = np.stack([low[:, :, 0] & 0x0F, low[:, :, 1] & 0x0F, low[:, :, 0] >> 4, low[:, :, 1] >> 4], axis=2)
    pairs = (high >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3
    q = (low_nibbles | (pairs << 4)).astype(np.int8) - 32  # (n, half, quarter, 32)
    scales = blocks[:, 192:208].view(np.int8).astype(np.float32)  # one per 16 values, in order
    step = (_f16(blocks, 208) * scales).reshape(n, 2, 4, 2, 1)
    return (step * q.reshape(n, 2, 4, 2, 16).astype(np.float32)).reshape(n, QK_K)


@dataclass(frozen=True)
class QuantType:
    type_id: int
    name: str
    block: int  # elements per block
    block_bytes: int
    dequantize_blocks: Callable[[np.ndarray], np.ndarray]


TYPES = {t.type_id: t for t in (
    QuantType(0, "F32", 1, 4, _f32), QuantType(1, "F16", 1, 2, _f16_values), QuantType(30, "BF16", 1, 2, _bf16),
    QuantType(8, "Q8_0", 32, 34, _q8_0), QuantType(2, "Q4_0", 32, 18, _q4_0), QuantType(3, "Q4_1", 32, 20, _q4_1),
    QuantType(6, "Q5_0", 32, 22, _q5_0), QuantType(7, "Q5_1", 32, 24, _q5_1),
    QuantType(12, "Q4_K", QK_K, 144, _q4_k), QuantType(13, "Q5_K", QK_K, 176, _q5_k),
    QuantType(14, "Q6_K", QK_K, 210, _q6_k),
)}
BY_NAME = {t.name: t for t in TYPES.values()}
INT4_GRID = ("Q4_0", "Q4_1", "Q4_K")  # every 32 values m + d*q, q in 0..15: the int4 program keeps the codes


def dequantize(raw: np.ndarray, type_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``raw`` (the tensor's bytes, uint8) of type ``type_name`` as float32 of ``shape``."""
    kind = BY_NAME[type_name]
    blocks = raw.reshape(-1, kind.block_bytes)
    return np.ascontiguousarray(kind.dequantize_blocks(blocks).reshape(shape), dtype=np.float32)


def size_of(type_id: int) -> tuple[str, int, int] | None:
    """(name, block, block bytes) of any ggml type id, edgekit's or not (so a file it cannot read
    is still measured and all its blockers named); None for an id ggml does not know."""
    if type_id in TYPES:
        kind = TYPES[type_id]
        return kind.name, kind.block, kind.block_bytes
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        kind = GGMLQuantizationType(type_id)
        block, block_bytes = GGML_QUANT_SIZES[kind]
        return kind.name, block, block_bytes
    except (ImportError, ValueError, KeyError):
        return None
