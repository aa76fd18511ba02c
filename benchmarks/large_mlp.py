"""A float model past protobuf's 2 GB limit, for benchmarks/external_data.py (random weights)."""

import torch

WIDTH = 8192
LAYERS = 9  # 9 x 8192 x 8192 weights: 604 M parameters, 2.42 GB in fp32


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        linear = torch.nn.Linear(WIDTH, WIDTH)
        torch.nn.init.normal_(linear.weight, std=WIDTH ** -0.5)
        layers += [linear, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])
