"""Independent checks that a file edgekit calls int8 holds int8 weights and still computes what the float
model computes: read with the file format's own tools, compared with the checkpoint's torch model."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def onnx_int8_initializers(path: Path) -> tuple[int, int]:
    """(int8/uint8 weight elements, float weight elements) among the graph's initializers of 2+ dims."""
    import onnx

    model = onnx.load(str(path))
    int8 = floats = 0
    for tensor in model.graph.initializer:
        if len(tensor.dims) < 2:
            continue
        count = int(np.prod(tensor.dims))
        if tensor.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8):
            int8 += count
        elif tensor.data_type == onnx.TensorProto.FLOAT:
            floats += count
    return int8, floats


def torchscript_quantized_weights(path: Path) -> int:
    """How many quantized (qint8) weight tensors the TorchScript module's packed parameters hold."""
    import torch

    from edgekit.formats.torchscript_backend import load_torchscript

    module = load_torchscript(path, "qnnpack" if "qnnpack" in torch.backends.quantized.supported_engines else None)
    found = 0
    for _, value in module.state_dict().items():
        if isinstance(value, torch.Tensor) and value.is_quantized:
            found += 1
    text = str(module.inlined_graph) if hasattr(module, "inlined_graph") else ""
    return found + text.count("quantized::")


def agreement_with_float(checkpoint: Path, predict) -> tuple[float, float]:
    """(cosine of logits, top-1 agreement) of ``predict`` against the checkpoint's torch model on the
    held-out digits test split."""
    import torch

    from edgekit.formats.artifacts import load_manifest
    from edgekit.data.datasets import load_split
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(checkpoint)
    model = load_model_from_artifact(folder, manifest).eval()
    data = load_split(manifest.task["dataset"], "test").inputs[:128]
    with torch.inference_mode():
        want = model(torch.from_numpy(data)).numpy().astype(np.float64)
    got = np.asarray(predict(data), dtype=np.float64)
    cosine = float((want * got).sum() / (np.linalg.norm(want) * np.linalg.norm(got)))
    return cosine, float((want.argmax(1) == got.argmax(1)).mean())
