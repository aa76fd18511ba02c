"""The ImageNet CNNs whose Raspberry Pi latencies are published (benchmarks/latency_estimate.py),
written here from their papers' layer tables with random weights: speed does not depend on the
weights, and torchvision is not used.

Each factory takes no argument and returns the network in eval mode, (1, 3, 224, 224) -> (1, 1000):

    edgekit export benchmarks.published_nets:mobilenet_v2 --input-shape 1x3x224x224 --format executorch --out D
"""

from __future__ import annotations

import torch
from torch import nn

CLASSES = 1000


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU):
    layers = [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def _ready(net: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for module in net.modules():  # BatchNorm statistics away from identity, so no layer folds to nothing
        if isinstance(module, nn.BatchNorm2d):
            nn.init.uniform_(module.weight, 0.5, 1.5)
            nn.init.uniform_(module.bias, -0.1, 0.1)
    return net.eval()


class Head(nn.Sequential):
    def __init__(self, channels: int, hidden: int | None = None, act: type = nn.ReLU):
        layers: list[nn.Module] = [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        if hidden:
            layers += [nn.Linear(channels, hidden), act()]
            channels = hidden
        super().__init__(*layers, nn.Linear(channels, CLASSES))


# MobileNet v1 (Howard et al., 2017, table 1): (output channels, stride) of each depthwise-separable block
V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5, (1024, 2), (1024, 1))


def mobilenet_v1() -> nn.Module:
    layers, channels = [conv_bn(3, 32, 3, 2)], 32
    for out, stride in V1_BLOCKS:
        layers += [conv_bn(channels, channels, 3, stride, groups=channels), conv_bn(channels, out, 1)]
        channels = out
    return _ready(nn.Sequential(*layers, Head(channels)))


class InvertedResidual(nn.Module):
    """Expand 1x1, depthwise kxk, optional squeeze-excite, project 1x1 (MobileNet v2/v3, EfficientNet)."""

    def __init__(self, c_in: int, expanded: int, c_out: int, kernel: int, stride: int, act: type,
                 se_channels: int = 0, gate: type = nn.Hardsigmoid):
        super().__init__()
        layers = [] if expanded == c_in else [conv_bn(c_in, expanded, 1, act=act)]
        layers.append(conv_bn(expanded, expanded, kernel, stride, groups=expanded, act=act))
        self.body = nn.Sequential(*layers)
        self.se = None
        if se_channels:
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(expanded, se_channels, 1),
                                    act() if gate is nn.Sigmoid else nn.ReLU(), nn.Conv2d(se_channels, expanded, 1),
                                    gate())
        self.project = conv_bn(expanded, c_out, 1, act=None)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        y = self.body(x)
        if self.se is not None:
            y = y * self.se(y)
        y = self.project(y)
        return x + y if self.residual else y


# MobileNet v2 (Sandler et al., 2018, table 2): expansion t, channels c, repeats n, first stride s
V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
             (6, 320, 1, 1))


def mobilenet_v2() -> nn.Module:
    layers, channels = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
    for t, c, n, s in V2_STAGES:
        for i in range(n):
            layers.append(InvertedResidual(channels, channels * t, c, 3, s if i == 0 else 1, nn.ReLU6))
            channels = c
    layers.append(conv_bn(channels, 1280, 1, act=nn.ReLU6))
    return _ready(nn.Sequential(*layers, Head(1280)))


