"""Models from outside the zoo: an ONNX file, a user nn.Module factory, a transformers encoder."""

import numpy as np
import pytest

from edgekit.formats.artifacts import load_manifest
from edgekit.core.errors import InputFileError, UsageError
from tiny_models import tiny_net  # noqa: F401 - the user model, by its import path


@pytest.fixture()
def user_calib(tmp_path):
    folder = tmp_path / "calib"
    folder.mkdir()
    np.save(folder / "x.npy", np.random.default_rng(0).standard_normal((40, 3, 6, 6)).astype(np.float32))
    return folder


def test_onnx_file_static_and_dynamic(digits_fp32_export, tmp_path):
    from conftest import CALIB_DIGITS

    from edgekit.quantize.api import quantize

    model = digits_fp32_export / "model.onnx"
    _, q = quantize(model, "static", tmp_path / "s", "rpi4", calib=CALIB_DIGITS)
    assert q.formats() == ("onnx",) and q.model["name"] == "onnx:model.onnx"
    entry = q.file("onnx")
    assert entry.metrics["metric"] == "cosine" and entry.metrics["accuracy"] is None
    assert entry.metrics["fidelity"]["cosine"] > 0.99 and entry.metrics["fidelity"]["sqnr_db"] > 15
    assert q.parent["kind"] == "onnx" and len(q.parent["sha256"]) == 64
    _, d = quantize(model, "dynamic", tmp_path / "d", "rpi4")
    assert d.file("onnx").details["format"].startswith("QOperator")
    with pytest.raises(UsageError, match="only --format onnx applies"):
        quantize(model, "static", tmp_path / "x", calib=CALIB_DIGITS, formats=("torchscript", "onnx"))
    with pytest.raises(UsageError, match="QAT needs the PyTorch model"):
        quantize(model, "qat", tmp_path / "x")
    with pytest.raises(UsageError, match="unknown input name"):
        quantize(model, "dynamic", tmp_path / "x", input_shapes=["pixels=1x1x8x8"])


def test_onnx_file_must_be_readable(tmp_path):
    from edgekit.quantize.api import quantize

    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(InputFileError, match="not a readable ONNX model|fails the ONNX checker"):
        quantize(junk, "dynamic", tmp_path / "q")
    with pytest.raises(InputFileError, match="ONNX model not found"):
        quantize(tmp_path / "none.onnx", "dynamic", tmp_path / "q")


def test_user_module_with_state_dict(tmp_path, user_calib):
    import torch

    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    weights = tmp_path / "w.pt"
    state = tiny_net().state_dict()
    state = {k: v * 1.5 for k, v in state.items()}
    torch.save(state, weights)
    _, q = quantize("tiny_models:tiny_net", "static", tmp_path / "q", "x86-64", calib=user_calib,
                    input_shapes=["1x3x6x6"], dynamic_axes=["0"], state_dict=weights)
    assert q.formats() == ("torchscript", "onnx")
    assert q.inputs[0].shape == (None, 3, 6, 6) and q.inputs[0].dynamic_axes == {0: "batch"}
    for entry in q.files:  # a 5-output toy on inputs spread over the calibrated range
        assert entry.metrics["fidelity"]["cosine"] > 0.95 and entry.metrics["fidelity"]["sqnr_db"] > 8
    # the quantized user model goes on through export like a zoo one (parity re-checked there)
    _, exported = export(tmp_path / "q", tmp_path / "dist", ("onnx",))
    assert exported.file("onnx").precision == "int8"


def test_user_module_errors(tmp_path, user_calib):
    import torch

    from edgekit.quantize.api import quantize

    with pytest.raises(UsageError, match="give its input with --input-shape"):
        quantize("tiny_models:tiny_net", "dynamic", tmp_path / "q")
    with pytest.raises(UsageError, match="cannot import 'no_such_pkg.mod'"):
        quantize("no_such_pkg.mod:make", "dynamic", tmp_path / "q", input_shapes=["1x3"])
    with pytest.raises(UsageError, match="needs calibration data"):
        quantize("tiny_models:tiny_net", "static", tmp_path / "q", input_shapes=["1x3x6x6"])
    evil = tmp_path / "evil.pt"
    torch.save({"conv.weight": object()}, evil)
    with pytest.raises(InputFileError, match="refusing to load"):
        quantize("tiny_models:tiny_net", "dynamic", tmp_path / "q", input_shapes=["1x3x6x6"], state_dict=evil)
    wrong = tmp_path / "wrong.pt"
    torch.save({"other.weight": torch.zeros(2)}, wrong)
    with pytest.raises(InputFileError, match="does not match"):
        quantize("tiny_models:tiny_net", "dynamic", tmp_path / "q", input_shapes=["1x3x6x6"], state_dict=wrong)
    bad = tmp_path / "bad"
    bad.mkdir()
    np.save(bad / "x.npy", np.zeros((4, 3, 5, 5), np.float32))
    with pytest.raises(InputFileError, match="axis 2 differs"):
        quantize("tiny_models:tiny_net", "static", tmp_path / "q", input_shapes=["Nx3x6x6"], calib=bad)
    assert not (tmp_path / "q").exists()


