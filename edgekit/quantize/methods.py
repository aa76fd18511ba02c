"""Quantization methods: a config dataclass plus a handler, registered by name.

Adding a method adds a config + handler and one ``register_method`` call; nothing else changes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from edgekit.errors import UsageError, unknown_name

TORCH_FORMATS = ("torchscript", "onnx")


def _check_formats(formats: tuple[str, ...]) -> None:
    if not formats:
        raise UsageError("no output format given; choose from: torchscript, onnx")
    for fmt in formats:
        if fmt not in TORCH_FORMATS:
            raise UsageError(f"unknown format {fmt!r}; choose from: {', '.join(TORCH_FORMATS)}")


@dataclass(frozen=True)
class DynamicConfig:
    """int8 weights, activations quantized at run time. No calibration data."""

    formats: tuple[str, ...] = TORCH_FORMATS

    def __post_init__(self) -> None:
        _check_formats(self.formats)


CALIBRATE_METHODS = ("minmax", "entropy", "percentile")


@dataclass(frozen=True)
class StaticConfig:
    """int8 weights and activations, activation ranges from calibration data."""

    calib: Path = Path("calib_data/digits")
    formats: tuple[str, ...] = TORCH_FORMATS
    calibrate_method: str = "minmax"
    calib_batch_size: int = 32
    calib_max_samples: int | None = None

    def __post_init__(self) -> None:
        _check_formats(self.formats)
        if self.calibrate_method not in CALIBRATE_METHODS:
            raise unknown_name("calibration method", self.calibrate_method, CALIBRATE_METHODS)
        if self.calib_batch_size < 1:
            raise UsageError(f"calibration batch size must be >= 1, got {self.calib_batch_size}")


@dataclass(frozen=True)
class Method:
    name: str
    config_type: type
    handler: Callable  # (job, config) -> list[Produced]
    summary: str = ""


@dataclass(frozen=True)
class Produced:
    """A model file a handler wrote into the job's work folder."""

    path: str
    format: str
    details: dict[str, Any] = field(default_factory=dict)


_METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    _METHODS[method.name] = method
    return method


def method_names() -> list[str]:
    _load_builtin()
    return sorted(_METHODS)


def get_method(name: str) -> Method:
    _load_builtin()
    if name not in _METHODS:
        raise unknown_name("quantization method", name, _METHODS)
    return _METHODS[name]


def make_config(name: str, **options: Any):
    """Build the method's config from options; options the method does not take are an error."""
    method = get_method(name)
    known = {f.name for f in dataclasses.fields(method.config_type)}
    given = {k: v for k, v in options.items() if v is not None}
    extra = sorted(set(given) - known)
    if extra:
        raise UsageError(f"method {name!r} does not take option(s): {', '.join(extra)}")
    return method.config_type(**given)


def _load_builtin() -> None:
    if not _METHODS:
        from edgekit.quantize import handlers  # noqa: F401 - registers the built-in methods
