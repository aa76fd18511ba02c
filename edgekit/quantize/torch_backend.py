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


def dynamic_int8(model, engine: str):
    """int8 weights, activations quantized on the fly: Linear, LSTM and GRU layers."""
    import torch
    from torch import nn

    with quiet(), quantized_engine(engine):
        return torch.ao.quantization.quantize_dynamic(
            model.eval(), {nn.Linear, nn.LSTM, nn.GRU}, dtype=torch.qint8
        )


def static_int8_fx(model, example_inputs: tuple, calibration: Iterable, engine: str):
    """FX graph mode PTQ: fuse conv-bn-relu, observe ``calibration`` batches, convert to int8.

    ``calibration`` yields tuples of tensors (one per model input).
    """
    import torch
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    with quiet(), quantized_engine(engine), torch.inference_mode(False), torch.no_grad():
        prepared = prepare_fx(model.eval(), get_default_qconfig_mapping(engine), example_inputs)
        seen = 0
        for batch in calibration:
            prepared(*batch)
            seen += 1
        if seen == 0:
            from edgekit.errors import InputFileError

            raise InputFileError("calibration produced no batches")
        return convert_fx(prepared)


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
