"""The one module that talks to ``torch.ao.quantization`` (deprecated in torch 2.10+).

Keeping every call here means a newer backend (torchao PT2E) can replace it without touching the
rest of edgekit; its deprecation warnings are silenced here, not in users' faces.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterable, Iterator
from edgekit.core.errors import UsageError
from edgekit.quantize.toolkits.conv_bn_fold import fold_functional_conv_bn


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=r".*quantiz.*", category=UserWarning)
        warnings.filterwarnings("ignore", module=r"torch\.ao\..*")
        yield


@contextlib.contextmanager
def quantized_engine(engine: str) -> Iterator[None]:
    import torch

    if engine not in torch.backends.quantized.supported_engines:
        from edgekit.core.errors import UsageError

        raise UsageError(
            f"quantized engine {engine!r} is not available in this torch build "
            f"(available: {', '.join(torch.backends.quantized.supported_engines)})"
        )
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


def dynamic_int8(model, engine: str, exclude=()):
    """int8 weights, activations quantized on the fly: Linear, LSTM and GRU layers."""
    import torch
    from torch import nn

    kinds = (nn.Linear, nn.LSTM, nn.GRU)
    spec = {name for name, module in model.named_modules() if isinstance(module, kinds) and name not in set(exclude)}
    _check_layers(model, exclude)
    with quiet(), quantized_engine(engine):
        return torch.ao.quantization.quantize_dynamic(model.eval(), spec, dtype=torch.qint8)


def weighted_layers(model, dynamic: bool = False) -> list[tuple[str, str]]:
    """(module name, type) of the layers int8 applies to, in definition order."""
    from torch import nn

    kinds = (nn.Linear, nn.LSTM, nn.GRU) if dynamic else (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
    return [(name, type(m).__name__) for name, m in model.named_modules() if isinstance(m, kinds)]


def _check_layers(model, exclude) -> None:
    names = {name for name, _ in model.named_modules()}
    unknown = sorted(set(exclude) - names)
    if unknown:
        raise UsageError(f"no layer named {', '.join(unknown)} in the model (see the sensitivity report for names)")


def _qconfig_mapping(engine: str, exclude=(), qat: bool = False, per_channel: bool | None = None):
    from torch.ao.quantization import QConfig, get_default_qat_qconfig_mapping, get_default_qconfig_mapping

    mapping = get_default_qat_qconfig_mapping(engine) if qat else get_default_qconfig_mapping(engine)
    if per_channel is not None:
        import torch
        from torch.ao.quantization import (
            FakeQuantize, MinMaxObserver, MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver,
            PerChannelMinMaxObserver,
        )

        base = mapping.global_qconfig
        scheme = torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric
        if qat:
            observer = MovingAveragePerChannelMinMaxObserver if per_channel else MovingAverageMinMaxObserver
            weight = FakeQuantize.with_args(observer=observer, quant_min=-128, quant_max=127, dtype=torch.qint8,
                                            qscheme=scheme)
        else:
            weight = (PerChannelMinMaxObserver if per_channel else MinMaxObserver).with_args(dtype=torch.qint8,
                                                                                             qscheme=scheme)
        mapping.set_global(QConfig(activation=base.activation, weight=weight))
    for name in exclude:
        mapping.set_module_name(name, None)
    return mapping


def static_int8_fx(model, example_inputs: tuple, calibration: Iterable, engine: str, exclude=(),
                   per_channel: bool | None = None):
    """FX graph mode PTQ: fuse conv-bn-relu, observe ``calibration`` batches, convert to int8.

    ``calibration`` yields tuples of tensors (one per model input); ``exclude`` names modules
    that stay in float; ``per_channel`` chooses the weight scales (None: the engine's default).
    """
    import torch
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    _check_layers(model, exclude)
    with quiet(), quantized_engine(engine), torch.inference_mode(False), torch.no_grad():
        from edgekit.quantize.toolkits.conv_bn_fold import fold_functional_conv_bn

        model = fold_functional_conv_bn(model.eval(), example_inputs)
        prepared = _fx(prepare_fx, model, _qconfig_mapping(engine, exclude, per_channel=per_channel), example_inputs)
        drop_identities(prepared)
        absorb_clamps(prepared)
        seen = 0
        for batch in calibration:
            prepared(*batch)
            seen += 1
        if seen == 0:
            from edgekit.core.errors import InputFileError

            raise InputFileError("calibration produced no batches")
        return convert_fx(prepared)


def drop_identities(prepared) -> int:
    """observer -> Identity -> observer becomes the first observer alone: a folded BN leaves an
    ``nn.Identity`` that torch.ao would otherwise run as a float op between int8 neighbours."""
    from torch import nn

    def observer(node) -> bool:
        return node.op == "call_module" and _observes(prepared.get_submodule(node.target))

    found = []
    for node in prepared.graph.nodes:
        if node.op != "call_module" or not isinstance(prepared.get_submodule(node.target), nn.Identity):
            continue
        before, after = node.args[0] if node.args else None, next(iter(node.users), None)
        if before is not None and after is not None and len(node.users) == 1 and observer(before) and observer(after):
            found.append((node, after, before))
    return _splice_out(prepared, found)


def _splice_out(prepared, found: list) -> int:
    """Remove each (op, the observer after it) pair, wiring that observer's users to ``keep``."""
    for op, after, keep in found:
        after.replace_all_uses_with(keep)
        prepared.graph.erase_node(after)
        prepared.graph.erase_node(op)
        prepared.delete_submodule(after.target)
    if found:
        prepared.graph.lint()
        prepared.recompile()
    return len(found)


def _clamp_bounds(gm, node) -> tuple[float, float] | None:
    """(low, high) of a ReLU6 / hardtanh node with constant bounds, else None."""
    import torch.nn.functional as F
    from torch import nn

    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        if isinstance(module, nn.Hardtanh):  # nn.ReLU6 is a Hardtanh(0, 6)
            return float(module.min_val), float(module.max_val)
    elif node.op == "call_function" and node.target is F.relu6:
        return 0.0, 6.0
    elif node.op == "call_function" and node.target is F.hardtanh:
        low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
        high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            return float(low), float(high)
    return None


def _requantizes(gm, node) -> bool:
    """A conv or linear (fused or not): its int8 output is requantized to its own observer's range."""
    import torch
    import torch.nn.functional as F

    if node.op == "call_module":
        kind = type(gm.get_submodule(node.target)).__name__
        return kind.startswith(("Conv", "Linear"))
    return node.op == "call_function" and node.target in (F.conv1d, F.conv2d, F.conv3d, F.linear, torch.conv1d,
                                                          torch.conv2d, torch.conv3d)


def _observes(module) -> bool:
    """An activation observer (PTQ) or fake-quant module (QAT)."""
    from torch.ao.quantization.fake_quantize import FakeQuantizeBase
    from torch.ao.quantization.observer import ObserverBase

    return isinstance(module, (ObserverBase, FakeQuantizeBase))


def _saturates_at_its_range(observer) -> bool:
    """Int8 kernels saturate at the dtype's bounds: only an observer that spans all 256 levels
    (not ``reduce_range``'s 128, the x86 engine's default) turns saturation into the clamp."""
    return int(getattr(observer, "quant_max", 0)) - int(getattr(observer, "quant_min", 0)) == 255


def absorb_clamps(prepared) -> int:
    """Conv/linear -> observer -> ReLU6 (or another constant clamp) -> observer becomes
    conv/linear -> observer (or fake-quant) of the clamped values: the int8 output saturates at
    the clamp's bounds, which is the clamp. torch.ao fuses conv -> ReLU but not ReLU6; unfused,
    the clamp shares the conv's pre-activation range (EfficientNet-Lite0: hundreds wide, so
    [0, 6] gets a few int8 steps), and torch 2.13's quantized hardtanh misreads the
    channels-last tensors its conv kernels return (logit cosine 0.02). Returns how many clamps
    were absorbed."""
    found = []
    for clamp in prepared.graph.nodes:
        bounds = _clamp_bounds(prepared, clamp)
        before = clamp.args[0] if bounds and clamp.args else None
        if before is None or before.op != "call_module" or len(before.users) != 1 or len(clamp.users) != 1:
            continue
        after = next(iter(clamp.users))
        if after.op == "call_module" and before.args and _requantizes(prepared, before.args[0]) and all(
                _observes(prepared.get_submodule(n.target)) for n in (before, after)) \
                and _saturates_at_its_range(prepared.get_submodule(before.target)):
            found.append((before, clamp, after, bounds))
    for before, _, _, (low, high) in found:
        # the observer records, and passes on, the clamped values: calibration still runs the clamp
        prepared.get_submodule(before.target).register_forward_pre_hook(
            lambda _module, args, low=low, high=high: (args[0].clamp(low, high),))
    return _splice_out(prepared, [(clamp, after, before) for before, clamp, after, _ in found])


def _fx(prepare, model, mapping, example_inputs):
    try:
        return prepare(model, mapping, example_inputs)
    except Exception as exc:  # symbolic tracing raises TraceError, TypeError, NotImplementedError...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(
            f"torch.ao FX cannot trace this model for int8 ({type(exc).__name__}: {first[:160]}); "
            "use --format onnx (the ONNX Runtime path)"
        ) from None


