"""Small models with the shapes that broke quantization on real pretrained models (issue 32).

``branching``: a classifier whose forward takes a branch on a value it computed (``if h.mean() >
0``), as pre- and post-processing code in real models does. Tracing (TorchScript, ONNX) records
the branch taken; ``torch.export`` (ExecuTorch) refuses a branch on data, so ExecuTorch fails
beside formats that work. A ``package.module:factory`` source (tests/ is on the path)."""

from __future__ import annotations

import torch
from torch import nn


class Branching(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.mean() > 0:  # a branch on data: torch.export cannot trace it
            h = h * 2.0
        return self.b(h)


def branching() -> nn.Module:
    return Branching().eval()


class Mlp(nn.Module):
    """Two linear layers: what a TorchScript file of a small classifier holds."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(16, 64)
        self.b = nn.Linear(64, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def save_scripted_mlp(path) -> None:
    """A TorchScript file (``torch.jit.script``) of ``Mlp``."""
    torch.jit.script(Mlp().eval()).save(str(path))
