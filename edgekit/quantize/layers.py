"""``--exclude``: which layers a user keeps in float, named the way each format's quantizer names them."""

from __future__ import annotations
from edgekit import formats
from edgekit.core.errors import UsageError
from edgekit.quantize.toolkits import torch_backend


def excluded(job, config, kind: str) -> tuple[str, ...]:
    """The ``--exclude`` names of ``kind`` ("torch" module names or "onnx" node names).

    Every name must be a layer of some requested format's kind; one that is none is a UsageError.
    """
    if not config.exclude:
        return ()
    kinds = {formats.get(fmt).quantization.layer_names for fmt in config.formats}
    known: dict[str, set] = {"torch": set(), "onnx": set()}
    if "torch" in kinds and job.source.has_torch:
        known["torch"] = {name for name, _ in job.float_model().named_modules()}
    if "onnx" in kinds:
        from edgekit.quantize.toolkits import onnx_graphs, ort_backend

        known["onnx"] = set(ort_backend.node_names(onnx_graphs.prepared_onnx(job)))
    unknown = sorted(set(config.exclude) - known["torch"] - known["onnx"])
    if unknown:
        raise UsageError(f"no layer named {', '.join(unknown)} in the model (torch module or ONNX node names; "
                         "the --max-drop sensitivity report lists them)")
    return tuple(name for name in config.exclude if name in known.get(kind, set()))


def torch_module_layers(job, config) -> list[tuple[str, str]]:
    """The weighted torch modules, by module name (linear and recurrent ones when activations are
    quantized as it runs): the layer list of every route that quantizes the torch module itself."""
    return torch_backend.weighted_layers(job.float_model(), dynamic=config.run_time_activations)
