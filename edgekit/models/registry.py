"""Registry of zoo models. Adding a model adds a module that calls ``register_model``."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from edgekit.artifacts import InputSpec
from edgekit.errors import UsageError, unknown_name

# Modules that register zoo models on import; listed so `model_names()` needs no torch import.
_ZOO_MODULES = {
    "digits-cnn": "edgekit.models.digits_cnn",
    "transformer-lm": "edgekit.models.transformer",
    "transformer-classifier": "edgekit.models.transformer",
    "lstm-lm": "edgekit.models.lstm_lm",
}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    factory: Callable[..., Any]  # (**config) -> torch.nn.Module
    default_config: dict[str, Any]
    input_spec: Callable[[dict[str, Any]], tuple[InputSpec, ...]]
    outputs: tuple[str, ...]
    task: dict[str, Any] = field(default_factory=dict)  # e.g. {"type": "classification", "dataset": "digits"}
    description: str = ""
    recurrent: bool = False  # recurrent models train in fp32 unless a precision is asked for
    # The ONNX exporter `--onnx-exporter auto` uses for this family, and why (benchmarks/onnx_exporters.py)
    onnx_exporter: str = "torchscript"
    onnx_exporter_why: str = ""

    def config(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        merged = dict(self.default_config)
        for key, value in (overrides or {}).items():
            if key not in merged:
                raise UsageError(
                    f"model {self.name!r} has no config key {key!r}; keys: {', '.join(sorted(merged))}"
                )
            merged[key] = value
        return merged


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec) -> ModelSpec:
    _REGISTRY[spec.name] = spec
    return spec


def model_names() -> list[str]:
    return sorted(set(_ZOO_MODULES) | set(_REGISTRY))


def get_spec(name: str) -> ModelSpec:
    if name not in _REGISTRY and name in _ZOO_MODULES:
        importlib.import_module(_ZOO_MODULES[name])
    if name not in _REGISTRY:
        raise unknown_name("model", name, model_names())
    return _REGISTRY[name]


def build_model(name: str, config: dict[str, Any] | None = None):
    spec = get_spec(name)
    return spec.factory(**spec.config(config))
