"""The one module that talks to ``torch.ao.quantization`` (deprecated in torch 2.10+).

Keeping every call here means a newer backend (torchao PT2E) can replace it without touching the
rest of edgekit; its deprecation warnings are silenced here, not in users' faces.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterable, Iterator


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
        from edgekit.errors import UsageError

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
    from edgekit.errors import UsageError

    names = {name for name, _ in model.named_modules()}
    unknown = sorted(set(exclude) - names)
    if unknown:
        raise UsageError(f"no layer named {', '.join(unknown)} in the model (see the sensitivity report for names)")


def _qconfig_mapping(engine: str, exclude=(), qat: bool = False, per_channel: bool | None = None):
    from torch.ao.quantization import QConfig, get_default_qat_qconfig_mapping, get_default_qconfig_mapping

    mapping = get_default_qat_qconfig_mapping(engine) if qat else get_default_qconfig_mapping(engine)
    if per_channel is not None:
        import torch
        from torch.ao.quantization import FakeQuantize, MovingAveragePerChannelMinMaxObserver, MovingAverageMinMaxObserver

        base = mapping.global_qconfig
        if per_channel:
            weight = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
                                            dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
        else:
            weight = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127,
                                            dtype=torch.qint8, qscheme=torch.per_tensor_symmetric)
        mapping.set_global(QConfig(activation=base.activation, weight=weight))
    for name in exclude:
        mapping.set_module_name(name, None)
    return mapping


def static_int8_fx(model, example_inputs: tuple, calibration: Iterable, engine: str, exclude=()):
    """FX graph mode PTQ: fuse conv-bn-relu, observe ``calibration`` batches, convert to int8.

    ``calibration`` yields tuples of tensors (one per model input); ``exclude`` names modules
    that stay in float.
    """
    import torch
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    _check_layers(model, exclude)
    with quiet(), quantized_engine(engine), torch.inference_mode(False), torch.no_grad():
        prepared = _fx(prepare_fx, model.eval(), _qconfig_mapping(engine, exclude), example_inputs)
        seen = 0
        for batch in calibration:
            prepared(*batch)
            seen += 1
        if seen == 0:
            from edgekit.errors import InputFileError

            raise InputFileError("calibration produced no batches")
        return convert_fx(prepared)


def _fx(prepare, model, mapping, example_inputs):
    from edgekit.errors import UsageError

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
            fused = fuse_fx(model.eval())
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise _untraceable(exc, first) from None
        with torch.inference_mode(False):
            return _fx(prepare_qat_fx, fused.train(), _qconfig_mapping(engine, qat=True, per_channel=per_channel),
                       example_inputs)


def _untraceable(exc, first):
    from edgekit.errors import UsageError

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


def describe_qconfig(engine: str) -> dict:
    """What the engine's default recipe does, for the manifest."""
    from torch.ao.quantization import get_default_qconfig

    with quiet():
        qconfig = get_default_qconfig(engine)
        activation, weight = qconfig.activation(), qconfig.weight()
    return {
        "activation_dtype": str(activation.dtype).replace("torch.", ""),
        "activation_reduce_range": bool(getattr(activation, "reduce_range", False)),
        "weight_dtype": str(weight.dtype).replace("torch.", ""),
        "weight_qscheme": str(weight.qscheme).replace("torch.", ""),
    }
