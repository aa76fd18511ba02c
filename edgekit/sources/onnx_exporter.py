"""Which ONNX exporter ``--onnx-exporter auto`` tries first for a model, decided where its origin is known.

A zoo family carries its measured choice (``ModelSpec.onnx_exporter``; benchmarks/onnx_exporters.py);
the stages that know the model (export, quantize) resolve it here and hand it down to
``formats.onnx_export``, which knows no model zoo.
"""

from __future__ import annotations

from edgekit.formats.onnx_export import DEFAULT_PREFERENCE, OTHER_WHY
from edgekit.models.registry import get_spec, model_names

HF_WHY = "transformers encoders: torch.export's graph ran 1.14-1.19x slower in fp32 and int8 (batch 1, one thread)"


def preferred_exporter(model_name: str) -> tuple[str, str]:
    """(exporter, why) for ``--onnx-exporter auto``: the zoo family's measured choice, else the TorchScript one."""
    default, _ = DEFAULT_PREFERENCE
    if model_name.startswith("hf:"):
        return default, HF_WHY

    if model_name in model_names():
        spec = get_spec(model_name)
        return spec.onnx_exporter, spec.onnx_exporter_why or OTHER_WHY
    return DEFAULT_PREFERENCE
