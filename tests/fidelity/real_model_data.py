"""Held-out real models that ship inside PyPI packages, representative data made here (nothing is
downloaded), and the fidelity measured independently of edgekit (straight ONNX Runtime sessions).

* ``silero-vad``: ``silero_vad.onnx``, a recurrent voice-activity detector (input, state (2, N, 128),
  sr) -> (probability (N, 1), next state), ``If`` subgraphs on ``sr``. Data: synthetic audio at
  16 kHz (voiced harmonic bursts, chirps, noise, silence between them), cut into the 512-sample
  calls silero's own wrapper makes (64 samples of context before each: 576 a call), one stream per
  ``.npz`` file; ``sr`` is 16000 on every call.
* ``rapidocr-onnxruntime``: PP-OCRv4's text-line recognizer (CTC over 6,625 characters, the keys in
  the file's ``character`` metadata), its text detector (probability map of the page, dynamic H x W)
  and PP-OCR's orientation classifier (0 / 180 degrees). Data: lines and pages of text rendered with
  Pillow's built-in font, preprocessed as rapidocr does (BGR, (x / 255 - 0.5) / 0.5).
"""

from __future__ import annotations

from importlib import util
from pathlib import Path

import numpy as np

SR = 16000
CHUNK, CONTEXT = 512, 64  # silero-vad's 16 kHz call: 512 new samples after the last 64 of the one before
LINE_HW = (48, 320)  # the recognizer's input (rapidocr's rec_img_shape)
CLS_HW = (48, 192)  # the orientation classifier's
PAGE_HW = (480, 640)  # detector pages: multiples of 32, as rapidocr resizes them
PREPROCESS = "range=0:1,mean=0.5:0.5:0.5,std=0.5:0.5:0.5,color=bgr"
WORDS = ("edge", "board", "model", "int8", "float", "quantize", "Raspberry", "Pi", "sensor", "camera", "label",
         "invoice", "total", "amount", "order", "street", "road", "north", "south", "June", "March", "price",
         "kit", "runner", "native", "check", "verify", "batch", "stream", "voice", "text", "line", "page")


def model_file(name: str) -> Path:
    """``vad`` | ``rec`` | ``det`` | ``cls``: the packaged .onnx file."""
    package, member = {
        "vad": ("silero_vad", "data/silero_vad.onnx"),
        "rec": ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx"),
        "det": ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx"),
        "cls": ("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
    }[name]
    spec = util.find_spec(package)  # its folder, without importing it (rapidocr's __init__ needs OpenCV)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{package} is not installed (pyproject's dev extra has it)")
    return Path(next(iter(spec.submodule_search_locations))) / member


# ---- audio ----------------------------------------------------------------------------------------

def audio(seconds: float, seed: int) -> np.ndarray:
    """A label-free 16 kHz clip: bursts of voiced sound (a harmonic series on a wandering pitch with
    syllable-rate loudness), chirps and noise, with near-silence between them."""
    rng = np.random.default_rng(seed)
    out = np.zeros(int(seconds * SR), np.float32)
    pos = int(rng.uniform(0.1, 0.4) * SR)
    while pos < len(out):
        length = min(int(rng.uniform(0.3, 1.2) * SR), len(out) - pos)
        t = np.arange(length) / SR
        kind = rng.integers(0, 3)
        if kind == 0:  # voiced: pitch 90-250 Hz with vibrato, 12 harmonics falling off, 4 Hz syllables
            f0 = rng.uniform(90, 250) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(0.5, 3) * t))
            phase = 2 * np.pi * np.cumsum(f0) / SR
            sig = sum(np.sin(k * phase) / k for k in range(1, 13))
            sig *= 0.5 * (1 + np.sin(2 * np.pi * rng.uniform(3, 6) * t))
        elif kind == 1:  # a chirp 200 Hz -> 4 kHz
            f = 200 + (4000 - 200) * t / max(t[-1], 1e-3)
            sig = np.sin(2 * np.pi * np.cumsum(f) / SR)
        else:  # noise
            sig = rng.standard_normal(length)
        sig = sig / (np.abs(sig).max() + 1e-9) * rng.uniform(0.05, 0.6)
        out[pos:pos + length] += sig.astype(np.float32)
        pos += length + int(rng.uniform(0.2, 0.8) * SR)
    out += (0.002 * rng.standard_normal(len(out))).astype(np.float32)
    return out


def vad_calls(clip: np.ndarray) -> np.ndarray:
    """(calls, 576): each 512-sample chunk with the 64 samples before it (zeros before the first)."""
    padded = np.concatenate([np.zeros(CONTEXT, np.float32), clip])
    calls = (len(clip)) // CHUNK
    return np.stack([padded[i * CHUNK:i * CHUNK + CONTEXT + CHUNK] for i in range(calls)]).astype(np.float32)


def write_vad_streams(folder: Path, streams: int, seconds: float, seed: int) -> Path:
    """One .npz per stream: ``input`` (calls, 576), ``sr`` (calls,) of 16000."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(streams):
        calls = vad_calls(audio(seconds, seed + i))
        np.savez(folder / f"stream{i:02d}.npz", input=calls, sr=np.full(len(calls), SR, np.int64))
    return folder


def vad_probabilities(model: Path, folder: Path) -> np.ndarray:
    """Every call's probability over every stream of ``folder``, the state carried from call to call."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    probs = []
    for file in sorted(folder.glob("*.npz")):
        with np.load(file) as data:
            calls = data["input"]
        state = np.zeros((2, 1, 128), np.float32)
        for row in calls:
            prob, state = session.run(None, {"input": row[None], "state": state, "sr": np.array(SR, np.int64)})
            probs.append(float(prob.reshape(-1)[0]))
    return np.array(probs)


