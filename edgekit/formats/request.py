"""What a format backend is asked to write: one float or int8 model file, with its provenance."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FloatExport:
    """A float torch model to write as ``path``; each backend reads the fields it needs."""

    path: Path
    examples: tuple  # example input tensors (batch 2: a batch axis stays visibly dynamic)
    inputs: tuple  # InputSpec
    outputs: tuple[str, ...]
    provenance: dict[str, Any]
    family: str = ""  # the model's name (a scripted module's label)
    onnx_preference: tuple[str, str] | None = None  # (exporter, why) ONNX "auto" tries first; None: the default
    opset: int = 17
    onnx_route: str = "auto"
    torchscript_mode: str = "trace"
    optimize: bool = False
    external_data: bool | None = None


@dataclass(frozen=True)
class QuantizedCopy:
    """An int8 file from a quantized artifact, re-written (with provenance) into an export."""

    source: Path
    path: Path
    details: dict[str, Any]
    provenance: dict[str, Any]
    optimize: bool = False
    external_data: bool | None = None
