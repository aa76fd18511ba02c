"""Emulated instruction counts (``edgekit bench --emulate``, ``edgekit.emulate.icount``): the plugin's
classes against a hand-written aarch64 loop, the refusal of QEMU's ``max``, determinism, int8 paying off
on the A76's dot-product kernels and not on the A72, and the count gate catching a planted 1 % regression.

Needs qemu-user (the dynamic qemu-aarch64, which loads plugins), gcc, QEMU's plugin header and the aarch64
cross toolchain: .ci/setup installs all four. The model tests export small ExecuTorch programs (slow)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.emulate import EmulationError

runner = CliRunner()
LOOP = """
    .global _start
_start:
    mov x0, #ITERATIONS
    sub x9, sp, #256
    and x9, x9, #~15
loop:
    add x1, x1, #1
    madd x5, x5, x5, x5
    ldur x2, [sp, #-16]
    stur x2, [sp, #-32]
    ldp x3, x4, [sp, #-64]
    stp x3, x4, [sp, #-80]
    ldr q1, [x9]
    str q1, [x9, #16]
    ld1 {v2.4s}, [x9]
    st1 {v2.4s}, [x9]
    fadd d0, d0, d1
    add v3.4s, v3.4s, v3.4s
    nop
    subs x0, x0, #1
    b.ne loop
    mov x0, #0
    mov x8, #93
    svc #0
"""
# per iteration, by the A64 encoding: add, madd, subs; ldur, ldp, ldr q, ld1; stur, stp, str q, st1; fadd, add (vector);
# nop (a hint); b.ne. Outside the loop: mov, sub, and, mov, mov (integer) and svc (other).
PER_ITERATION = {"integer": 3, "load": 4, "store": 4, "simd_fp": 2, "branch": 1, "other": 1}
OUTSIDE = {"integer": 5, "other": 1}


def _mark(value: int) -> str:  # the runner's count_mark: write(-1, NULL, value)
    return (f"    mov x0, #-1\n    mov x1, #0\n    movz x2, #{value & 0xffff:#x}\n"
            f"    movk x2, #{value >> 16:#x}, lsl #16\n    mov x8, #64\n    svc #0\n")


BEGIN, END = 0x65646B62, 0x65646B65
# the loop between the runner's two marks: the window holds what follows the first svc up to the second one
MARKED = LOOP.replace("_start:\n", "_start:\n" + _mark(BEGIN)).replace("    mov x0, #0\n", _mark(END) + "    mov x0, #0\n")


def _needs_counting_tools() -> None:
    from edgekit.emulate.icount_plugin import find_header

    for tool, package in (("qemu-aarch64", "qemu-user"), ("gcc", "gcc"), ("aarch64-linux-gnu-gcc", "crossbuild-essential-arm64")):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} (apt-get install {package}; .ci/setup does)")
    try:
        find_header()
    except EmulationError:
        pytest.skip("needs QEMU's plugin header (bash edgekit/emulate/plugin/fetch_header.sh; .ci/setup does)")


@pytest.fixture(scope="module")
def plugin() -> Path:
    from edgekit.emulate.host import qemu_version
    from edgekit.emulate.icount_plugin import plugin_library, plugin_qemu

    _needs_counting_tools()
    return plugin_library(qemu_version(plugin_qemu()))


def _count_loop(plugin: Path, tmp_path: Path, iterations: int, *options: str, code: str = LOOP) -> dict:
    from edgekit.emulate.icount import parse_log

    source = tmp_path / "loop.S"
    source.write_text(code)
    program = tmp_path / f"loop{iterations}"
    subprocess.run(["aarch64-linux-gnu-gcc", "-nostdlib", "-static", f"-DITERATIONS={iterations}", "-o", str(program),
                    str(source)], check=True)
    log = tmp_path / f"log{iterations}"
    subprocess.run(["qemu-aarch64", "-cpu", "cortex-a72", "-plugin", ",".join([str(plugin), "tag=t", *options]),
                    "-d", "plugin", "-D", str(log), str(program)], check=True, timeout=60)
    return parse_log(log.read_text(), "t")


@pytest.mark.parametrize("options", [(), ("atomic=on",)], ids=["inline", "atomic"])
def test_the_plugin_counts_every_class_of_a_hand_written_loop_exactly(plugin, tmp_path, options):
    for iterations in (1000, 3000):
        counts = _count_loop(plugin, tmp_path, iterations, *options)
        for name, per in PER_ITERATION.items():
            assert counts[name] == per * iterations + OUTSIDE.get(name, 0), (name, counts)
        assert counts["total"] == 15 * iterations + 6
        assert counts["windows"] == 0 and counts["window"]["total"] == 0


@pytest.mark.parametrize("options", [(), ("atomic=on",)], ids=["inline", "atomic"])
def test_the_plugin_counts_exactly_what_ran_between_the_runners_marks(plugin, tmp_path, options):
    for iterations in (1000, 3000):
        counts = _count_loop(plugin, tmp_path, iterations, *options, code=MARKED)
        assert (counts["windows"], counts["bad_marks"]) == (1, 0), counts
        assert counts["before"] == 6  # the first mark: five moves and its svc
        window = counts["window"]
        # after the first svc: mov, sub, and; the loop; the second mark's five moves and svc
        for name, per in PER_ITERATION.items():
            assert window[name] == per * iterations + {"integer": 8, "other": 1}.get(name, 0), (name, window)
        assert counts["total"] == counts["before"] + window["total"] + 3  # mov, mov, svc of exit


def test_a_mark_out_of_order_is_reported(plugin, tmp_path):
    counts = _count_loop(plugin, tmp_path, 10, code=LOOP.replace("_start:\n", "_start:\n" + _mark(END)))
    assert (counts["windows"], counts["bad_marks"]) == (0, 1)


PREFILL_BEGIN, PREFILL_END = 0x65646B70, 0x65646B71
# a language model's run: the loop between the prefill marks (its prompt), then an empty timed window (its decode steps)
PREFILLED = LOOP.replace("_start:\n", "_start:\n" + _mark(PREFILL_BEGIN)).replace(
    "    mov x0, #0\n", _mark(PREFILL_END) + _mark(BEGIN) + _mark(END) + "    mov x0, #0\n")


def test_the_prefill_marks_count_their_own_window(plugin, tmp_path):
    for iterations in (1000, 3000):
        counts = _count_loop(plugin, tmp_path, iterations, code=PREFILLED)
        prefill, window = counts["prefill"], counts["window"]
        assert (prefill["windows"], prefill["bad_marks"], counts["windows"], counts["bad_marks"]) == (1, 0, 1, 0)
        for name, per in PER_ITERATION.items():  # as the timed window of the test above
            assert prefill[name] == per * iterations + {"integer": 8, "other": 1}.get(name, 0), (name, prefill)
        assert window == {"total": 6, "simd_fp": 0, "integer": 5, "load": 0, "store": 0, "branch": 0, "other": 1}
        assert counts["before"] == 6 + prefill["total"] + 6  # the timed window's first mark comes after the prompt's
        assert counts["total"] == counts["before"] + window["total"] + 3


def test_a_prefill_mark_out_of_order_is_reported(plugin, tmp_path):
    counts = _count_loop(plugin, tmp_path, 10, code=LOOP.replace("_start:\n", "_start:\n" + _mark(PREFILL_END)))
    assert (counts["prefill"]["windows"], counts["prefill"]["bad_marks"], counts["bad_marks"]) == (0, 1, 0)


def test_the_plugin_line_is_taken_only_once_and_only_with_its_tag():
    from edgekit.emulate.icount import parse_log

    line = ("edgekit-icount abc total=6 simd_fp=1 integer=1 load=1 store=1 branch=1 other=1 windows=1 bad_marks=0 "
            "before=2 w_total=3 w_simd_fp=0 w_integer=1 w_load=1 w_store=1 w_branch=0 w_other=0")
    assert parse_log(f"noise\n{line.replace('abc', 'forged')}\n{line}\n", "abc")["total"] == 6
    with pytest.raises(EmulationError, match="2 results"):
        parse_log(f"{line}\n{line}\n", "abc")
    with pytest.raises(EmulationError, match="add up"):
        parse_log(line.replace(" total=6", " total=7"), "abc")
    with pytest.raises(EmulationError, match="add up"):
        parse_log(line.replace("w_total=3", "w_total=4"), "abc")
    with pytest.raises(EmulationError, match="malformed"):
        parse_log(line.split(" windows=")[0], "abc")
    assert parse_log(line, "abc")["prefill"]["windows"] == 0  # a plugin from before the prefill marks
    prefilled = line + " p_windows=1 p_bad_marks=0 p_total=2 p_simd_fp=1 p_integer=1 p_load=0 p_store=0 p_branch=0 p_other=0"
    assert parse_log(prefilled, "abc")["prefill"] == {"windows": 1, "bad_marks": 0, "total": 2, "simd_fp": 1,
                                                        "integer": 1, "load": 0, "store": 0, "branch": 0, "other": 0}
    with pytest.raises(EmulationError, match="add up"):
        parse_log(prefilled.replace("p_total=2", "p_total=3"), "abc")


@pytest.mark.parametrize("cpu", ["max", "MAX", "max,sme=off", "any", ""])
def test_qemus_max_cpu_is_refused_before_anything_runs(cpu, tmp_path):
    from edgekit.emulate.icount import count_per_run

    program = tmp_path / "model.pte"
    program.write_bytes(b"\0" * 64)
    with pytest.raises(EmulationError, match="refusing to emulate QEMU's"):
        count_per_run(program, "executorch", cpu)


def test_a_target_naming_max_is_counted_on_a_named_core_instead(tmp_path):
    from edgekit.bench.emulated import _cpu

    _needs_counting_tools()
    toml = Path(__file__).resolve().parents[2] / "targets" / "rpi4.toml"
    text = toml.read_text().replace('core = "Cortex-A72"', 'core = "max"').replace('name = "rpi4"', 'name = "maxboard"')
    (tmp_path / "maxboard.toml").write_text(text)
    cpu, notes = _cpu(str(tmp_path / "maxboard.toml"))
    assert cpu == "cortex-a72" and "max" not in cpu and notes and "emulated cortex-a72" in notes[0]


def test_bench_emulate_refuses_bad_input_in_one_line(tmp_path):
    from conftest import one_line_error

    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"not a model")
    no_target = runner.invoke(app, ["bench", str(onnx), "--emulate"])
    assert "needs --target" in one_line_error(no_target, 2)
    with_host = runner.invoke(app, ["bench", str(onnx), "--emulate", "--target", "rpi4", "--processes", "2"])
    assert "--processes" in one_line_error(with_host, 2)


def test_missing_tools_are_named_with_what_installs_them(tmp_path, monkeypatch):
    from edgekit.emulate.icount_plugin import find_header, plugin_qemu

    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no qemu-aarch64 on it
    with pytest.raises(EmulationError, match="apt-get install qemu-user"):
        plugin_qemu()
    monkeypatch.setenv("EDGEKIT_QEMU_PLUGIN_HEADER", str(tmp_path / "absent.h"))
    with pytest.raises(EmulationError, match="absent.h is not a file"):
        find_header()


@pytest.mark.slow
def test_a_damaged_program_fails_in_one_line_under_emulation(tmp_path):
    from conftest import one_line_error

    _needs_counting_tools()
    program = tmp_path / "model.pte"
    program.write_bytes(bytes(range(256)) * 20)
    result = runner.invoke(app, ["bench", str(program), "--emulate", "--target", "rpi4", "--json", str(tmp_path / "r.json")])
    assert "failed under emulation" in one_line_error(result, 1)
    assert not (tmp_path / "r.json").exists()


# -- real models -------------------------------------------------------------------------------------


def _net(extra_affine: bool = False):
    """Two 3x3 convolutions (16 -> 32 -> 32 channels on 16x16): the layers dot-product kernels speed up."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.c1 = torch.nn.Conv2d(16, 32, 3, padding=1)
            self.c2 = torch.nn.Conv2d(32, 32, 3, padding=1)
            self.head = torch.nn.Linear(32, 10)

        def forward(self, x):
            x = torch.relu(self.c2(torch.relu(self.c1(x))))
            if extra_affine:  # the planted regression: one more elementwise step (a mul and an add)
                x = x * 1.5 + 1.0
            return self.head(x.mean(dim=(2, 3)))

    return Net().eval()


def _int8_pte(model, example, path: Path) -> None:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgekit.quantize.toolkits.pt2e_backend import quantizer, quiet

    with quiet():
        prepared = prepare_pt2e(torch.export.export(model, (example,)).module(), quantizer(per_channel=True))
        generator = torch.Generator().manual_seed(1)
        for _ in range(8):
            prepared(torch.rand(example.shape, generator=generator))
        program = torch.export.export(convert_pt2e(prepared), (example,))
        path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    """fp32, fp32 with the planted extra step, and int8 (PT2E, XNNPACK) programs, each as model.pte in its folder."""
    pytest.importorskip("executorch")
    _needs_counting_tools()
    import torch

    from tiny_models import write_pte

    base = tmp_path_factory.mktemp("icount")
    example = torch.rand(1, 16, 16, 16)
    out = {name: base / name / "model.pte" for name in ("fp32", "fp32-rerun", "slower", "int8")}
    for path in out.values():
        path.parent.mkdir()
    write_pte(_net(), example, out["fp32"])
    shutil.copyfile(out["fp32"], out["fp32-rerun"])
    write_pte(_net(extra_affine=True), example, out["slower"])
    _int8_pte(_net(), example, out["int8"])
    return out


def _bench(path: Path, target: str, json_path: Path, *extra: str) -> dict:
    result = runner.invoke(app, ["bench", str(path), "--target", target, "--emulate", "--json", str(json_path), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(json_path.read_text())["results"][0]


@pytest.mark.slow
def test_counts_repeat_and_their_classes_add_up(programs, tmp_path):
    from edgekit.emulate.icount import CALL_NOISE, count_per_run

    first = count_per_run(programs["fp32"], "executorch", "cortex-a72", runs=10)
    again = count_per_run(programs["fp32"], "executorch", "cortex-a72", runs=10)
    # counted between the runner's marks, within one process: apart only by the per-call timing's noise
    assert abs(first["per_run"] - again["per_run"]) <= CALL_NOISE
    assert abs(sum(first["classes"].values()) - first["per_run"]) <= 6
    # two 3x3 convolutions of 16x16 maps are 16*32*9*256 + 32*32*9*256 = 3.54 M multiply-adds: NEON does 4 a lane op
    assert 3_538_944 / 4 / 2 < first["classes"]["simd_fp"] < 3_538_944
    assert first["startup"] > first["per_run"] and first["cpu"] == "cortex-a72"


@pytest.mark.slow
def test_int8_pays_off_on_the_a76_dot_product_kernels_far_more_than_on_the_a72(programs, tmp_path):
    from edgekit.emulate.icount import count_per_run

    counts = {(name, cpu): count_per_run(programs[name], "executorch", cpu, runs=5)["per_run"]
              for name in ("fp32", "int8") for cpu in ("cortex-a72", "cortex-a76")}
    a72 = counts["int8", "cortex-a72"] / counts["fp32", "cortex-a72"]
    a76 = counts["int8", "cortex-a76"] / counts["fp32", "cortex-a76"]
    # fp32 runs the same NEON kernels on both cores; int8 gets the A76's SDOT kernels (measured 0.86 vs 0.40)
    assert abs(counts["fp32", "cortex-a72"] - counts["fp32", "cortex-a76"]) < 0.01 * counts["fp32", "cortex-a72"]
    assert a72 < 1.0 and a76 < 0.7 * a72, (a72, a76)


@pytest.mark.slow
def test_the_count_gate_passes_a_rerun_and_catches_a_planted_one_percent_regression(programs, tmp_path):

    base = _bench(programs["fp32"], "rpi4", tmp_path / "base.json")
    assert base["emulated"]["cpu"] == "cortex-a72" and base["mode"] == "emulated"
    rerun = _bench(programs["fp32-rerun"], "rpi4", tmp_path / "rerun.json")
    slower = _bench(programs["slower"], "rpi4", tmp_path / "slower.json", "--html", str(tmp_path / "slower.html"))
    change = slower["emulated"]["instructions"]["per_run"] / base["emulated"]["instructions"]["per_run"] - 1
    assert 0.01 < change < 0.03, change  # the extra mul and add: measured +1.3 %

    same = runner.invoke(app, ["gate", str(tmp_path / "rerun.json"), "--baseline", str(tmp_path / "base.json"),
                               "--max-regression", "1%", "--json", str(tmp_path / "same-gate.json")])
    assert same.exit_code == 0, same.output
    check = json.loads((tmp_path / "same-gate.json").read_text())["checks"][0]
    assert check["metric"] == "instructions_regression" and check["status"] == "pass"

    caught = runner.invoke(app, ["gate", str(tmp_path / "slower.json"), "--baseline", str(tmp_path / "base.json"),
                                 "--max-regression", "1%", "--json", str(tmp_path / "gate.json")])
    assert caught.exit_code == 3, caught.output
    check = json.loads((tmp_path / "gate.json").read_text())["checks"][0]
    assert check["status"] == "fail" and abs(check["measured"] - change * 100) < 1e-6
    page = (tmp_path / "slower.html").read_text()
    assert "Executed instructions on the target" in page and f'data-count="{slower["emulated"]["instructions"]["per_run"]}"' in page

    other_core = _bench(programs["slower"], "rpi5", tmp_path / "a76.json")
    assert other_core["emulated"]["cpu"] == "cortex-a76"
    skipped = runner.invoke(app, ["gate", str(tmp_path / "a76.json"), "--baseline", str(tmp_path / "base.json"),
                                  "--max-regression", "1%"])
    assert skipped.exit_code == 0 and "incomparable" in skipped.output


@pytest.mark.slow
def test_bench_emulate_counts_a_native_bundle_with_its_own_runner(tmp_path):
    pytest.importorskip("executorch")
    _needs_counting_tools()
    from tiny_models import build_models, tiny_mlp

    from edgekit.formats.artifacts import finalize, load_manifest
    from edgekit.formats.reference import write_reference

    export = build_models(tmp_path / "export", formats=("executorch",))
    manifest = load_manifest(export)[1]
    write_reference(export / "reference.npz", tiny_mlp(), manifest.inputs, {})  # what the bundle checks on the board
    finalize(manifest, export)
    bundle = tmp_path / "bundle"
    made = runner.invoke(app, ["bundle", str(export), "--target", "rpi5", "--runtime", "native", "--out", str(bundle)])
    assert made.exit_code == 0, made.output
    result = runner.invoke(app, ["bench", str(bundle), "--emulate", "--json", str(tmp_path / "b.json")])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "b.json").read_text())["results"][0]
    assert doc["emulated"]["cpu"] == "cortex-a76" and doc["target"] == "rpi5"
    assert doc["emulated"]["runner"] == "edgekit-run of the bundle" and doc["emulated"]["instructions"]["per_run"] > 0
    assert "instr" in result.output and "cortex-a76" in result.output
    wrong = runner.invoke(app, ["bench", str(bundle), "--emulate", "--target", "rpi4"])
    assert wrong.exit_code == 2 and "bundle for rpi5" in wrong.output



@pytest.mark.slow
def test_bench_emulate_counts_an_onnx_model_and_a_python_bundle_of_it(tmp_path):
    _needs_counting_tools()
    from tiny_models import build_models, tiny_mlp

    from edgekit.formats.artifacts import finalize, load_manifest
    from edgekit.emulate.count_inputs import RANDOM, REFERENCE
    from edgekit.emulate.icount import CALL_NOISE
    from edgekit.formats.reference import write_reference

    export = build_models(tmp_path / "export", formats=("onnx",))
    doc = _bench(export, "rpi4", tmp_path / "onnx.json")
    assert doc["model"]["format"] == "onnx" and doc["emulated"]["cpu"] == "cortex-a72"
    # a 64-16-10 MLP: 1,184 multiply-adds, a few hundred NEON instructions; the rest is ONNX Runtime's dispatch
    assert 300 < doc["emulated"]["instructions"]["classes"]["simd_fp"] < 1_184 * 2

    manifest = load_manifest(export)[1]
    write_reference(export / "reference.npz", tiny_mlp(), manifest.inputs, {})
    finalize(manifest, export)
    bundle = tmp_path / "python-bundle"
    made = runner.invoke(app, ["bundle", str(export), "--target", "rpi4", "--out", str(bundle)])
    assert made.exit_code == 0, made.output
    counted = _bench(bundle, "rpi4", tmp_path / "bundle.json")
    assert any("Python bundle" in note for note in counted["notes"])
    # the export had no reference data then: the runner's random inputs; the bundle's reference inputs now
    assert doc["emulated"]["inputs"] == RANDOM and doc["settings"]["inputs"] != "npz"
    assert counted["emulated"]["inputs"] == REFERENCE and counted["settings"]["inputs"] == "npz"
    # the same file on the same core and runner: equal but for the per-process spread (an MLP's cost does not
    # follow its input values)
    a, b = doc["emulated"]["instructions"]["per_run"], counted["emulated"]["instructions"]["per_run"]
    assert counted["emulated"]["runner"] == doc["emulated"]["runner"]
    assert abs(a - b) <= CALL_NOISE, (doc["emulated"], counted["emulated"])


# -- the count gate's rules and the JSON it reads (no QEMU) -------------------------------------------


def _counted(per_run: int, cpu: str = "cortex-a72"):
    from dataclasses import replace

    from bench_results import make_result

    share = per_run // 6
    classes = {"simd_fp": per_run - 5 * share, "integer": share, "load": share, "store": share, "branch": share,
               "other": share}
    emulated = {"cpu": cpu, "instructions": {"per_run": per_run, "startup": 10 * per_run, "classes": classes},
                "runs": 20, "threads": 1, "qemu": "7.2.22", "plugin": "qemu-plugin-0123456789abcdef",
                "libc": "/usr/aarch64-linux-gnu", "runner": "edgekit-run of the bundle"}
    return replace(make_result("int8-static-executorch"), mode="emulated", emulated=emulated)


@pytest.mark.parametrize("per_run, status", [(1_010_000, "pass"), (1_010_001, "fail"), (990_000, "pass"),
                                             (1_000_900, "pass")])
def test_the_count_gate_holds_the_limit_exactly(per_run, status):
    from edgekit.gates.instructions import check_instructions

    check = check_instructions("m", _counted(per_run), _counted(1_000_000), 0.01)
    assert check.status == status, check.message
    expected = 0.0 if abs(per_run - 1_000_000) <= 2_000 else (per_run / 1_000_000 - 1) * 100  # CALL_NOISE
    assert check.measured == pytest.approx(expected)


def test_counts_from_another_core_are_incomparable_not_failed():
    from edgekit.gates.instructions import check_instructions

    check = check_instructions("m", _counted(2_000_000, "cortex-a76"), _counted(1_000_000), 0.01)
    assert check.status == "skip" and "cortex-a76" in check.message and "incomparable" in check.message


@pytest.mark.parametrize("damage", [
    lambda e: e["instructions"].update(per_run=-1),
    lambda e: e["instructions"]["classes"].update(load=10**9),
    lambda e: e.pop("cpu"),
    lambda e: e["instructions"].update(per_run=1.5),
    lambda e: e.update(threads=0),
])
def test_a_damaged_emulated_section_is_one_line_and_the_gate_does_not_run(damage, tmp_path):
    from conftest import one_line_error

    from edgekit.records.result import to_document

    good = to_document([_counted(1_000_000)])
    (tmp_path / "base.json").write_text(json.dumps(good))
    damage(good["results"][0]["emulated"])
    (tmp_path / "bad.json").write_text(json.dumps(good))
    result = runner.invoke(app, ["gate", str(tmp_path / "bad.json"), "--baseline", str(tmp_path / "base.json"),
                                 "--max-regression", "1%"])
    assert "emulated" in one_line_error(result, 2)
    passed = runner.invoke(app, ["gate", str(tmp_path / "base.json"), "--baseline", str(tmp_path / "base.json"),
                                 "--max-regression", "1%"])
    assert passed.exit_code == 0, passed.output
