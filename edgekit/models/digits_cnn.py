"""The default model: a small CNN for 8x8 digits, built from conv-bn-relu blocks that fuse for int8."""

from __future__ import annotations

import torch
from torch import nn

from edgekit.core.input_spec import InputSpec
from edgekit.data.digits import INPUT_SHAPE, NUM_CLASSES
from edgekit.models.checks import expect_shape
from edgekit.models.registry import ModelSpec, register_model


def conv_bn_relu(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=False),
    )


class DigitsCNN(nn.Module):
    """(N, 1, 8, 8) float images in [0, 1] -> (N, 10) logits."""

    def __init__(self, width: int = 16, num_classes: int = NUM_CLASSES, dropout: float = 0.1):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(1, width),
            conv_bn_relu(width, 2 * width),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
            conv_bn_relu(2 * width, 4 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        if not torch.jit.is_scripting():  # the check is Python-only; TorchScript compiles around it
            expect_shape("digits-cnn", x, INPUT_SHAPE, "(N, 1, 8, 8) float32 in [0, 1]")
        return self.head(self.dropout(self.features(x)))


register_model(
    ModelSpec(
        name="digits-cnn",
        factory=DigitsCNN,
        default_config={"width": 16, "num_classes": NUM_CLASSES, "dropout": 0.1},
        input_spec=lambda cfg: (InputSpec("input", (None, *INPUT_SHAPE), "float32", {0: "batch"}),),
        outputs=("logits",),
        task={"type": "classification", "dataset": "digits", "metric": "accuracy"},
        description="3 conv-bn-relu blocks + linear head for the 8x8 handwritten digits",
        onnx_exporter_why="both exporters give the same 10-node graph; the TorchScript one exports about 50x faster",
    )
)
