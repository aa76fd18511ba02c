"""int8 ncnn files from fp32 ones: ncnn's own int8 layout, calibrated on edgekit's calibration data.

ncnn's tools do this in two steps (``ncnn2table`` writes scales, ``ncnn2int8`` rewrites the
files); neither ships in the Python wheels, so this module does both on the files themselves:

- scales: each quantized layer's input blob gets ``127 / max|x|`` over the calibration samples
  (run through ncnn's fp32 net, one sample at a time, a running maximum: memory does not grow
  with the sample count); its weights get ``127 / max|w|`` per output channel.
- files: Convolution and InnerProduct get ``8=2`` (per-channel weight scales), ConvolutionDepthWise
  ``8=1`` (per group); their weights are stored as int8 behind ncnn's int8 tag, followed by the
  bias, the weight scales and the input scale (the order ncnn's ``load_model`` reads them in).

Only graphs whose every layer's weights this module can size are rewritten: the three
quantized layer types and layers without weights. Anything else is a one-line refusal.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.fileio import atomic_path

QUANTIZED = {"Convolution": 2, "ConvolutionDepthWise": 1, "InnerProduct": 2}  # type -> int8_scale_term
# type -> the param keys of (bias_term, weight_data_size); num_output is 0, int8_scale_term 8 in all three
SIZE_KEYS = {"Convolution": (5, 6), "ConvolutionDepthWise": (5, 6), "InnerProduct": (1, 2)}
WEIGHTLESS = frozenset({
    "Input", "Split", "Concat", "Slice", "Crop", "Flatten", "Reshape", "Permute", "Squeeze", "ExpandDims",
    "Pooling", "Pooling1D", "Pooling3D", "ReLU", "Clip", "Sigmoid", "TanH", "HardSigmoid", "HardSwish", "Swish",
    "Mish", "GELU", "ELU", "SELU", "Softmax", "BinaryOp", "UnaryOp", "Eltwise", "Dropout", "Noop", "Padding",
    "Interp", "ShuffleChannel", "Reduction", "Tile", "Erf",
})
INT8_TAG = struct.pack("<I", 0x000D4B38)  # ncnn's ModelBin: the weights that follow are int8
FP32_TAG = b"\0\0\0\0"
INT8_MAX = 127.0


@dataclass
class Layer:
    kind: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: list[str]  # "key=value" as written
    data: bytes = b""  # this layer's part of the .bin
    int8: dict = field(default_factory=dict)

    def param(self, key: int, default: int = 0) -> int:
        for item in self.params:
            name, _, value = item.partition("=")
            if name == str(key):
                return int(value)
        return default

    def line(self) -> str:
        return " ".join([self.kind, self.name, str(len(self.bottoms)), str(len(self.tops)), *self.bottoms, *self.tops,
                         *self.params])


def read(param: Path) -> tuple[list[str], list[Layer]]:
    """The header lines and the layers of an fp32 ncnn model, each with its bytes of the ``.bin``."""
    lines = [line for line in param.read_text(encoding="ascii").splitlines() if line.strip()]
    layers = []
    for line in lines[2:]:
        words = line.split()
        kind, name, n_in, n_out = words[0], words[1], int(words[2]), int(words[3])
        rest = words[4:]
        layers.append(Layer(kind, name, rest[:n_in], rest[n_in:n_in + n_out], rest[n_in + n_out:]))
    blob = param.with_suffix(".bin").read_bytes()
    offset = 0
    for layer in layers:
        size = _data_size(layer, blob, offset)
        layer.data, offset = blob[offset:offset + size], offset + size
    if offset != len(blob):
        raise InputFileError(f"{param.with_suffix('.bin').name} holds {len(blob)} bytes; the graph's layers use {offset}")
    return lines[:2], layers


def _data_size(layer: Layer, blob: bytes, offset: int) -> int:
    if layer.kind in WEIGHTLESS:
        return 0
    if layer.kind not in QUANTIZED:
        raise UsageError(f"ncnn int8: layer {layer.name!r} is a {layer.kind}, whose weights edgekit's ncnn int8 "
                         f"writer does not handle (it quantizes {', '.join(QUANTIZED)}); use --format onnx for int8")
    if layer.param(8) or (layer.kind != "InnerProduct" and layer.param(19)):
        raise UsageError(f"ncnn int8: layer {layer.name!r} is already int8 or takes its weights as an input")
    if blob[offset:offset + 4] != FP32_TAG:
        raise UsageError(f"ncnn int8: layer {layer.name!r} does not store fp32 weights (export with fp16=0)")
    bias, size = SIZE_KEYS[layer.kind]
    return 4 + 4 * layer.param(size) + (4 * layer.param(0) if layer.param(bias) else 0)


def input_maxima(param: Path, feeds, input_names: list[str], layers: list[Layer]) -> tuple[dict[str, float], int]:
    """max |x| of each quantized layer's input blob over every sample of ``feeds``, and the sample count."""
    import ncnn
    import numpy as np

    blobs = sorted({layer.bottoms[0] for layer in layers if layer.kind in QUANTIZED})
    net = ncnn.Net()
    for option in ("use_vulkan_compute", "use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic"):
        setattr(net.opt, option, False)
    net.opt.num_threads = 1
    if net.load_param(str(param)) != 0 or net.load_model(str(param.with_suffix(".bin"))) != 0:
        raise InputFileError(f"ncnn cannot load {param}")
    ncnn_inputs = list(net.input_names())
    maxima = dict.fromkeys(blobs, 0.0)
    seen = 0
    for feed in feeds:
        arrays = [np.ascontiguousarray(feed[name], dtype=np.float32) for name in input_names]
        for row in range(len(arrays[0])):
            samples = [np.ascontiguousarray(a[row]) for a in arrays]  # the Mats borrow these buffers
            extractor = net.create_extractor()
            extractor.set_light_mode(False)  # light mode frees blobs once consumed; one is read after its consumer
            for name, sample in zip(ncnn_inputs, samples):
                extractor.input(name, ncnn.Mat(sample))
                if name in maxima:  # an input blob is the sample itself (extracting it back is not supported)
                    maxima[name] = max(maxima[name], float(np.abs(sample).max(initial=0.0)))
            for blob in (b for b in blobs if b not in ncnn_inputs):
                status, mat = extractor.extract(blob)
                if status != 0:
                    raise InputFileError(f"ncnn cannot compute blob {blob!r} of {param.name} (status {status})")
                maxima[blob] = max(maxima[blob], float(np.abs(np.array(mat)).max(initial=0.0)))
            seen += 1
    return maxima, seen