# ---- text lines and pages ----------------------------------------------------------------------------

def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def sentence(rng, words: int) -> str:
    parts = [str(rng.choice(WORDS)) for _ in range(words)]
    if rng.random() < 0.5:
        parts.insert(int(rng.integers(0, len(parts) + 1)), str(int(rng.integers(1, 9999))))
    return " ".join(parts)


def line_image(text: str, hw: tuple[int, int], rng, flip: bool = False):
    """``text`` on a light background, black-ish ink, left aligned and vertically centred, scaled to
    fit ``hw``; ``flip``: turned 180 degrees (what the orientation classifier detects)."""
    from PIL import Image, ImageDraw

    height, width = hw
    font = _font(int(rng.integers(26, 34)))
    left, top, right, bottom = font.getbbox(text)
    canvas = Image.new("RGB", (right - left + 16, bottom - top + 16), tuple(int(v) for v in rng.integers(215, 256, 3)))
    ImageDraw.Draw(canvas).text((8 - left, 8 - top), text, font=font, fill=tuple(int(v) for v in rng.integers(0, 60, 3)))
    scale = min(height / canvas.height, width / canvas.width)
    canvas = canvas.resize((max(1, int(canvas.width * scale)), max(1, int(canvas.height * scale))), Image.BILINEAR)
    out = Image.new("RGB", (width, height), canvas.getpixel((0, 0)))
    out.paste(canvas, (0, (height - canvas.height) // 2))
    return out.rotate(180) if flip else out


def write_lines(folder: Path, count: int, seed: int, hw: tuple[int, int] = LINE_HW, flips: bool = False) -> list[str]:
    """``count`` PNG text lines (``line000.png`` ...); -> their texts. ``flips``: every other line
    turned 180 degrees."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    texts = []
    for i in range(count):
        text = sentence(rng, int(rng.integers(2, 5)))
        line_image(text, hw, rng, flip=flips and i % 2 == 1).save(folder / f"line{i:03d}.png")
        texts.append(text)
    return texts


def write_pages(folder: Path, count: int, seed: int, hw: tuple[int, int] = PAGE_HW) -> Path:
    """``count`` PNG pages: a dozen lines of text at random places, sizes and inks."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        page = Image.new("RGB", (hw[1], hw[0]), tuple(int(v) for v in rng.integers(200, 256, 3)))
        draw = ImageDraw.Draw(page)
        for _ in range(int(rng.integers(8, 14))):
            font = _font(int(rng.integers(16, 40)))
            draw.text((int(rng.integers(0, hw[1] // 2)), int(rng.integers(0, hw[0] - 40))), sentence(rng, 3), font=font,
                      fill=tuple(int(v) for v in rng.integers(0, 80, 3)))
        page.save(folder / f"page{i:03d}.png")
    return folder


def image_batch(folder: Path) -> np.ndarray:
    """Every PNG of ``folder`` as rapidocr feeds it: BGR, NCHW, (x / 255 - 0.5) / 0.5."""
    from PIL import Image

    arrays = []
    for file in sorted(folder.glob("*.png")):
        rgb = np.asarray(Image.open(file).convert("RGB"), np.float32)
        arrays.append(((rgb[..., ::-1] / 255.0 - 0.5) / 0.5).transpose(2, 0, 1))
    return np.stack(arrays).astype(np.float32)


def run(model: Path, batch: np.ndarray, rows: int = 8) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: batch[i:i + rows]})[0] for i in range(0, len(batch), rows)])


def rec_keys(model: Path) -> list[str]:
    """The recognizer's classes: CTC blank, the file's ``character`` list, then a space (rapidocr's)."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
    return ["<blank>", *meta["character"].splitlines(), " "]


def decode(probs: np.ndarray, keys: list[str]) -> list[str]:
    """Greedy CTC decode of (N, T, C) probabilities: repeats merged, blanks dropped."""
    texts = []
    for ids in probs.argmax(-1):
        chars, last = [], 0
        for i in ids.tolist():
            if i != last and i != 0:
                chars.append(keys[i])
            last = i
        texts.append("".join(chars))
    return texts


def text_mask_iou(reference: np.ndarray, candidate: np.ndarray, threshold: float = 0.3) -> float:
    """IoU of the text masks (probability > rapidocr's 0.3 threshold) over every page."""
    a, b = reference > threshold, candidate > threshold
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def lifted(model: Path, out: Path, opset: int | None = None) -> Path:
    """``model`` with its Constant weights (the If branches' too) made initializers, as ONNX Runtime's
    quantizer takes only those; written by this code, not edgekit's (an independent reference), at
    ``opset`` or above where given."""
    import onnx

    m = onnx.load(str(model))

    def lift(graph):
        kept = []
        for node in graph.node:
            if node.op_type == "Constant" and [a.name for a in node.attribute] == ["value"]:
                tensor = graph.initializer.add()
                tensor.CopyFrom(node.attribute[0].t)
                tensor.name = node.output[0]
                continue
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    lift(attr.g)
            kept.append(node)
        del graph.node[:]
        graph.node.extend(kept)

    lift(m.graph)
    if opset is not None and next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < opset:
        m = onnx.version_converter.convert_version(m, opset)
    onnx.save(m, str(out))
    return out
