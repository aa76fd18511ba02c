"""Dynamic axes are verified at two sizes each: batch 1 and 7, sequence 16 and 11."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import one_line_error
from typer.testing import CliRunner

from edgekit.formats.artifacts import load_manifest
from edgekit.cli.app import app
from edgekit.formats.reference import read_reference

runner = CliRunner()
SHAPE = ["--input-shape", "Nx16x8", "--dynamic-axes", "input=0:batch,1:sequence"]


def _positional(baked: bool):
    import torch
    from torch import nn

    class Positional(nn.Module):
        """Adds a learned position table; ``baked`` slices it with a Python int (frozen by tracing)."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.pos = nn.Parameter(torch.randn(32, 8))
            self.proj = nn.Linear(8, 4)

        def forward(self, x):
            length = int(x.shape[1]) if baked else x.shape[1]
            return self.proj(x + self.pos[:length])

    return Positional()


def dynamic_positions():
    return _positional(baked=False)


def baked_positions():
    return _positional(baked=True)


def test_both_sequence_lengths_are_checked(tmp_path):
    out = tmp_path / "export"
    result = runner.invoke(app, ["export", "test_dynamic_axes:dynamic_positions", *SHAPE, "--format", "onnx,torchscript",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    cases = read_reference(out / "reference.npz")
    assert {batch: inputs["input"].shape for batch, (inputs, _) in cases.items()} == {1: (1, 16, 8), 7: (7, 11, 8)}
    _, manifest = load_manifest(out)
    for entry in manifest.files:
        assert entry.metrics["parity"]["batch_sizes"] == [1, 7] and entry.metrics["parity"]["max_abs"] < 1e-5
    model = dynamic_positions().eval()
    import torch

    with torch.no_grad():
        for inputs, expected in cases.values():
            np.testing.assert_allclose(model(torch.from_numpy(inputs["input"])).numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_a_length_frozen_by_tracing_fails_the_export(tmp_path, fmt):
    out = tmp_path / "export"
    result = runner.invoke(app, ["export", "test_dynamic_axes:baked_positions", *SHAPE, "--format", fmt, "--out", str(out)])
    line = one_line_error(result, 1)
    assert "batch 7" in line and "(7, 11, 8)" in line
    assert not out.exists()