@pytest.fixture(scope="module")
def bert_config(tmp_path_factory):
    pytest.importorskip("transformers")
    import json

    folder = tmp_path_factory.mktemp("bert")
    config = {"model_type": "bert", "vocab_size": 500, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 64}
    (folder / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    calib = folder / "calib"
    calib.mkdir()
    for i, length in enumerate((16, 40)):  # variable sequence lengths, padded rows inside each block
        lens = rng.integers(4, length + 1, size=6)
        mask = (np.arange(length)[None, :] < lens[:, None]).astype(np.int64)
        np.savez(calib / f"b{i}.npz", input_ids=rng.integers(1, 500, (6, length)) * mask, attention_mask=mask)
    return folder, calib


def test_transformers_encoder_static_excludes_mask_tensors(bert_config, tmp_path):
    from edgekit.quantize.api import quantize

    folder, calib = bert_config
    _, q = quantize(f"hf:{folder}", "static", tmp_path / "q", "x86-64", calib=calib, calibrate_method="percentile",
                    random_init=True)  # a config alone: random weights, asked for
    entry = q.file("onnx")
    assert q.formats() == ("onnx",) and q.outputs == ("last_hidden_state",)
    # padded calibration rows put the -3.4e38 mask constants into the attention scores:
    # those tensors (and the nodes touching them) stay in float
    assert entry.details["mask_tensors"] and entry.details["float_nodes"]
    assert entry.metrics["fidelity"]["cosine"] >= 0.99
    # 12 samples: the last 2 (a fifth) held out of calibration and judged on (edgekit/fidelity/options.py)
    assert q.quantization["calibration"]["samples"] == 10
    fidelity = entry.metrics["fidelity"]
    assert (fidelity["evidence"], fidelity["samples"]) == ("calib-holdout", 2)


def test_transformers_encoder_dynamic(bert_config, tmp_path):
    from edgekit.quantize.api import quantize

    folder, _ = bert_config
    _, q = quantize(f"hf:{folder / 'config.json'}", "dynamic", tmp_path / "q", "x86-64", random_init=True)
    assert q.file("onnx").metrics["fidelity"]["cosine"] >= 0.99
    with pytest.raises(InputFileError, match="Hugging Face config not found"):
        quantize(f"hf:{tmp_path / 'nothing'}", "dynamic", tmp_path / "x")


def test_export_user_module_and_transformers_encoder(bert_config, tmp_path):
    """`edgekit export` takes models from outside the zoo too; each file is checked against the float model."""
    import onnx
    import torch
    from typer.testing import CliRunner

    from edgekit.cli.app import app
    from edgekit.export.api import export

    weights = tmp_path / "w.pt"
    torch.save(tiny_net().state_dict(), weights)
    result = CliRunner().invoke(app, [
        "export", "tiny_models:tiny_net", "--input-shape", "Nx3x6x6", "--state-dict", str(weights),
        "--format", "onnx,torchscript", "--target", "rpi4", "--out", str(tmp_path / "user"),
    ])
    assert result.exit_code == 0, result.stdout + result.stderr
    _, user = load_manifest(tmp_path / "user")
    assert user.kind == "export" and user.parent["kind"] == "module"
    for entry in user.files:
        assert entry.metrics["parity"]["max_abs"] < 1e-4 and entry.metrics["parity"]["batch_sizes"] == [1, 7]

    folder, _ = bert_config
    out, bert = export(f"hf:{folder}", tmp_path / "bert", ("onnx",), target="x86-64", random_init=True)
    entry = bert.file("onnx")
    assert bert.outputs == ("last_hidden_state",) and entry.metrics["parity"]["cosine"] > 0.99999
    graph_inputs = {i.name for i in onnx.load(str(out / "model.onnx")).graph.input}
    assert {"input_ids", "attention_mask"} <= graph_inputs

    result = CliRunner().invoke(app, ["export", "tiny_models:tiny_net", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--input-shape" in result.stderr and not (tmp_path / "x").exists()
