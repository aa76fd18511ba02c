"""One model input as a manifest records it: name, shape (``None`` for a dynamic axis), dtype, valid values."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from edgekit.core.errors import InputFileError


@dataclass(frozen=True)
class InputSpec:
    """One model input. ``shape`` uses ``None`` for a dynamic axis named in ``dynamic_axes``."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str = "float32"
    dynamic_axes: dict[int, str] = field(default_factory=dict)
    value_range: tuple[float, float] | None = None  # [low, high) of valid values, e.g. token ids

    def concrete_shape(self, **sizes: int) -> tuple[int, ...]:
        """The shape with each dynamic axis filled from ``sizes`` (by axis name, default 1)."""
        return tuple(
            dim if dim is not None else int(sizes.get(self.dynamic_axes.get(i, ""), 1))
            for i, dim in enumerate(self.shape)
        )

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "dynamic_axes": {str(k): v for k, v in self.dynamic_axes.items()},
            "value_range": list(self.value_range) if self.value_range is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "InputSpec":
        try:
            if not isinstance(data["shape"], list):
                raise TypeError("shape must be a list")
            shape = tuple(None if d is None else int(d) for d in data["shape"])
            if any(d is not None and d < 1 for d in shape):
                raise ValueError(f"shape {list(shape)} has a dimension below 1")
            raw_axes = data.get("dynamic_axes") or {}
            if not isinstance(raw_axes, dict):
                raise TypeError("dynamic_axes must be an object")
            axes = {int(k): str(v) for k, v in raw_axes.items()}
            if any(not 0 <= axis < len(shape) for axis in axes):
                raise ValueError(f"dynamic axis outside the shape {list(shape)}")
            bounds = data.get("value_range")
            if bounds is not None and not (isinstance(bounds, list) and len(bounds) == 2):
                raise ValueError("value_range must be [low, high]")
            value_range = None if bounds is None else (float(bounds[0]), float(bounds[1]))
            if value_range is not None and not (all(math.isfinite(b) for b in value_range) and value_range[0] < value_range[1]):
                raise ValueError(f"value_range {list(value_range)} is not a finite [low, high) range")
            return cls(str(data["name"]), shape, str(data.get("dtype", "float32")), axes, value_range)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise InputFileError(f"malformed input spec in manifest: {exc!r}") from None
