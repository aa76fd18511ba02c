"""The one module that talks to torchao's PT2E quantization and ExecuTorch's XNNPACKQuantizer.

PT2E (``torch.export`` graph -> ``prepare_pt2e``/``prepare_qat_pt2e`` -> observe or train ->
``convert_pt2e``) is torch.ao quantization's successor; the converted graph carries
quantize/dequantize pairs that the XNNPACK partitioner lowers into int8 kernels.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterable, Iterator
from edgekit.formats.executorch import export_program, quiet_imports
from edgekit.quantize.toolkits.qat import FakeQuantHooks


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    quiet_imports()
    with warnings.catch_warnings():
        for category in (DeprecationWarning, FutureWarning, UserWarning):
            warnings.simplefilter("ignore", category)
        yield


def quantizer(*, per_channel: bool, dynamic: bool = False, qat: bool = False, exclude: Iterable[str] = ()):
    """XNNPACK's symmetric int8 recipe: weights int8 [-127, 127] (per output channel by default),
    activations int8 per tensor (calibrated, or measured at run time when ``dynamic``)."""
    quiet_imports()
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    class EdgekitXNNPACKQuantizer(XNNPACKQuantizer):
        """XNNPACK's recipe with two fixes: conv -> ReLU6 observed after the clamp, and integer
        index arithmetic left integer."""

        def transform_for_annotation(self, model):
            model = super().transform_for_annotation(model)
            _restore_integer_scalars(model)
            return model

        def annotate(self, model):
            if not dynamic and self.global_config is not None:
                _annotate_conv_clamp(model, self.global_config, self.filter_fn)
            return super().annotate(model)

    q = EdgekitXNNPACKQuantizer()
    q.set_global(get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic, is_qat=qat))
    if exclude:  # XNNPACKQuantizer takes no "None" config per module: filter their nodes out instead
        from torchao.quantization.pt2e.quantizer import get_module_name_filter

        in_excluded = [get_module_name_filter(name) for name in exclude]
        q.set_filter_function(lambda node: not any(inside(node) for inside in in_excluded))
    return q


def _restore_integer_scalars(gm) -> None:
    """Undo XNNPACKQuantizer's scalar -> float32 tensor rewrite (``_convert_scalars_to_attrs``) on
    integer add/mul, e.g. transformers' ``arange(n) + offset`` that indexes the attention mask:
    int64 + a float32 tensor is float32, and indexing with it fails at calibration. Integer
    arithmetic is never quantized, so it keeps its Python scalars."""
    import torch

    ops = (torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor)
    for node in list(gm.graph.nodes):
        val = node.meta.get("val")
        if node.op != "call_function" or node.target not in ops or val is None or val.dtype.is_floating_point:
            continue
        args, dropped = [], []
        for arg in node.args:
            const = getattr(gm, arg.target, None) if isinstance(arg, torch.fx.Node) and arg.op == "get_attr" else None
            # a float 0-d tensor can only be the rewrite's here: the original would have made the result float
            if isinstance(const, torch.Tensor) and const.ndim == 0 and const.is_floating_point() \
                    and float(const) == int(const):
                args.append(int(const))
                dropped.append(arg)
            else:
                args.append(arg)
        node.args = tuple(args)
        for arg in dropped:
            if not arg.users:
                gm.graph.erase_node(arg)
    gm.recompile()


def _annotate_conv_clamp(gm, config, filter_fn=None) -> None:
    """Annotate conv -> hardtanh (ReLU6 and other clamps) as one fused unit, as XNNPACKQuantizer
    does for conv -> relu: the output observer sits after the clamp. Without it the conv's own
    output is observed before the clamp and the clamp shares that range, so a BN-folded conv whose
    pre-activations span hundreds squeezes ReLU6's [0, 6] into a few int8 steps (EfficientNet-Lite0:
    held-out logit cosine 0.89 -> 0.99). XNNPACK fuses the clamp into the conv's output bounds."""
    import torch
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer_utils as u
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation

    key = u.Q_ANNOTATION_KEY
    clamps = (torch.ops.aten.hardtanh.default, torch.ops.aten.hardtanh_.default)
    for clamp in gm.graph.nodes:
        conv = clamp.args[0] if clamp.op == "call_function" and clamp.target in clamps else None
        if not isinstance(conv, torch.fx.Node) or not u._is_conv_node(conv) or len(conv.users) > 1:
            continue
        weight, bias = conv.args[1], conv.args[2] if len(conv.args) > 2 else None
        partition = [clamp, conv, weight] + ([bias] if isinstance(bias, torch.fx.Node) else [])
        if u._is_annotated(partition) or (filter_fn and not all(filter_fn(n) for n in partition)):
            continue
        qspecs = {conv.args[0]: u.get_input_act_qspec(config), weight: u.get_weight_qspec(config)}
        if isinstance(bias, torch.fx.Node):
            qspecs[bias] = u.get_bias_qspec(config)
        conv.meta[key] = QuantizationAnnotation(input_qspec_map=qspecs, _annotated=True)
        clamp.meta[key] = QuantizationAnnotation(output_qspec=u.get_output_act_qspec(config), _annotated=True)
        u._mark_nodes_as_annotated(partition)


def capture(model, examples: tuple, inputs):
    """The model as a ``torch.export`` graph module (what PT2E prepares)."""
    return export_program(model, examples, inputs).module()


def calibrated(model, examples: tuple, inputs, batches: Iterable[tuple], q, sample_axis: int = 0):
    """``prepare_pt2e`` -> run the calibration batches -> ``convert_pt2e``; samples are counted on
    the first input's ``sample_axis``."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    with quiet():
        prepared = prepare_pt2e(capture(model, examples, inputs), q)
        seen = 0
        with torch.no_grad():
            for batch in batches:
                prepared(*batch)
                seen += batch[0].shape[sample_axis]
        return convert_pt2e(prepared), seen


def prepare_qat(model, examples: tuple, inputs, q):
    from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e

    with quiet():
        return prepare_qat_pt2e(capture(model, examples, inputs), q)


def qat_hooks():
    """How the shared QAT loop drives a PT2E graph (train/eval swap ops like BN and dropout)."""
    from torchao.quantization.pt2e import disable_observer, move_exported_model_to_eval, move_exported_model_to_train


    return FakeQuantHooks(train_mode=move_exported_model_to_train, eval_mode=move_exported_model_to_eval,
                          freeze_observers=lambda model: model.apply(disable_observer),
                          finish=move_exported_model_to_eval)


def convert(prepared):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    with quiet():
        return convert_pt2e(prepared)


def describe(per_channel: bool, dynamic: bool = False) -> dict:
    return {
        "weights": f"int8 symmetric [-127, 127], {'per output channel' if per_channel else 'per tensor'}",
        "activations": "int8 per tensor, " + ("measured at run time" if dynamic else "calibrated (min/max)"),
        "quantizer": "XNNPACKQuantizer",
    }
