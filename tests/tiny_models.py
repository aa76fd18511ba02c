"""A tiny MLP exported as ONNX, TorchScript and (when asked) ExecuTorch in an artifact folder: the bench tests' subject."""

from __future__ import annotations

import warnings
from pathlib import Path

from edgekit.formats.artifacts import InputSpec, Manifest, describe_file, finalize


PTE_MAX_BATCH = 16  # the batch bound the .pte is planned for


def tiny_mlp():
    """The float model every file of ``build_models`` holds (seeded: the same weights each call)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10)
    ).eval()


def write_pte(model, example, path: Path) -> None:
    """``model`` through torch.export (dynamic batch up to PTE_MAX_BATCH), lowered to XNNPACK, as a .pte."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    batch = torch.export.Dim("batch", min=1, max=PTE_MAX_BATCH)
    program = torch.export.export(model, (example.repeat(2, 1, 1, 1),), dynamic_shapes=({0: batch},))
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)


def build_models(folder: Path, formats=("onnx", "torchscript"), engine: str | None = "qnnpack") -> Path:
    """ONNX (dynamic batch), TorchScript and/or ExecuTorch files with a manifest (the ONNX file records an accuracy)."""
    import torch

    model = tiny_mlp()
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
        if "executorch" in formats:
            write_pte(model, example, folder / "model.pte")
            files.append(describe_file(folder, "model.pte", "executorch", details={
                "variant": "fp32-executorch", "delegate": "xnnpack", "max_shapes": {"batch": PTE_MAX_BATCH}}))
    manifest = Manifest(kind="export", model={"name": "tiny", "config": {}},
                        inputs=(InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"}),),
                        outputs=("logits",), files=tuple(files))
    finalize(manifest, folder)
    return folder


def tiny_net():
    """A user model (imported as ``tiny_models:tiny_net``): conv, residual add, linear."""
    import torch
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.head = nn.Linear(3 * 6 * 6, 5)

        def forward(self, x):
            return self.head(torch.flatten(torch.relu(self.conv(x)) + x, 1))

    return Tiny()