def _make_divisible(value: float) -> int:
    """The nearest multiple of 8, never below 8 nor more than 10 % under ``value`` (the papers' channel rounding)."""
    rounded = max(8, int(value + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * value else rounded


# MobileNet v3 (Howard et al., 2019, tables 1 and 2): kernel, expanded, out, squeeze-excite, hard-swish, stride
V3_LARGE = ((3, 16, 16, 0, 0, 1), (3, 64, 24, 0, 0, 2), (3, 72, 24, 0, 0, 1), (5, 72, 40, 1, 0, 2),
            (5, 120, 40, 1, 0, 1), (5, 120, 40, 1, 0, 1), (3, 240, 80, 0, 1, 2), (3, 200, 80, 0, 1, 1),
            (3, 184, 80, 0, 1, 1), (3, 184, 80, 0, 1, 1), (3, 480, 112, 1, 1, 1), (3, 672, 112, 1, 1, 1),
            (5, 672, 160, 1, 1, 2), (5, 960, 160, 1, 1, 1), (5, 960, 160, 1, 1, 1))
V3_SMALL = ((3, 16, 16, 1, 0, 2), (3, 72, 24, 0, 0, 2), (3, 88, 24, 0, 0, 1), (5, 96, 40, 1, 1, 2),
            (5, 240, 40, 1, 1, 1), (5, 240, 40, 1, 1, 1), (5, 120, 48, 1, 1, 1), (5, 144, 48, 1, 1, 1),
            (5, 288, 96, 1, 1, 2), (5, 576, 96, 1, 1, 1), (5, 576, 96, 1, 1, 1))


def _mobilenet_v3(blocks, last: int, hidden: int) -> nn.Module:
    layers, channels = [conv_bn(3, 16, 3, 2, act=nn.Hardswish)], 16
    for kernel, expanded, out, se, hswish, stride in blocks:
        act = nn.Hardswish if hswish else nn.ReLU
        layers.append(InvertedResidual(channels, expanded, out, kernel, stride, act,
                                       _make_divisible(expanded / 4) if se else 0))
        channels = out
    layers.append(conv_bn(channels, last, 1, act=nn.Hardswish))
    return _ready(nn.Sequential(*layers, Head(last, hidden, nn.Hardswish)))


def mobilenet_v3_large() -> nn.Module:
    return _mobilenet_v3(V3_LARGE, 960, 1280)


def mobilenet_v3_small() -> nn.Module:
    return _mobilenet_v3(V3_SMALL, 576, 1024)


# EfficientNet-B0 (Tan and Le, 2019, table 1): expansion, kernel, channels, repeats, first stride
B0_STAGES = ((1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2), (6, 5, 112, 3, 1),
             (6, 5, 192, 4, 2), (6, 3, 320, 1, 1))


def efficientnet_b0() -> nn.Module:
    layers, channels = [conv_bn(3, 32, 3, 2, act=nn.SiLU)], 32
    for t, kernel, c, n, s in B0_STAGES:
        for i in range(n):
            layers.append(InvertedResidual(channels, channels * t, c, kernel, s if i == 0 else 1, nn.SiLU,
                                           max(1, channels // 4), gate=nn.Sigmoid))
            channels = c
    layers.append(conv_bn(channels, 1280, 1, act=nn.SiLU))
    return _ready(nn.Sequential(*layers, Head(1280)))


class Basic(nn.Module):
    expansion = 1

    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        out = width * self.expansion
        self.body = self.layers(c_in, width, stride)
        self.shortcut = None if stride == 1 and c_in == out else conv_bn(c_in, out, 1, stride, act=None)
        self.relu = nn.ReLU()

    def layers(self, c_in: int, width: int, stride: int) -> nn.Sequential:
        return nn.Sequential(conv_bn(c_in, width, 3, stride), conv_bn(width, width, 3, act=None))

    def forward(self, x):
        return self.relu(self.body(x) + (x if self.shortcut is None else self.shortcut(x)))


class Bottleneck(Basic):
    expansion = 4

    def layers(self, c_in: int, width: int, stride: int) -> nn.Sequential:
        return nn.Sequential(conv_bn(c_in, width, 1), conv_bn(width, width, 3, stride),
                             conv_bn(width, width * 4, 1, act=None))


def _resnet(block: type[Basic], repeats: tuple[int, ...]) -> nn.Module:
    """ResNet (He et al., 2015, table 1): a 7x7 stem, a max pool, four stages of blocks."""
    layers, channels = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for stage, n in enumerate(repeats):
        width = 64 << stage
        for i in range(n):
            layers.append(block(channels, width, 2 if i == 0 and stage > 0 else 1))
            channels = width * block.expansion
    return _ready(nn.Sequential(*layers, Head(channels)))


def resnet18() -> nn.Module:
    return _resnet(Basic, (2, 2, 2, 2))


def resnet50() -> nn.Module:
    return _resnet(Bottleneck, (3, 4, 6, 3))


NETS = {
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_large": mobilenet_v3_large,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
    "resnet18": resnet18,
    "resnet50": resnet50,
}
