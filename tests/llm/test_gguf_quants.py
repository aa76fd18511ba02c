"""GGUF tensor types (issue 34): edgekit's own dequantizers against the ``gguf`` package's reference
ones, the int4 grid kept exactly where a type's blocks are on it, and every blocker named at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from corpus.hostile import assert_one_line_error, leftovers
from edgekit.cli.app import app
from edgekit.llm.gguf.quants import BY_NAME, INT4_GRID

TYPES = list(BY_NAME)
# where each type keeps its float16 scales (d, and m/dmin): set to small finite values so random
# blocks stand for weights of a model's size (random bytes there would be NaN or huge)
SCALES = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q4_K": (0, 2), "Q5_K": (0, 2),
          "Q6_K": (208,)}


def random_blocks(type_name: str, n_blocks: int, rng, scale: float = 1e-3) -> np.ndarray:
    """(n_blocks, block bytes) uint8 of valid random blocks of ``type_name``."""
    kind = BY_NAME[type_name]
    if kind.block == 1:  # float types: random finite values
        values = rng.standard_normal(n_blocks).astype({"F32": "<f4", "F16": "<f2"}.get(type_name, "<f4"))
        raw = values.view(np.uint8) if type_name != "BF16" else values.view(np.uint8).reshape(-1, 4)[:, 2:]
        return np.ascontiguousarray(raw).reshape(n_blocks, kind.block_bytes)
    raw = rng.integers(0, 256, size=(n_blocks, kind.block_bytes), dtype=np.uint8)
    for at in SCALES[type_name]:
        raw[:, at:at + 2] = (rng.uniform(0.2, 1.0, n_blocks) * scale).astype("<f2").view(np.uint8).reshape(-1, 2)
    return raw


@pytest.mark.parametrize("type_name", TYPES)
def test_each_type_equals_the_reference_dequantizer(type_name):
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize as reference

    from edgekit.llm.gguf.quants import dequantize

    rng = np.random.default_rng(len(type_name))
    kind = BY_NAME[type_name]
    raw = random_blocks(type_name, 64 * 256 // kind.block, rng)
    rows = raw.reshape(64, -1)  # 64 rows of 256 values
    expected = reference(rows, GGMLQuantizationType[type_name])
    ours = dequantize(rows.reshape(-1), type_name, (64, 256))
    assert expected.shape == ours.shape == (64, 256)
    assert np.isfinite(expected).all()
    np.testing.assert_array_equal(ours, expected.astype(np.float32))


def _write(path: Path, tensors: dict, arch: str = "llama", tokenizer: str = "gpt2") -> Path:
    import gguf
    from gguf.constants import GGMLQuantizationType

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_tokenizer_model(tokenizer)
    for name, (type_name, raw) in tensors.items():
        kind = BY_NAME.get(type_name)
        writer.add_tensor(name, raw, raw_dtype=GGMLQuantizationType[type_name]) if kind is None or kind.block > 1 \
            else writer.add_tensor(name, raw.view({"F32": "<f4", "F16": "<f2"}[type_name]).reshape(-1))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_file_of_every_type_reads_as_gguf_reads_it(tmp_path):
    """The tensor table (sizes, offsets) and the values, through ``read_gguf``, against ``GGUFReader``."""
    from gguf import GGUFReader
    from gguf.quants import dequantize as reference

    from edgekit.llm.gguf.file import read_gguf

    rng = np.random.default_rng(1)
    tensors = {f"t.{name}": (name, random_blocks(name, 8 * 512 // BY_NAME[name].block, rng).reshape(8, -1))
               for name in TYPES if BY_NAME[name].block > 1}
    path = _write(tmp_path / "all.gguf", tensors)
    ours = read_gguf(path)
    try:
        assert ours.quant_types() == {type_name: 1 for type_name, _ in tensors.values()}
        for tensor in GGUFReader(str(path)).tensors:
            expected = reference(tensor.data, tensor.tensor_type).reshape([int(d) for d in reversed(tensor.shape)])
            assert ours.tensors[tensor.name].shape == (8, 512)
            np.testing.assert_array_equal(ours.array(tensor.name), expected)
    finally:
        ours.close()


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_K", "Q6_K", "Q8_0"])
def test_the_int4_program_keeps_the_codes_of_the_4_bit_types(type_name):
    """``grid_codes`` recovers 4-bit codes and scales that rebuild every value of a Q4_0, Q4_1 or Q4_K
    tensor (Q4_K's fitted scales often leave codes unused in a sub-block); the 5-, 6- and 8-bit types
    are off the grid (re-quantized)."""
    import torch
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize as reference

    from edgekit.llm.grid_int4 import grid_codes

    rng = np.random.default_rng(7)
    kind = BY_NAME[type_name]
    raw = random_blocks(type_name, 32 * 256 // kind.block, rng).reshape(32, -1)
    weight = torch.from_numpy(reference(raw, GGMLQuantizationType[type_name]).astype(np.float32))
    codes = grid_codes(weight)
    assert (codes is not None) == (type_name in INT4_GRID)
    if codes is not None:
        scales, q, offsets = codes
        assert int(q.min()) >= -8 and int(q.max()) <= 7
        rebuilt = scales.repeat_interleave(32, 1) * q.float() + offsets.repeat_interleave(32, 1)  # d*(q-8) + m+8d
        torch.testing.assert_close(rebuilt, weight, rtol=0, atol=float(weight.abs().max()) * 1e-6)


def test_every_blocker_in_one_line(tmp_path):
    """An IQ4_NL/Q2_K phi2 file with a WordPiece tokenizer: one refusal naming the types with their
    counts, the architecture and the tokenizer, and nothing written."""
    rng = np.random.default_rng(3)
    iq4 = rng.integers(0, 256, size=(4, 2 * 18), dtype=np.uint8)  # IQ4_NL: 18 bytes per 32 values
    q2k = rng.integers(0, 256, size=(2, 84), dtype=np.uint8)  # Q2_K: 84 bytes per 256
    path = _write(tmp_path / "phi.gguf", {"a": ("IQ4_NL", iq4), "b": ("IQ4_NL", iq4), "c": ("Q2_K", q2k)},
                  arch="phi2", tokenizer="bert")
    out = tmp_path / "imported"
    result = CliRunner().invoke(app, ["import", f"gguf:{path}", "--out", str(out)])
    assert_one_line_error(result, 2, "cannot be imported: tensor types IQ4_NL x2, Q2_K x1 (edgekit dequantizes F32, "
                                     "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K); architecture phi2 "
                                     "(edgekit imports llama, qwen2, qwen3, gemma3, phi3); tokenizer bert (edgekit builds "
                                     "gpt2 byte-level BPE and llama SentencePiece tokenizers)")
    assert leftovers(tmp_path, "imported") == []
    info = CliRunner().invoke(app, ["info", str(path)])
    assert_one_line_error(info, 2, "tensor types IQ4_NL x2, Q2_K x1")
