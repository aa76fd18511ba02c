"""Issue 31, items 2-3: files are opened as what edgekit expects them to be, and counts are bounded
before the work that grows with them (calibration folders and text files, shard indexes, npz
members, the cache listing). Real files, the real CLI; calibration images: test_round3_images.py."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import one_line_error
from edgekit.cli.app import app
from edgekit.core.errors import InputFileError
from edgekit.formats.limits import MAX_CALIB_FILES, MAX_CALIB_LINES
from edgekit.userdata.sets import open_calibration
from edgekit.sources.hf_weights import MAX_SHARDS, weights_file

runner = CliRunner()


def _onnx_model(path: Path, inputs: int = 4) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((inputs, 2), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "net",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", inputs])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _quantize(tmp_path: Path, calib: Path, *extra: str):
    model = _onnx_model(tmp_path / "net.onnx")
    out = tmp_path / "q"
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(calib),
                                 "--out", str(out), *extra])
    return result, out


def _spec():
    from edgekit.core.input_spec import InputSpec

    return InputSpec("x", (None, 4))


# ---- counts: refused by a scan that stops at the limit ------------------------------------------

@pytest.mark.parametrize("suffix", [".npy", ".png", ".txt"])
def test_a_calibration_folder_over_the_file_limit_is_refused_up_front(tmp_path, suffix):
    folder = tmp_path / "calib"
    folder.mkdir()
    for i in range(MAX_CALIB_FILES + 1):
        os.close(os.open(folder / f"{i:06d}{suffix}", os.O_CREAT | os.O_WRONLY, 0o644))
    result, out = _quantize(tmp_path, folder)
    line = one_line_error(result, 2)
    assert f"over {MAX_CALIB_FILES:,}" in line and str(folder) in line
    assert not out.exists()


@pytest.mark.slow  # 50,001 folders: about 15 s on a busy machine
def test_a_calibration_folder_at_the_limit_of_nested_folders_is_refused(tmp_path):
    folder = tmp_path / "calib"
    for i in range(MAX_CALIB_FILES // 2 + 1):
        (folder / f"d{i}").mkdir(parents=True)
        os.close(os.open(folder / f"d{i}" / "a.png", os.O_CREAT | os.O_WRONLY, 0o644))
    with pytest.raises(InputFileError, match=f"over {MAX_CALIB_FILES:,} files and folders"):
        open_calibration(folder, _spec())


def _lines(path: Path, count: int, text: bytes = b"a\n") -> Path:
    with open(path, "wb") as fh:
        fh.write(text * count)
    return path


@pytest.mark.parametrize("text", [b"hello\n", b"\n", b"x\r\n"])
def test_a_text_file_over_the_line_limit_is_refused_before_tokenizing_it(tmp_path, text):
    from edgekit.userdata.text import open_text

    corpus = _lines(tmp_path / "corpus.txt", 10_000_000, text)
    tok = tmp_path / "tokenizer.json"
    _word_tokenizer(tok)
    from edgekit.core.input_spec import InputSpec

    with pytest.raises(InputFileError, match=f"over {MAX_CALIB_LINES:,} lines.*--calib-max-samples"):
        open_text(corpus, (InputSpec("input_ids", (None, None), "int64"),), tok, 8, None)


def test_a_long_text_file_with_calib_max_samples_counts_only_what_it_uses(tmp_path):
    from edgekit.core.input_spec import InputSpec
    from edgekit.userdata.text import open_text

    corpus = _lines(tmp_path / "corpus.txt", 10_000_000, b"hello world\n")
    tok = tmp_path / "tokenizer.json"
    _word_tokenizer(tok)
    calib = open_text(corpus, (InputSpec("input_ids", (None, None), "int64"),), tok, 8, 16)
    assert calib.count() == 16 and calib.samples == 16


def _word_tokenizer(path: Path) -> None:
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "hello": 2, "world": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))


def test_a_text_file_with_invalid_utf8_names_the_line_and_byte(tmp_path):
    from edgekit.userdata.text import text_lines

    for content, where in [(b"ok\n\xffbad\n", "line 2, byte 0"), (b"caf\xc3\n", "line 1, byte 3"),
                           (b"a\nb\nc\xed\xa0\x80\n", "line 3, byte 1")]:
        path = tmp_path / "t.txt"
        path.write_bytes(content)
        with pytest.raises(InputFileError, match=f"is not UTF-8 text \\({where}"):
            list(text_lines(path))


# ---- shard indexes: the limit before the duplicate check, and linear --------------------------

@pytest.mark.parametrize("count, distinct", [(100_000, True), (MAX_SHARDS + 1, True)])
def test_a_shard_index_naming_too_many_shards_is_refused_quickly(tmp_path, count, distinct):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {f"t{i}": f"model-{i:06d}.safetensors" for i in range(count)}}))
    code = ("import sys; from pathlib import Path; from edgekit.sources.hf_weights import weights_file\n"
            "try:\n    weights_file(Path(sys.argv[1]))\nexcept Exception as exc:\n    print(exc)")
    # generous: the quadratic check took minutes on 100,000 names; linear takes well under a second
    done = subprocess.run([sys.executable, "-c", code, str(index)], capture_output=True, text=True, timeout=60)
    assert f"names more than {MAX_SHARDS} shards" in done.stdout, done.stdout + done.stderr


def test_a_shard_index_repeating_one_shard_is_one_shard(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    (tmp_path / "model-1.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")
    index.write_text(json.dumps({"weight_map": {f"t{i}": "model-1.safetensors" for i in range(100_000)}}))
    assert [p.name for p in weights_file(index).files] == ["model-1.safetensors"]


# ---- npz: by magic, members bounded, no pickles ---------------------------------------------

def _npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


NPZ_CASES = [
    ("npy-named-npz", lambda: _npy_bytes(np.ones((2, 4), np.float32)), "is named .npz but is a .npy array"),
    ("pickle-named-npz", lambda: b"\x80\x04\x95" + b"\0" * 40, "is named .npz but is not an .npz archive"),
    ("empty", lambda: b"", "is named .npz but is not an .npz archive"),
    ("object-array", lambda: _npz_bytes(x=np.array([{"a": 1}, None], dtype=object)), "cannot read calibration file"),
    ("foreign-member", lambda: _zip({"x.npy": _npy_bytes(np.ones((2, 4), np.float32)), "run.sh": b"echo"}),
     "holds 'run.sh', not a .npy array"),
    ("too-many-members", lambda: _zip({f"a{i}.npy": b"" for i in range(4097)}), "holds 4,097 arrays (at most 4,096)"),
]


def _npy_bytes(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _zip(members: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize("name, make, fragment", NPZ_CASES, ids=[c[0] for c in NPZ_CASES])
def test_an_npz_is_checked_for_what_it_must_be_before_numpy_loads_it(tmp_path, name, make, fragment):
    path = tmp_path / "calib.npz"
    path.write_bytes(make())
    result, out = _quantize(tmp_path, path)
    line = one_line_error(result, 2)
    assert fragment in line and "calib.npz" in line
    assert not out.exists()


# ---- the cache listing never walks a foreign tree ---------------------------------------------

def test_the_cache_listing_names_foreign_entries_without_walking_them(tmp_path):
    cache = tmp_path / "cache"
    deep = cache / "someone-else"
    for i in range(200):
        (deep / f"d{i}").mkdir(parents=True)
        (deep / f"d{i}" / "f").write_bytes(b"x" * 100)
    (cache / "text").mkdir()
    (cache / "text" / "notes").mkdir()
    (cache / "text" / "notes" / "big").write_bytes(b"y" * 5000)
    done = subprocess.run([sys.executable, "-m", "edgekit", "cache", "--json"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "EDGEKIT_CACHE_DIR": str(cache)})
    assert done.returncode == 0, done.stderr
    listed = {p["name"]: p for p in json.loads(done.stdout)["parts"]}
    for name in ("someone-else", "text"):
        assert not listed[name]["ours"] and listed[name]["bytes"] == 0 and "not measured" in listed[name]["description"]


@pytest.mark.parametrize("root", ["/", "/usr", "/etc"])
def test_a_system_folder_as_cache_is_listed_in_seconds_and_never_cleared(root):
    env = {**os.environ, "EDGEKIT_CACHE_DIR": root}
    done = subprocess.run([sys.executable, "-m", "edgekit", "cache", "--json"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert all(p["bytes"] == 0 for p in json.loads(done.stdout)["parts"] if not p["ours"])
    if root == "/":
        cleared = subprocess.run([sys.executable, "-m", "edgekit", "cache", "--clear"], capture_output=True,
                                 text=True, timeout=60, env=env)
        assert cleared.returncode == 2 and cleared.stderr.strip().startswith("Error: ")


# ---- model files: named for one kind, holding another ------------------------------------------

def _safetensors_bytes() -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * 4


MODEL_CASES = [
    ("gguf.onnx", b"GGUF" + struct.pack("<I", 3) + b"\0" * 32, "its first bytes show it is a GGUF file"),
    ("st.onnx", _safetensors_bytes(), "its first bytes show it is a safetensors file"),
    ("pt.onnx", _zip({"archive/data.pkl": b"\x80\x02}q\x00."}), "its first bytes show it is a zip archive"),
    ("pickle.onnx", b"\x80\x04\x95" + b"\0" * 40, "its first bytes show it is a Python pickle"),
    ("pte.onnx", b"\0\0\0\0ET12" + b"\0" * 40, "its first bytes show it is an ExecuTorch program"),
    ("eps.onnx", b"%!PS-Adobe-3.0 EPSF-3.0\n", "its first bytes show it is a PostScript file"),
    ("st.gguf", _safetensors_bytes(), "is not a GGUF file"),
]


@pytest.mark.parametrize("name, content, fragment", MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_a_model_file_holding_another_kind_is_refused_naming_it(tmp_path, name, content, fragment):
    path = tmp_path / name
    path.write_bytes(content)
    result = runner.invoke(app, ["quantize", str(path), "--method", "dynamic", "--out", str(tmp_path / "q")])
    line = one_line_error(result, 2)
    assert fragment in line or (name.endswith(".gguf") and "GGUF" in line), line
    assert not (tmp_path / "q").exists()


def test_a_real_onnx_model_still_loads(tmp_path):
    from edgekit.core import onnx_files

    model = onnx_files.load(_onnx_model(tmp_path / "net.onnx"))
    assert model.graph.node[0].op_type == "MatMul"


PNG_HEAD = b"\x89PNG\r\n\x1a\n" + b"\0" * 40
GGUF_HEAD = b"GGUF" + struct.pack("<I", 3) + b"\0" * 32
WEIGHT_CASES = [
    ("gguf.safetensors", GGUF_HEAD, "is named .safetensors but is a GGUF file"),
    ("zip.safetensors", _zip({"a.npy": b""}), "is named .safetensors but is a zip archive"),
    ("text.safetensors", b"hello world, not weights", "is named .safetensors but is not a safetensors file"),
    ("png.pt", PNG_HEAD, "is a PNG image, not a PyTorch file"),
    ("gguf.bin", GGUF_HEAD, "is a GGUF file, not a PyTorch file"),
    ("eps.pth", b"%!PS-Adobe-3.0 EPSF-3.0\n", "is a PostScript file, not a PyTorch file"),
    ("noise.pt", b"\x01\x02garbage" * 8, "corrupt or truncated, or not a PyTorch file"),
]


@pytest.mark.parametrize("name, content, fragment", WEIGHT_CASES, ids=[c[0] for c in WEIGHT_CASES])
def test_a_weights_file_holding_another_kind_is_refused_before_its_library_reads_it(tmp_path, name, content, fragment):
    from edgekit.sources.hf_weights import read_weights

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputFileError, match=fragment) as caught:
        read_weights(weights_file(path))
    assert "\n" not in str(caught.value) and name in str(caught.value)


def test_a_shard_named_safetensors_holding_another_kind_is_refused_at_the_index(tmp_path):
    (tmp_path / "model-1.safetensors").write_bytes(GGUF_HEAD)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "model-1.safetensors"}}))
    with pytest.raises(InputFileError, match="model-1.safetensors is named .safetensors but is a GGUF file"):
        weights_file(index)


@pytest.mark.parametrize("name, content, fragment", [c for c in WEIGHT_CASES if not c[0].endswith(".safetensors")],
                         ids=[c[0] for c in WEIGHT_CASES if not c[0].endswith(".safetensors")])
def test_a_checkpoint_file_is_checked_by_its_first_bytes_before_torch_loads_it(tmp_path, name, content, fragment):
    from edgekit.core.safeload import load_plain

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputFileError, match=fragment):
        load_plain(path)


def test_real_pytorch_files_still_load(tmp_path):
    torch = pytest.importorskip("torch")
    from edgekit.core.safeload import load_plain

    torch.save({"w": torch.ones(2)}, tmp_path / "zip.pt")
    torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    for name in ("zip.pt", "legacy.pt"):
        assert torch.equal(load_plain(tmp_path / name)["w"], torch.ones(2))


@pytest.mark.parametrize("content, fragment", [(GGUF_HEAD, "it is a GGUF file"), (PNG_HEAD, "it is a PNG image"),
                                               (b"\x80\x04\x95" + b"\0" * 40, "it is a Python pickle"),
                                               (b"noise" * 10, "its first bytes are not a zip archive's")])
def test_a_torchscript_file_holding_another_kind_is_refused_before_torch_reads_it(tmp_path, content, fragment):
    from edgekit.formats.torchscript_backend import load_torchscript, read_provenance

    path = tmp_path / "model.pt"
    path.write_bytes(content)
    for read in (load_torchscript, read_provenance):
        with pytest.raises(InputFileError, match=f"is not a loadable TorchScript model: {fragment}"):
            read(path)


def test_a_real_torchscript_file_still_loads(tmp_path):
    torch = pytest.importorskip("torch")
    from edgekit.formats.torchscript_backend import load_torchscript

    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(tmp_path / "model.pt"))
    assert load_torchscript(tmp_path / "model.pt")(torch.ones(1, 2)).shape == (1, 2)