# ---------------------------------------------------------------------------------------------
# QAT


def prepare_qat(model, example_inputs: tuple, engine: str, per_channel: bool | None = None):
    """Fold BN into the convolutions (eval-mode fusion), then insert fake-quant for training.

    Folding first keeps the fake-quant graph free of BN simulation, so the same graph exports to
    ONNX as plain QuantizeLinear/DequantizeLinear around Conv/Gemm.
    """
    import torch
    from torch.ao.quantization.quantize_fx import fuse_fx, prepare_qat_fx


    with quiet(), quantized_engine(engine):
        try:
            fused = fuse_fx(fold_functional_conv_bn(model.eval(), example_inputs))
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise _untraceable(exc, first) from None
        with torch.inference_mode(False):
            prepared = _fx(prepare_qat_fx, fused.train(),
                           _qconfig_mapping(engine, qat=True, per_channel=per_channel), example_inputs)
        drop_identities(prepared)
        absorb_clamps(prepared)  # the fake-quant after the conv then trains on, and exports, the clamp
        return prepared


def _untraceable(exc, first):
    return UsageError(f"torch.ao FX cannot trace this model for QAT ({type(exc).__name__}: {first[:160]})")


def freeze_observers(prepared) -> None:
    """Stop range updates: from now on fake-quant uses the ranges learned so far."""
    import torch

    prepared.apply(torch.ao.quantization.disable_observer)


