"""PT2E int8 for .pte: conv -> ReLU6 is observed after the clamp (as conv -> ReLU is).

XNNPACKQuantizer fuses conv + relu but not conv + hardtanh; left alone, the conv output is
observed before ReLU6 and the clamp shares that range, so a conv whose pre-activations span
hundreds keeps only a few int8 steps for [0, 6] (EfficientNet-Lite0 and MobileNets lose most of
their fidelity). The reference here is the float model itself.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("executorch")
torch = pytest.importorskip("torch")

from edgekit.core.input_spec import InputSpec  # noqa: E402
from edgekit.quantize.toolkits import pt2e_backend  # noqa: E402


def _wide_relu6_net():
    """Two conv -> ReLU6 stages whose pre-activations reach far past 6 (like BN-folded depthwise
    convs), so the int8 range of the clamp output matters."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU6(),
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=16), torch.nn.ReLU6(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
    )
    with torch.no_grad():
        net[0].weight.mul_(40.0)  # pre-activations of about +-200
        net[2].weight.mul_(20.0)
    return net.eval()


def _int8(net, data):
    spec = (InputSpec("input", (None, 3, 16, 16), "float32", {0: "batch"}),)
    q = pt2e_backend.quantizer(per_channel=True)
    converted, seen = pt2e_backend.calibrated(net, (data[:2],), spec, [(data[i:i + 8],) for i in range(0, 32, 8)], q)
    assert seen == 32
    return converted


def test_relu6_output_is_observed_after_the_clamp():
    net = _wide_relu6_net()
    data = torch.from_numpy(np.random.default_rng(0).standard_normal((40, 3, 16, 16)).astype(np.float32))
    converted = _int8(net, data[:32])

    clamps = [n for n in converted.graph.nodes if n.op == "call_function" and "hardtanh" in str(n.target)]
    assert len(clamps) == 2
    for clamp in clamps:  # conv feeds the clamp directly; the only quantize is after it
        assert "conv" in str(clamp.args[0].target)
        assert all("quantize_per_tensor" in str(user.target) for user in clamp.users)

    with torch.no_grad():
        ref, got = net(data[32:]).double(), converted(data[32:]).double()
    cosine = (ref * got).sum(1) / (ref.norm(dim=1) * got.norm(dim=1))
    assert float(cosine.min()) > 0.99


class _IndexArithmetic(torch.nn.Module):
    """Integer index arithmetic beside float layers, as in transformers' attention masks
    (``arange(n) + offset`` indexing a tensor)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        columns = torch.arange(x.shape[1]) * 1 + 0
        return self.fc(x)[:, columns.flip(0)] + 1.0


@pytest.mark.parametrize("dynamic", [False, True])
def test_integer_scalars_stay_integer(dynamic):
    """XNNPACKQuantizer turns the scalars of every add/mul into float32 tensors; on int64 index
    arithmetic that made the indices float and calibration failed (IndexError)."""
    torch.manual_seed(0)
    net = _IndexArithmetic().eval()
    data = torch.randn(24, 8)
    spec = (InputSpec("input", (None, 8), "float32", {0: "batch"}),)
    q = pt2e_backend.quantizer(per_channel=True, dynamic=dynamic)
    converted, _ = pt2e_backend.calibrated(net, (data[:2],), spec, [(data[:16],)], q)
    with torch.no_grad():
        ref, got = net(data[16:]), converted(data[16:])
    assert got.dtype == torch.float32
    ref, got = ref.double(), got.double()
    cosine = (ref * got).sum(1) / (ref.norm(dim=1) * got.norm(dim=1))
    assert float(cosine.min()) > 0.99
