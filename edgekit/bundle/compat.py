"""Was this model made for this target? Compare the export's records with the target profile."""

from __future__ import annotations

from pathlib import Path

from edgekit.formats.artifacts import Manifest, ModelFile
from edgekit.core.errors import EdgekitError, UsageError
from edgekit.core.targets import Target, available_targets, load_target

# Keys of an int8 ONNX file's details that the target's [runtime.onnx_quant] also sets.
_ONNX_QUANT_KEYS = ("activation_type", "weight_type", "per_channel", "reduce_range")


def mismatches(manifest: Manifest, entry: ModelFile, spec, target: Target) -> list[str]:
    """Each way the model's recorded target or quantization settings differ from ``target``
    (``spec``: ``entry``'s format, resolved by the caller)."""
    found = []
    made_for = manifest.target
    if made_for and made_for != target.name:
        found.append(f"made for target {_describe(made_for)}, not {target.name!r} ({target.arch})")
    details = entry.details or {}
    engine = details.get("quantized_engine")
    if engine and engine != target.quantized_engine:  # only torch.ao int8 files are packed for an engine
        found.append(f"quantized engine {engine!r}, but {target.name} uses {target.quantized_engine!r}")
    if entry.precision == "int8" and spec.quantization.target_recipe:
        wanted = target.onnx_quant
        for key in _ONNX_QUANT_KEYS:
            if key in details and details[key] != getattr(wanted, key):
                found.append(f"ONNX {key} {details[key]!r}, but {target.name} uses {getattr(wanted, key)!r}")
    return found


def check_target(folder: Path, manifest: Manifest, entry: ModelFile, spec, target: Target, force: bool) -> list[str]:
    """The mismatches (empty when none); without ``force`` any mismatch is a UsageError."""
    found = mismatches(manifest, entry, spec, target)
    if found and not force:
        raise UsageError(
            f"{folder / entry.path} does not fit target {target.name!r}: {'; '.join(found)}; "
            f"quantize and export it again for {target.name}, or bundle it anyway with edgekit bundle --force"
        )
    return found


def _describe(name: str) -> str:
    """``'x86-64' (x86_64)`` when the target is known here, else just the quoted name."""
    if name not in available_targets():
        return repr(name)
    try:
        return f"{name!r} ({load_target(name).arch})"
    except EdgekitError:
        return repr(name)