def sync_weight_qparams(prepared) -> int:
    """Make each symmetric fake-quant's observer yield the scale training actually used.

    The fused QAT fake-quant computes symmetric scales as absmax / 127 while
    ``calculate_qparams`` (used by ``convert_fx`` and the ONNX export) gives absmax / 127.5: left
    alone, the int8 weights are rounded on a grid 0.4% off the one the network was trained on,
    which costs whole points on a fragile model. Setting the observer's range to
    ``scale * (qmax - qmin) / 2`` makes both agree with training. Returns how many were synced.
    """
    import torch
    from torch.ao.quantization.fake_quantize import FakeQuantizeBase

    synced = 0
    for module in prepared.modules():
        if not isinstance(module, FakeQuantizeBase):
            continue
        if module.qscheme not in (torch.per_tensor_symmetric, torch.per_channel_symmetric):
            continue
        observer = getattr(module, "activation_post_process", None)
        if observer is None or not hasattr(observer, "max_val"):
            continue
        half = (module.quant_max - module.quant_min) / 2.0
        with torch.no_grad():
            bound = module.scale.detach().float() * half
            observer.max_val.resize_(bound.shape).copy_(bound)
            observer.min_val.resize_(bound.shape).copy_(-bound)
        synced += 1
    return synced


def convert_qat(prepared, engine: str):
    import torch
    from torch.ao.quantization.quantize_fx import convert_fx

    with quiet(), quantized_engine(engine), torch.no_grad():
        return convert_fx(prepared.eval())


def export_ready_fake_quant(prepared):
    """A copy of a QAT model whose fake-quant modules are fixed (scale, zero point) functions.

    ``torch.onnx.export`` turns ``fake_quantize_per_{tensor,channel}_affine`` into ONNX
    QuantizeLinear + DequantizeLinear pairs; the fused observer modules QAT trains with do not
    export. Zero points are cast to the ONNX-allowed ranges (0..255 / -128..127).
    """
    import copy

    import torch
    from torch import nn
    from torch.ao.quantization.fake_quantize import FakeQuantizeBase

    class FixedFakeQuant(nn.Module):
        def __init__(self, scale, zero_point, quant_min, quant_max, axis):
            super().__init__()
            self.register_buffer("scale", scale.detach().clone().float())
            self.register_buffer("zero_point", zero_point.detach().clone().to(torch.int32))
            self.quant_min, self.quant_max, self.axis = int(quant_min), int(quant_max), axis

        def forward(self, x):
            if self.axis is None:
                return torch.fake_quantize_per_tensor_affine(
                    x, self.scale, self.zero_point, self.quant_min, self.quant_max
                )
            return torch.fake_quantize_per_channel_affine(
                x, self.scale, self.zero_point, self.axis, self.quant_min, self.quant_max
            )

    model = copy.deepcopy(prepared).eval()
    replacements = {}
    for name, module in model.named_modules(remove_duplicate=False):  # shared observers sit under two names
        if isinstance(module, FakeQuantizeBase):
            scale, zero_point = module.calculate_qparams()
            per_channel = module.qscheme in (torch.per_channel_symmetric, torch.per_channel_affine)
            axis = int(module.ch_axis) if per_channel else None
            qmin, qmax = module.quant_min, module.quant_max
            replacements[name] = FixedFakeQuant(scale.reshape(-1) if per_channel else scale.reshape(()),
                                                zero_point.reshape(-1) if per_channel else zero_point.reshape(()),
                                                qmin, qmax, axis)
    for name, new in replacements.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
    model.recompile() if hasattr(model, "recompile") else None
    return model


def describe_qconfig(engine: str, per_channel: bool | None = None) -> dict:
    """What the recipe does, for the manifest: the engine's default, with ``per_channel`` when given."""
    from torch.ao.quantization import get_default_qconfig

    with quiet():
        qconfig = get_default_qconfig(engine)
        activation, weight = qconfig.activation(), qconfig.weight()
    scheme = str(weight.qscheme).replace("torch.", "")
    if per_channel is not None:
        scheme = "per_channel_symmetric" if per_channel else "per_tensor_symmetric"
    return {
        "activation_dtype": str(activation.dtype).replace("torch.", ""),
        "activation_reduce_range": bool(getattr(activation, "reduce_range", False)),
        "weight_dtype": str(weight.dtype).replace("torch.", ""),
        "weight_qscheme": scheme,
    }
