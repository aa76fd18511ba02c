"""A tiny MLP exported as ONNX and TorchScript in an artifact folder: the bench tests' subject."""

from __future__ import annotations

import warnings
from pathlib import Path

from edgekit.artifacts import InputSpec, Manifest, describe_file, finalize


def build_models(folder: Path, formats=("onnx", "torchscript"), engine: str | None = "qnnpack") -> Path:
    """ONNX (dynamic batch) and/or TorchScript files with a manifest (the ONNX file records an accuracy)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10)
    ).eval()
    example = torch.randn(1, 1, 8, 8)
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "onnx" in formats:
            torch.onnx.export(model, (example,), str(folder / "model.onnx"), input_names=["input"],
                              output_names=["logits"], dynamic_axes={"input": {0: "batch"}}, dynamo=False)
            files.append(describe_file(folder, "model.onnx", "onnx", metrics={"accuracy": 0.97, "float_accuracy": 0.975},
                                       details={"variant": "fp32-onnx"}))
        if "torchscript" in formats:
            torch.jit.trace(model, example).save(str(folder / "model.pt"))
            details = {"variant": "fp32-torchscript", **({"quantized_engine": engine} if engine else {})}
            files.append(describe_file(folder, "model.pt", "torchscript", details=details))
    manifest = Manifest(kind="export", model={"name": "tiny", "config": {}},
                        inputs=(InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"}),),
                        outputs=("logits",), files=tuple(files))
    finalize(manifest, folder)
    return folder
