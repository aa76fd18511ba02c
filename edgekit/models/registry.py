"""Registry of zoo models. Adding a model adds a module that calls ``register_model``."""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from edgekit.core.input_spec import InputSpec
from edgekit.core.bounds import model_size_problem
from edgekit.core.errors import UsageError, unknown_name

# Modules that register zoo models on import; listed so `model_names()` needs no torch import.
_ZOO_MODULES = {
    "digits-cnn": "edgekit.models.digits_cnn",
    "digits-mobilenet": "edgekit.models.mobilenet",
    "transformer-lm": "edgekit.models.transformer",
    "transformer-classifier": "edgekit.models.transformer",
    "lstm-lm": "edgekit.models.lstm_lm",
    "llama": "edgekit.llm.models.families",
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
    default_epochs: int = 20  # what `edgekit pipeline` trains when --epochs is not given

    def config(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        merged = dict(self.default_config)
        for key, value in (overrides or {}).items():
            if key not in merged:
                raise UsageError(
                    f"model {self.name!r} has no config key {key!r}; keys: {', '.join(sorted(merged))}"
                )
            merged[key] = _checked_value(self.name, key, value, merged[key])
        return merged


MAX_CONFIG_INT = 1 << 20  # no zoo size (width, layers, vocabulary, length) is near this
_TOKEN = re.compile(r"^[A-Za-z0-9._-]{1,64}\Z")


def _checked_value(model: str, key: str, value: Any, default: Any) -> Any:
    """A config value of the default's type and in a sane range, or a UsageError naming it."""
    where = f"model {model!r} config {key}={value!r}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UsageError(f"{where}: must be true or false")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{where}: must be an integer")
        low = 0 if default == 0 else 1
        if not low <= value <= MAX_CONFIG_INT:
            raise UsageError(f"{where}: must be between {low} and {MAX_CONFIG_INT}")
        problem = model_size_problem(key, value)  # a million layers fit in memory, yet take minutes to build
        if problem:
            raise UsageError(f"{where}: {problem}")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UsageError(f"{where}: must be a finite number >= 0")
        if 0 <= default < 1 and value >= 1:  # a default of 1.0 is a scale (Phi-3's rope_attn_factor), not a rate
            raise UsageError(f"{where}: must be below 1 (a rate)")
        value = float(value)
    elif isinstance(default, str):
        if not isinstance(value, str) or not _TOKEN.match(value):
            raise UsageError(f"{where}: must be a word of A-Z a-z 0-9 . _ -")
    return value


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
    """The zoo model ``name`` with ``config``; one too large for this machine's memory is refused
    before any of it is allocated (it is sized on torch's meta device first)."""
    spec = get_spec(name)
    settings = spec.config(config)
    check_model_memory(name, lambda: spec.factory(**settings))
    return spec.factory(**settings)


def check_model_memory(label: str, make: Callable[[], Any], share: float = 0.5) -> int:
    """Bytes of the parameters ``make()`` would allocate; a UsageError when over ``share`` of
    the memory available now. ``make`` runs on the meta device (nothing is allocated)."""
    import psutil
    import torch

    try:
        with torch.device("meta"):
            model = make()
    except (ValueError, TypeError, RuntimeError) as exc:
        raise UsageError(f"cannot build {label} with this config: {str(exc).strip().splitlines()[0][:200]}") from None
    tensors = [*model.parameters(), *model.buffers()]
    need = sum(t.numel() * t.element_size() for t in tensors)
    available = psutil.virtual_memory().available
    if need > share * available:
        raise UsageError(
            f"{label} with this config needs {need / 2**30:.1f} GiB for its weights alone; "
            f"this machine has {available / 2**30:.1f} GiB available (make it smaller)"
        )
    return need
