"""Models whose int8 copies diverge from the float model: what the parity gate must refuse.

``cancelling`` computes the difference of two nearly equal linear layers, scaled up: the float
output is the 0.1% difference between their weights, which int8 rounding (about 0.4% of a weight
range) swamps, so every int8 recipe's output is noise against the float model's. A
``package.module:factory`` source (tests/ is on the path) for ``quantize`` and ``export``."""

from __future__ import annotations

import torch
from torch import nn


class Cancelling(nn.Module):
    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.a = nn.Linear(64, 10)
        self.b = nn.Linear(64, 10)
        with torch.no_grad():
            self.a.weight.copy_(torch.randn(10, 64, generator=generator) * 0.1)
            self.b.weight.copy_(self.a.weight + 1e-4 * torch.randn(10, 64, generator=generator))
            self.b.bias.copy_(self.a.bias)

    def forward(self, x):
        x = x.flatten(1)
        return (self.a(x) - self.b(x)) * 1000.0


def cancelling() -> nn.Module:
    return Cancelling()
