"""Target-aware ONNX Runtime quantization settings: signedness, per-channel, reduce_range.

The target profile (``[runtime.onnx_quant]``) gives the starting point; the ISA decides the rest:

* x86: ORT's int8 GEMM kernels take uint8 activations x int8 weights (U8S8, VPMADDUBSW / VNNI).
  Measured with ORT 1.32 on an AVX-512 VNNI host: a QDQ S8S8 BERT-style encoder ran 1.3-4x
  *slower* than fp32 (only half the MatMuls fused), U8S8 with per-channel int8 weights fused all of
  them and ran ~2x faster. Without VNNI, U8S8 products can saturate int16: reduce_range (7-bit
  weights) avoids it.
* ARM: with the dot-product extension (``asimddp``: Cortex-A55/A76 and later) signed int8
  activations run on the SDOT kernels; without it (Cortex-A53/A72) the profile's choice stands.

The ISA considered is the target's own list, plus this host's flags when the host has the target's
architecture (a generic ``x86-64`` profile cannot know whether the box has VNNI; this host can).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from functools import lru_cache

from edgekit.core.errors import UsageError
from edgekit.core.targets import QUANT_TYPES, Target

X86_VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
ARM_DOT_FLAGS = ("asimddp",)


@dataclass(frozen=True)
class OnnxRecipe:
    activation_type: str = "uint8"
    weight_type: str = "int8"
    per_channel: bool = True
    reduce_range: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)  # why each choice was made
    warnings: tuple[str, ...] = field(default_factory=tuple)  # expected to be slow or inaccurate

    def describe(self) -> dict:
        return {
            "activation_type": self.activation_type,
            "weight_type": self.weight_type,
            "per_channel": self.per_channel,
            "reduce_range": self.reduce_range,
        }

    @property
    def short(self) -> str:
        sign = {"uint8": "U8", "int8": "S8"}
        text = f"{sign[self.activation_type]}{sign[self.weight_type]}"
        return text + ("-pc" if self.per_channel else "-pt") + ("-rr" if self.reduce_range else "")


@lru_cache(maxsize=1)
def host_isa() -> tuple[str, tuple[str, ...]]:
    """(architecture, CPU feature flags) of this machine, from /proc/cpuinfo where there is one."""
    arch = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    flags.update(value.split())
    except OSError:
        pass
    return arch, tuple(sorted(flags))


def effective_isa(target: Target, host: tuple[str, tuple[str, ...]] | None = None) -> set[str]:
    arch, flags = host if host is not None else host_isa()
    isa = set(target.isa)
    if arch == target.arch:
        isa |= set(flags)
    return isa


def onnx_recipe(
    target: Target,
    *,
    activation_type: str | None = None,
    weight_type: str | None = None,
    per_channel: bool | None = None,
    reduce_range: bool | None = None,
    host: tuple[str, tuple[str, ...]] | None = None,
) -> OnnxRecipe:
    """The settings for ``target``; explicit arguments win, with a warning when they look slow."""
    for label, value in (("activation type", activation_type), ("weight type", weight_type)):
        if value is not None and value not in QUANT_TYPES:
            raise UsageError(f"unknown {label} {value!r}; choose one of: {', '.join(QUANT_TYPES)}")
    base = target.onnx_quant
    isa = effective_isa(target, host)
    notes: list[str] = []
    warnings: list[str] = []
    act = activation_type or base.activation_type
    wt = weight_type or base.weight_type
    pc = base.per_channel if per_channel is None else per_channel
    rr = base.reduce_range

    if target.arch == "x86_64":
        vnni = sorted(isa & set(X86_VNNI_FLAGS))
        if act == "int8":
            message = (
                "int8 (S8S8) activations on x86: ONNX Runtime fuses only part of the MatMuls into int8 "
                "kernels; measured 1.3-4x slower than fp32 on a BERT-style encoder. Use uint8 activations (U8S8)"
            )
            warnings.append(message)
        if act == "uint8" and wt == "int8":
            if vnni:
                rr = False
                notes.append(f"U8S8 on an x86 host with {'/'.join(vnni)}: full 8-bit weights (no reduce_range)")
            else:
                rr = True
                notes.append("U8S8 on x86 without VNNI: reduce_range (7-bit weights) avoids int16 saturation")
        if reduce_range is False and rr and not vnni:
            warnings.append("reduce_range off on x86 without VNNI: U8S8 products may saturate and lose accuracy")
        if not pc:
            notes.append("per-tensor weights: fastest, but channels with small weights lose precision")
    elif target.is_arm:
        if isa & set(ARM_DOT_FLAGS):
            if activation_type is None and act != "int8":
                notes.append("the target has asimddp (SDOT); the profile keeps uint8 activations")
            elif act == "int8":
                notes.append("S8S8 on a core with asimddp: signed dot-product (SDOT) kernels")
        elif act == "int8":
            notes.append(f"{target.core or target.name} has no asimddp: int8 activations run on plain NEON kernels")
    if reduce_range is not None:
        rr = reduce_range
    if not pc and per_channel is None:
        notes.append("per-tensor weights from the target profile")
    return OnnxRecipe(act, wt, pc, rr, tuple(notes), tuple(warnings))
