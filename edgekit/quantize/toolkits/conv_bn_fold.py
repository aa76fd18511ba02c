"""Fold BatchNorm into the *functional* convolutions that precede it, before torch.ao sees the model.

torch.ao's FX fusion pairs conv and BN modules only. Ports of TensorFlow models (EfficientNet's
"same" padding) compute their convolution in a ``Conv2d`` subclass that calls ``F.conv2d``
itself, so FX traces into it and the BN after it would run on int8 pre-BN activations. Pure
``torch.fx``: no quantization API here.
"""

from __future__ import annotations


def fold_functional_conv_bn(model, example_inputs: tuple):
    """``model`` with every BatchNorm that follows a functional convolution folded into it.

    The fold goes into a copy's ``weight``/``bias`` (the forward must pass ``self.bias``) and the
    BN becomes an identity, so module names (``--exclude``) stay. The copy is used only if it
    computes what ``model`` computes on ``example_inputs``; otherwise ``model`` comes back as is."""
    import copy

    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.utils.fusion import fuse_conv_bn_weights

    convs = {F.conv1d, F.conv2d, F.conv3d, torch.conv1d, torch.conv2d, torch.conv3d}
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # noqa: BLE001 - prepare_fx reports an untraceable model in its own words
        return model
    calls: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    pairs = []
    for node in graph.nodes:
        bn = model.get_submodule(node.target) if node.op == "call_module" else None
        conv = node.args[0] if isinstance(bn, nn.modules.batchnorm._BatchNorm) and len(node.args) == 1 else None
        if not (isinstance(conv, torch.fx.Node) and conv.op == "call_function" and conv.target in convs
                and len(conv.users) == 1 and calls[node.target] == 1 and bn.running_mean is not None):
            continue
        weight = conv.args[1] if len(conv.args) > 1 else conv.kwargs.get("weight")
        if isinstance(weight, torch.fx.Node) and weight.op == "get_attr" and weight.target.endswith(".weight"):
            owner = weight.target[: -len(".weight")]
            if isinstance(getattr(model.get_submodule(owner), "bias", 0), (torch.Tensor, type(None))):
                pairs.append((owner, node.target))
    if not pairs:
        return model
    folded = copy.deepcopy(model)
    for owner_name, bn_name in pairs:
        owner, bn = folded.get_submodule(owner_name), folded.get_submodule(bn_name)
        owner.weight, owner.bias = fuse_conv_bn_weights(owner.weight, owner.bias, bn.running_mean, bn.running_var,
                                                        bn.eps, bn.weight, bn.bias)
        parent, _, child = bn_name.rpartition(".")
        setattr(folded.get_submodule(parent), child, nn.Identity())
    with torch.no_grad():  # a forward that does not pass self.bias would lose the BN's shift: check
        want, got = model(*example_inputs), folded(*example_inputs)
    if not (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor) and want.shape == got.shape
            and torch.allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, float(want.abs().max())))):
        return model
    return folded
