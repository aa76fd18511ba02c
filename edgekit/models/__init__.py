"""The model zoo: named architectures, each with a default config, input spec and task."""

from edgekit.models.registry import ModelSpec, build_model, get_spec, model_names, register_model

__all__ = ["ModelSpec", "build_model", "get_spec", "model_names", "register_model"]
