"""Target-aware ONNX Runtime recipes: signedness, per-channel and reduce_range from target + ISA."""

import pytest
from pathlib import Path

from edgekit.core.errors import UsageError
from edgekit.quantize.toolkits.recipes import host_isa, onnx_recipe
from edgekit.core.targets import load_target

VNNI_HOST = ("x86_64", ("avx2", "avx512f", "avx512_vnni"))
OLD_X86_HOST = ("x86_64", ("avx2", "sse4_2"))
ARM_HOST = ("aarch64", ("fp", "asimd"))


def test_x86_with_vnni_takes_u8s8_per_channel_full_range():
    recipe = onnx_recipe(load_target("x86-64"), host=VNNI_HOST)
    assert (recipe.activation_type, recipe.weight_type, recipe.per_channel, recipe.reduce_range) == ("uint8", "int8", True, False)
    assert recipe.short == "U8S8-pc" and not recipe.warnings
    assert any("avx512_vnni" in note for note in recipe.notes)


def test_x86_without_vnni_reduces_range():
    recipe = onnx_recipe(load_target("x86-64"), host=OLD_X86_HOST)
    assert recipe.reduce_range is True and recipe.short == "U8S8-pc-rr"
    forced = onnx_recipe(load_target("x86-64"), host=OLD_X86_HOST, reduce_range=False)
    assert forced.reduce_range is False and any("saturate" in w for w in forced.warnings)


def test_s8s8_on_x86_is_flagged_slow():
    recipe = onnx_recipe(load_target("x86-64"), host=VNNI_HOST, activation_type="int8")
    assert recipe.activation_type == "int8"  # the user's choice stands, with a warning
    assert any("slower than fp32" in w for w in recipe.warnings)


def test_arm_targets_follow_their_profile_and_dot_product():
    rpi5 = onnx_recipe(load_target("rpi5"), host=VNNI_HOST)  # an x86 host says nothing about an ARM target
    assert rpi5.activation_type == "int8" and any("SDOT" in n for n in rpi5.notes)
    rpi4 = onnx_recipe(load_target("rpi4"), host=ARM_HOST)
    assert (rpi4.activation_type, rpi4.per_channel, rpi4.reduce_range) == ("uint8", True, False)
    s8 = onnx_recipe(load_target("rpi4"), host=ARM_HOST, activation_type="int8")
    assert any("no asimddp" in n for n in s8.notes)
    per_tensor = onnx_recipe(load_target("rpi4"), per_channel=False)
    assert per_tensor.per_channel is False


def test_bad_recipe_values():
    with pytest.raises(UsageError, match="unknown activation type 'int4'; choose one of: int8, uint8"):
        onnx_recipe(load_target("rpi4"), activation_type="int4")


def test_host_isa_reads_this_machine():
    import platform

    arch, flags = host_isa()
    assert arch == {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    listed = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():  # read independently of host_isa
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            listed |= set(value.split())
    assert set(flags) == listed and list(flags) == sorted(flags)
    if arch == "x86_64":
        assert "sse2" in flags  # every x86-64 CPU has it


def test_recipe_reaches_the_artifact(digits_checkpoint, tmp_path):
    from conftest import CALIB_DIGITS

    from edgekit.quantize.api import quantize

    _, q = quantize(digits_checkpoint, "static", tmp_path / "q", "x86-64", calib=CALIB_DIGITS,
                    formats=("onnx",), activation_type="int8", per_channel=False)
    details = q.file("onnx").details
    assert (details["activation_type"], details["per_channel"]) == ("int8", False)
    assert details["recipe"].startswith("S8S8-pt")
    assert any("slower than fp32" in w for w in q.quantization["warnings"])
