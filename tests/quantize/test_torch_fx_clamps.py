"""torch.ao FX static int8 (TorchScript) on the layer patterns of pretrained edge CNNs.

EfficientNet ports compute TensorFlow's "same" padding in a Conv2d subclass that calls
``F.conv2d`` itself, and use ReLU6. Left to torch.ao, the BN after such a conv is not folded
(fusion matches modules only), ReLU6 shares its input's pre-activation range, and torch 2.13's
quantized hardtanh misreads the channels-last tensors qnnpack convolutions return: the int8
EfficientNet-Lite0 had logit cosine 0.02 to the float model. The reference here is the float
model itself.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from edgekit.quantize.toolkits import torch_backend  # noqa: E402
from edgekit.quantize.toolkits.conv_bn_fold import fold_functional_conv_bn  # noqa: E402


class SameConv(nn.Conv2d):
    """TensorFlow-style "same" padding computed in forward, then a functional convolution."""

    def forward(self, x):
        pad = self.kernel_size[0] - 1
        x = F.pad(x, (pad // 2, pad - pad // 2, pad // 2, pad - pad // 2))
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class EdgeNet(nn.Module):
    """Stem and one depthwise-separable block in the EfficientNet-Lite style."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn0 = SameConv(3, 16, 3, stride=2, bias=False), nn.BatchNorm2d(16)
        self.dw, self.bn1 = SameConv(16, 16, 3, groups=16, bias=False), nn.BatchNorm2d(16)
        self.pw, self.bn2 = nn.Conv2d(16, 24, 1, bias=False), nn.BatchNorm2d(24)
        self.act = nn.ReLU6()
        self.head = nn.Linear(24, 10)

    def forward(self, x):
        x = self.act(self.bn0(self.stem(x)))
        x = self.act(self.bn1(self.dw(x)))
        x = self.bn2(self.pw(x))
        return self.head(x.mean((2, 3)))


def _trained_looking_net() -> EdgeNet:
    """BN statistics like a trained network's: per-channel scales over two orders of magnitude,
    so pre-activations of a few channels span hundreds while ReLU6 keeps [0, 6]."""
    torch.manual_seed(0)
    net = EdgeNet()
    with torch.no_grad():
        for bn in (net.bn0, net.bn1, net.bn2):
            channels = bn.num_features
            bn.running_var.copy_(torch.logspace(-4, 0, channels))
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.weight.uniform_(0.5, 3.0)
            bn.bias.uniform_(-1.0, 2.0)
    return net.eval()


def _data(rows: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((rows, 3, 32, 32)).astype(np.float32))


def _cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.double().flatten(1), b.double().flatten(1)
    return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))


def test_bn_after_a_functional_conv_is_folded_exactly_and_the_model_is_left_alone():
    net = _trained_looking_net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    x = _data(8, 1)
    folded = fold_functional_conv_bn(net, (x[:2],))
    assert isinstance(folded.bn0, nn.Identity) and isinstance(folded.bn1, nn.Identity)  # after functional convs
    assert isinstance(folded.bn2, nn.BatchNorm2d)  # module conv -> BN: left to torch.ao's own fusion
    assert folded.stem.bias is not None and folded.dw.bias is not None
    with torch.no_grad():
        np.testing.assert_allclose(folded(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-4)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())  # the caller's weights untouched


def test_a_conv_that_ignores_its_bias_attribute_is_not_folded():
    """Folding puts the BN's shift into ``bias``; a forward that passes None instead would drop it."""

    class NoBiasConv(nn.Conv2d):
        def forward(self, x):
            return F.conv2d(x, self.weight, None, self.stride, self.padding)

    net = nn.Sequential(NoBiasConv(3, 4, 3, bias=False), nn.BatchNorm2d(4)).eval()
    with torch.no_grad():
        net[1].running_mean.fill_(0.5)
    assert fold_functional_conv_bn(net, (_data(2, 5),)) is net


def test_a_model_with_nothing_to_fold_comes_back_as_is():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    assert fold_functional_conv_bn(net, (_data(2, 5),)) is net


