"""Bad inputs for tests/test_hostile_inputs.py: a Workspace of good artifacts to damage copies of,
and one builder per bad input (``BUILDERS``). Imported as ``corpus.builders``; no tests here."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import numpy as np

from corpus.hostile import copy_artifact, edit_manifest, rehash

CORPUS = Path(__file__).resolve().parent
SEED = 20240611


class Workspace:
    """The good artifacts to start from and a scratch folder to damage copies in."""

    def __init__(self, tmp: Path, ckpt: Path, static: Path, fp32: Path, int8: Path, bundle: Path):
        self.tmp, self.ckpt, self.static, self.fp32, self.int8, self.bundle = tmp, ckpt, static, fp32, int8, bundle
        self.rng = np.random.default_rng(SEED)

    def path(self, name: str) -> Path:
        return self.tmp / name

    def random_bytes(self, name: str, size: int = 4096) -> Path:
        path = self.path(name)
        path.write_bytes(self.rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        return path

    def copy(self, source: Path, name: str) -> Path:
        return copy_artifact(source, self.path(name))

    def file_blocking(self) -> Path:
        """A regular file: ``<it>/sub`` can never be created (even by root)."""
        path = self.path("a-file")
        path.write_text("not a folder\n")
        return path


# --------------------------------------------------------------------------------------------
# Builders: one bad input each. ``w`` is the Workspace; each returns the path to use.


def _onnx_truncated(w):
    data = (w.fp32 / "model.onnx").read_bytes()
    path = w.path("truncated.onnx")
    path.write_bytes(data[: len(data) // 2])
    return path


def _onnx_broken_graph(w):
    """A node reads a tensor that nothing produces (the graph is invalid)."""
    import onnx

    model = onnx.load(str(w.fp32 / "model.onnx"))
    model.graph.node[0].input[0] = "no_such_tensor"
    path = w.path("broken.onnx")
    onnx.save(model, str(path))
    return path


def _torchscript_truncated(w):
    data = (w.fp32 / "model.pt").read_bytes()
    path = w.path("truncated.pt")
    path.write_bytes(data[: len(data) // 2])
    return path


def _ckpt_with(w, name, data: bytes):
    folder = w.copy(w.ckpt, name)
    (folder / "checkpoint.pt").write_bytes(data)
    rehash(folder)
    return folder


def _ckpt_truncated(w):
    data = (w.ckpt / "checkpoint.pt").read_bytes()
    return _ckpt_with(w, "ckpt-truncated", data[: len(data) // 3])


def _ckpt_random(w):
    return _ckpt_with(w, "ckpt-random", w.random_bytes("r.bin").read_bytes())


def _ckpt_mismatch(w):
    """A valid plain-tensor checkpoint whose tensors belong to another architecture."""
    import torch

    buffer = io.BytesIO()
    torch.save({"model": {"conv1.weight": torch.zeros(3, 3), "fc.bias": torch.zeros(7)}, "meta": "{}"}, buffer)
    return _ckpt_with(w, "ckpt-mismatch", buffer.getvalue())


def _ckpt_wrong_shapes(w):
    """The right tensor names, the wrong shapes."""
    import torch

    state = torch.load(w.ckpt / "checkpoint.pt", weights_only=True)
    state["model"] = {k: torch.zeros(*(d + 1 for d in v.shape)) if v.dim() else v for k, v in state["model"].items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return _ckpt_with(w, "ckpt-shapes", buffer.getvalue())


def _ckpt_changed(w):
    """Changed after its manifest was written (no rehash): the checksum catches it."""
    folder = w.copy(w.ckpt, "ckpt-changed")
    data = bytearray((folder / "checkpoint.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "checkpoint.pt").write_bytes(bytes(data))
    return folder


def _manifest_edit(**changes):
    def build(w):
        folder = w.copy(w.ckpt, "ckpt-edited")
        edit_manifest(folder, **changes)
        return folder

    return build


def _manifest_path_escape(w):
    folder = w.copy(w.ckpt, "ckpt-escape")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][0]["path"] = "../../../../etc/passwd"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _manifest_symlink_escape(w):
    """The listed file is a link to a file outside the artifact folder (checksums match it)."""
    outside = w.path("outside.pt")
    shutil.copyfile(w.ckpt / "checkpoint.pt", outside)
    folder = w.copy(w.ckpt, "ckpt-link")
    (folder / "checkpoint.pt").unlink()
    os.symlink(outside, folder / "checkpoint.pt")
    return folder


def _manifest_text(text: str):
    def build(w):
        folder = w.copy(w.ckpt, "ckpt-manifest")
        (folder / "manifest.json").write_text(text)
        return folder

    return build


def _manifest_missing(w):
    folder = w.copy(w.ckpt, "ckpt-nomanifest")
    (folder / "manifest.json").unlink()
    return folder


def _quantized_with(name: str, mutate):
    def build(w):
        folder = w.copy(w.static, f"q-{name}")
        mutate(w, folder)
        rehash(folder)
        return folder

    return build


def _random_model_onnx(w, folder):
    (folder / "model.onnx").write_bytes(w.random_bytes("x.bin").read_bytes())


def _random_model_pt(w, folder):
    (folder / "model.pt").write_bytes(w.random_bytes("x.bin").read_bytes())


def _no_reference(w, folder):
    (folder / "reference.npz").unlink()


def _pickled_reference(w, folder):
    np.savez(folder / "reference.npz", **{"b1/output": np.array([object()], dtype=object)})


def _garbage_reference_keys(w, folder):
    np.savez(folder / "reference.npz", **{"nonsense": np.zeros(3, dtype=np.float32)})


def _export_with(name: str, mutate, source="fp32"):
    def build(w):
        folder = w.copy(w.fp32 if source == "fp32" else w.int8, f"e-{name}")
        mutate(w, folder)
        return folder

    return build


def _tamper_model(w, folder):
    data = bytearray((folder / "model.onnx").read_bytes())
    data[-10] ^= 0xFF
    (folder / "model.onnx").write_bytes(bytes(data))


def _broken_graph_model(w, folder):
    shutil.copyfile(_onnx_broken_graph(w), folder / "model.onnx")
    rehash(folder)


def _bundle_with(name: str, mutate):
    def build(w):
        folder = w.copy(w.bundle, f"b-{name}")
        mutate(w, folder)
        return folder

    return build


def _bundle_extra(w, folder):
    (folder / "numpy.py").write_text("import os\n")


def _bundle_sums_escape(w, folder):
    with open(folder / "SHA256SUMS", "a") as fh:
        fh.write(f"{'0' * 64}  ../../etc/passwd\n")


def _bundle_json_edit(**changes):
    def mutate(w, folder):
        info = json.loads((folder / "bundle.json").read_text())
        info.update(changes)
        (folder / "bundle.json").write_text(json.dumps(info))
        from edgekit.bundle.verify import write_checksums

        write_checksums(folder)  # consistent sums: only bundle.json itself is wrong

    return mutate


def _bundle_no_sums(w, folder):
    (folder / "SHA256SUMS").unlink()


def _calib(array_or_writer, suffix=".npy"):
    def build(w):
        folder = w.path("calib")
        folder.mkdir(exist_ok=True)
        path = folder / f"data{suffix}"
        if callable(array_or_writer):
            array_or_writer(w, path)
        else:
            np.save(path, array_or_writer, allow_pickle=False)
        return folder

    return build


def _good_samples(n=16):
    return np.random.default_rng(SEED).random((n, 1, 8, 8), dtype=np.float32)


def _with_value(value):
    array = _good_samples()
    array[3, 0, 4, 4] = value
    return array


def _calib_object(w, path):
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)


def _calib_truncated(w, path):
    np.save(path, _good_samples(64))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _calib_random(w, path):
    path.write_bytes(w.random_bytes("c.bin").read_bytes())


def _calib_empty_folder(w):
    folder = w.path("calib-empty")
    folder.mkdir()
    (folder / "README.txt").write_text("no arrays here\n")
    return folder


def _text_not_utf8(w):
    path = w.path("corpus.txt")
    path.write_bytes(b"\xff\xfe\xfa" * 4000)
    return path


def _npz_pickled(w):
    path = w.path("inputs.npz")
    np.savez(path, input=np.array([object()], dtype=object))
    return path


def _npz_truncated(w):
    path = w.path("inputs.npz")
    np.savez(path, input=np.zeros((1, 1, 8, 8), dtype=np.float32))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _not_an_artifact(w):
    folder = w.path("plain-folder")
    folder.mkdir()
    (folder / "notes.txt").write_text("hello\n")
    return folder


def _tiny_bundle(w):
    """A bundle forced past the RAM check for a board with 32 MB (bundle.json records the RAM)."""
    from edgekit.bundle.build import build_bundle

    return build_bundle(w.int8, str(CORPUS / "targets" / "tiny_ram.toml"), w.path("tiny"), force=True, archive=False)


# ---- outputs (tests/test_output_safety.py has the stateful cases)


def _out_symlink(w):
    real = w.path("real-out")
    real.mkdir()
    link = w.path("link-out")
    link.symlink_to(real, target_is_directory=True)
    return link


def _onnx_in_folder(w):
    folder = w.path("models")
    folder.mkdir()
    shutil.copyfile(w.fp32 / "model.onnx", folder / "model.onnx")
    return folder / "model.onnx"


def _onnx_huge_fixed_dims(w):
    """A valid graph whose input declares 1 x 100000 x 100000 floats (40 GB per sample)."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 100000, 100000])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 100000, 100000])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "huge", [x], [y])
    path = w.path("huge.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _onnx_custom_domain_op(w):
    """A MatMul feeding an op from a domain no runtime knows (quantize must fail cleanly, in scratch)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weight = numpy_helper.from_array(np.ones((8, 8), dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Mystery", ["h"], ["y"], name="mystery", domain="com.example.custom")]
    graph = helper.make_graph(nodes, "custom", [x], [y], initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.custom", 1)])
    path = w.path("custom.onnx")
    onnx.save(model, str(path))
    return path


def _manifest_deep(w):
    """A manifest with 5,000 levels of nesting (past any sane depth, near the parser's recursion limit)."""
    folder = w.copy(w.ckpt, "deep")
    text = json.dumps(json.loads((folder / "manifest.json").read_text()))
    (folder / "manifest.json").write_text('{"deep": ' + "[" * 5000 + "]" * 5000 + ", " + text[1:])
    return folder


def _hf_config_huge(w):
    path = w.path("hf-huge.json")
    path.write_text(json.dumps({"model_type": "bert", "hidden_size": 1 << 22, "num_hidden_layers": 4096,
                                "num_attention_heads": 16, "intermediate_size": 1 << 22, "vocab_size": 30522}))
    return path


def _hf_config_bad_size(w):
    path = w.path("hf-bad.json")
    path.write_text(json.dumps({"model_type": "bert", "hidden_size": -384}))
    return path


def _lm_checkpoint(w):
    """A checkpoint that claims to hold a language model (sampling settings are checked first)."""
    from corpus.hostile import as_language_model

    folder = w.copy(w.ckpt, "lm")
    as_language_model(folder)
    return folder


def _escape_path(w):
    return w.path("\x1b]0;pwned\x07\x1b[31mred")


BUILDERS = {
    "random_onnx": lambda w: w.random_bytes("random.onnx"),
    "random_pt": lambda w: w.random_bytes("random.pt"),
    "random_gguf": lambda w: w.random_bytes("random.gguf"),
    "truncated_gguf": lambda w: (w.path("short.gguf").write_bytes(b"GGUF\x03\x00\x00\x00"), w.path("short.gguf"))[1],
    "empty_onnx": lambda w: (w.path("empty.onnx").write_bytes(b""), w.path("empty.onnx"))[1],
    "truncated_onnx": _onnx_truncated,
    "broken_onnx": _onnx_broken_graph,
    "truncated_pt": _torchscript_truncated,
    "ckpt_truncated": _ckpt_truncated,
    "ckpt_random": _ckpt_random,
    "ckpt_mismatch": _ckpt_mismatch,
    "ckpt_shapes": _ckpt_wrong_shapes,
    "ckpt_changed": _ckpt_changed,
    "manifest_escape": _manifest_path_escape,
    "manifest_symlink": _manifest_symlink_escape,
    "manifest_kind": _manifest_edit(kind="weights"),
    "manifest_version": _manifest_edit(schema_version=7),
    "manifest_schema": _manifest_edit(schema="someone.else"),
    "manifest_inputs": _manifest_edit(inputs="input"),
    "manifest_files": _manifest_edit(files=[{"path": "checkpoint.pt"}]),
    "manifest_model": _manifest_edit(model=None),
    "manifest_truncated": _manifest_text('{"schema": "edgekit.manifest", "schema_version": 1, "kind": "chec'),
    "manifest_list": _manifest_text("[1, 2, 3]\n"),
    "manifest_binary": _manifest_text("\udcff\udcfe garbage".encode("utf-8", "surrogateescape").decode("latin-1")),
    "manifest_missing": _manifest_missing,
    "q_random_onnx": _quantized_with("ronnx", _random_model_onnx),
    "q_random_pt": _quantized_with("rpt", _random_model_pt),
    "q_no_reference": _quantized_with("noref", _no_reference),
    "q_pickled_reference": _quantized_with("pklref", _pickled_reference),
    "q_garbage_reference": _quantized_with("badref", _garbage_reference_keys),
    "e_tampered": _export_with("tampered", _tamper_model),
    "e_no_reference": _export_with("noref", _no_reference),
    "e_broken_graph": _export_with("broken", _broken_graph_model),
    "b_tampered": _bundle_with("tampered", _tamper_model),
    "b_extra": _bundle_with("extra", _bundle_extra),
    "b_sums_escape": _bundle_with("sums", _bundle_sums_escape),
    "b_no_sums": _bundle_with("nosums", _bundle_no_sums),
    "b_version": _bundle_with("version", _bundle_json_edit(schema_version=9)),
    "b_model_escape": _bundle_with("modelesc", _bundle_json_edit(model="../model.onnx")),
    "b_target_newline": _bundle_with("tgtnl", _bundle_json_edit(target="rpi4\nrm -rf ~")),
    "b_threads_huge": _bundle_with("threads", _bundle_json_edit(threads=10**9)),
    "calib_shape": _calib(np.zeros((8, 3, 8, 8), dtype=np.float32)),
    "calib_rank": _calib(np.zeros((8, 64), dtype=np.float32)),
    "calib_strings": _calib(np.array([["a"] * 64] * 4, dtype="<U1").reshape(4, 1, 8, 8)),
    "calib_complex": _calib(np.zeros((4, 1, 8, 8), dtype=np.complex64)),
    "calib_nan": _calib(_with_value(np.nan)),
    "calib_inf": _calib(_with_value(np.inf)),
    "calib_zero": _calib(np.zeros((0, 1, 8, 8), dtype=np.float32)),
    "calib_object": _calib(_calib_object),
    "calib_truncated": _calib(_calib_truncated),
    "calib_random": _calib(_calib_random),
    "calib_random_npz": _calib(_calib_random, ".npz"),
    "calib_empty": _calib_empty_folder,
    "text_not_utf8": _text_not_utf8,
    "npz_pickled": _npz_pickled,
    "npz_truncated": _npz_truncated,
    "not_artifact": _not_an_artifact,
    "tiny_bundle": _tiny_bundle,
    "blocked": lambda w: w.file_blocking() / "sub",
    "out_symlink": _out_symlink,
    "onnx_in_folder": _onnx_in_folder,
    "huge_onnx": _onnx_huge_fixed_dims,
    "custom_onnx": _onnx_custom_domain_op,
    "manifest_deep": _manifest_deep,
    "hf_huge": _hf_config_huge,
    "hf_bad_size": _hf_config_bad_size,
    "escape_path": _escape_path,
    "lm_ckpt": _lm_checkpoint,
    "proc": lambda w: Path("/proc/edgekit-cannot-write-here"),
}
