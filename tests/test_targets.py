import pytest

from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.targets import available_targets, load_target, parse_target

REQUIRED = {"rpi3", "rpi4", "rpi5", "rpi-zero2w", "x86-64"}


def test_shipped_targets_load_with_real_facts():
    assert REQUIRED <= set(available_targets())
    rpi4, rpi5, zero = load_target("rpi4"), load_target("rpi5"), load_target("rpi-zero2w")
    assert rpi4.core == "Cortex-A72" and not rpi4.has_isa("asimddp")
    assert rpi5.core == "Cortex-A76" and rpi5.has_isa("asimddp")
    assert zero.ram_mb == 512 and zero.is_arm
    assert load_target("x86-64").quantized_engine == "x86"
    for name in REQUIRED:
        target = load_target(name)
        assert target.budgets["max_accuracy_drop"] > 0
        if target.is_arm:
            assert target.quantized_engine == "qnnpack" and target.has_isa("neon")


def test_unknown_target_lists_valid_names():
    with pytest.raises(UsageError) as info:
        load_target("rpi9")
    assert "rpi4" in str(info.value) and "rpi-zero2w" in str(info.value)


def test_target_from_path(tmp_path):
    text = (available_targets()["rpi4"]).read_text().replace('name = "rpi4"', 'name = "my-board"')
    path = tmp_path / "board.toml"
    path.write_text(text)
    assert load_target(str(path)).name == "my-board"


def _base():
    return {
        "name": "t",
        "cpu": {"arch": "aarch64", "cores": 4, "ram_mb": 1024},
        "runtime": {"threads": 4, "quantized_engine": "qnnpack"},
    }


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["cpu"].update(cores="four"), "cpu.cores must be int"),
        (lambda d: d["cpu"].update(cores=0), "must be positive"),
        (lambda d: d["cpu"].update(arch="sparc"), "allowed: aarch64"),
        (lambda d: d.update(colour="red"), "unknown key(s) in [target]: colour"),
        (lambda d: d["runtime"].update(quantized_engine="magic"), "quantized_engine"),
        (lambda d: d.update(budgets={"max_size_mb": True}), "not a boolean"),
        (lambda d: d.update(budgets={"max_speed": 3}), "unknown key(s) in [budgets]"),
        (lambda d: d["cpu"].pop("ram_mb"), "missing key cpu.ram_mb"),
        (lambda d: d["runtime"].update(torch_quant={"per_channel": "yes"}), "runtime.torch_quant.per_channel"),
        (lambda d: d["runtime"].update(torch_quant={"reduce_range": True}), "unknown key(s) in [runtime.torch_quant]"),
    ],
)
def test_malformed_target_is_a_clear_error(mutate, message):
    data = _base()
    mutate(data)
    with pytest.raises(InputFileError) as info:
        parse_target(data, "board.toml")
    assert message in str(info.value)


def test_invalid_toml(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("name = [unclosed")
    with pytest.raises(InputFileError, match="not valid TOML"):
        load_target(str(path))


def test_torch_int8_weight_scales_come_from_the_target():
    """ARM boards ask qnnpack for per-channel weights; a target that says nothing keeps the engine's default."""
    assert all(load_target(name).torch_quant.per_channel is True for name in ("rpi3", "rpi4", "rpi5", "rpi-zero2w"))
    assert load_target("x86-64").torch_quant.per_channel is None
    assert parse_target(_base(), "board.toml").torch_quant.per_channel is None
    data = _base()
    data["runtime"]["torch_quant"] = {"per_channel": False}
    assert parse_target(data, "board.toml").torch_quant.per_channel is False