@pytest.mark.parametrize("per_channel", [True, False])
def test_static_int8_keeps_the_float_models_outputs(per_channel):
    net = _trained_looking_net()
    calib = _data(32, 2)
    q = torch_backend.static_int8_fx(net, (calib[:2],), [(calib[i:i + 8],) for i in range(0, 32, 8)], "qnnpack",
                                     per_channel=per_channel)
    code = q.code
    assert "hardtanh" not in code and "relu6" not in code and "_act" not in code  # both ReLU6 absorbed
    assert "batch_norm" not in code
    held_out = _data(16, 3)
    with torch_backend.quantized_engine("qnnpack"), torch.no_grad():
        cosine = _cosine(q(held_out), net(held_out))
    assert float(cosine.min()) > (0.99 if per_channel else 0.95), cosine


def test_a_clamp_after_something_that_does_not_requantize_stays():
    """ReLU6 after a max-pool shares the pool's input range: it is not absorbed into an observer."""
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.ReLU6(), nn.Flatten(),
                        nn.Linear(8 * 15 * 15, 4)).eval()
    calib = _data(16, 4)
    q = torch_backend.static_int8_fx(net, (calib[:2],), [(calib,)], "qnnpack")
    assert "3" in [n.target for n in q.graph.nodes if n.op == "call_module"]  # "3": the ReLU6
    assert torch_backend.absorb_clamps(torch.fx.symbolic_trace(net)) == 0  # no observers: nothing to absorb


@pytest.mark.parametrize("engine, absorbed", [("qnnpack", 2), ("x86", 0)])
def test_only_full_range_observers_absorb_a_clamp(engine, absorbed):
    """Kernels saturate at 0..255: with the x86 engine's reduce_range (0..127) values past the
    observed range would pass unclamped, so the ReLU6 stays."""
    from torch.ao.quantization.quantize_fx import prepare_fx

    x = _data(2, 6)
    folded = fold_functional_conv_bn(_trained_looking_net(), (x,))
    with torch_backend.quiet(), torch_backend.quantized_engine(engine):
        prepared = prepare_fx(folded, torch_backend._qconfig_mapping(engine), (x,))
        assert torch_backend.drop_identities(prepared) == 2  # the two folded BNs
        assert torch_backend.absorb_clamps(prepared) == absorbed


def _mobilenet_v2_like() -> nn.Module:
    """Module convs -> BN -> ReLU6, as in MobileNetV2: torch.ao fuses conv-BN, not the ReLU6."""
    torch.manual_seed(0)

    def block(c_in, c_out, kernel, stride=1, groups=1):
        return nn.Sequential(nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(c_out), nn.ReLU6())

    net = nn.Sequential(block(3, 16, 3, 2), block(16, 16, 3, groups=16), block(16, 32, 1),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    with torch.no_grad():
        for bn in (m for m in net.modules() if isinstance(m, nn.BatchNorm2d)):
            bn.running_var.copy_(torch.logspace(-4, 0, bn.num_features))
            bn.weight.uniform_(0.5, 3.0)
            bn.bias.uniform_(-1.0, 2.0)
    return net.eval()


def test_qat_absorbs_relu6_too_and_its_onnx_ready_copy_still_clamps():
    """QAT's fake-quant after each conv learns [0, 6]; the converted int8 network and the copy
    that exports to ONNX (fixed fake-quant, no ReLU6 node) both clamp through saturation."""
    net = _mobilenet_v2_like()
    x, held_out = _data(32, 7), _data(16, 8)
    prepared = torch_backend.prepare_qat(net, (x[:2],), "qnnpack", per_channel=True)
    calls = [prepared.get_submodule(n.target) for n in prepared.graph.nodes if n.op == "call_module"]
    assert not any(isinstance(m, nn.ReLU6) for m in calls)  # all three absorbed into their fake-quants
    with torch.no_grad():
        prepared(x)  # observe one batch (no fine-tuning needed to check the mechanics)
    prepared.eval()
    with torch.no_grad():
        want = net(held_out)
        onnx_ready = torch_backend.export_ready_fake_quant(prepared)(held_out)
    converted = torch_backend.convert_qat(prepared, "qnnpack")
    assert "relu6" not in converted.code and "hardtanh" not in converted.code
    with torch_backend.quantized_engine("qnnpack"), torch.no_grad():
        got = converted(held_out)
    assert float(_cosine(got, want).min()) > 0.99
    assert float(_cosine(onnx_ready, want).min()) > 0.99
    assert float(_cosine(onnx_ready, got).min()) > 0.999