def _quantize_layer(layer: Layer, input_max: float) -> bytes:
    import numpy as np

    outputs = layer.param(0)
    groups = layer.param(7, 1) if layer.kind == "ConvolutionDepthWise" else outputs
    size = layer.param(SIZE_KEYS[layer.kind][1])
    weights = np.frombuffer(layer.data, dtype="<f4", count=size, offset=4)
    rows = weights.reshape(groups, -1)
    peak = np.abs(rows).max(axis=1)
    scales = np.where(peak > 0, INT8_MAX / np.where(peak > 0, peak, 1.0), 1.0).astype("<f4")
    quantized = np.clip(np.round(rows * scales[:, None]), -INT8_MAX, INT8_MAX).astype(np.int8).tobytes()
    padding = b"\0" * (-len(quantized) % 4)
    bias = layer.data[4 + 4 * size:]
    layer.params.append(f"8={QUANTIZED[layer.kind]}")
    layer.int8 = {"input_scale": INT8_MAX / input_max, "weight_scales": len(scales)}
    return INT8_TAG + quantized + padding + bias + scales.tobytes() + struct.pack("<f", INT8_MAX / input_max)


def quantize(param: Path, out: Path, feeds, input_names: list[str]) -> dict:
    """``out`` (and its ``.bin``): ``param``'s model with every Convolution, ConvolutionDepthWise and
    InnerProduct in int8, scaled on ``feeds`` (dicts of input batches by name). Returns its details."""
    header, layers = read(param)
    maxima, samples = input_maxima(param, feeds, input_names, layers)
    if samples == 0:
        raise UsageError("ncnn int8: the calibration data holds no samples")
    chunks, quantized, kept = [], [], []
    for layer in layers:
        if layer.kind in QUANTIZED and maxima[layer.bottoms[0]] > 0:
            chunks.append(_quantize_layer(layer, maxima[layer.bottoms[0]]))
            quantized.append(layer.name)
        else:
            chunks.append(layer.data)
            if layer.kind in QUANTIZED:  # its input was zero on every sample: no scale to take
                kept.append(layer.name)
    if not quantized:
        raise UsageError(f"nothing to quantize in {param.name}: no Convolution, ConvolutionDepthWise or InnerProduct "
                         "layer with a non-zero input")
    with atomic_path(out.with_suffix(".bin")) as tmp:
        Path(tmp).write_bytes(b"".join(chunks))
    with atomic_path(out) as tmp:
        Path(tmp).write_text("\n".join([*header, *(layer.line() for layer in layers)]) + "\n", encoding="ascii")
    details = {"int8_layers": quantized, "calibration_samples": samples, "activation_scales": "max |x| (minmax)",
               "weight_scales": "per output channel"}
    if kept:
        details["float_layers"] = kept
    return details
