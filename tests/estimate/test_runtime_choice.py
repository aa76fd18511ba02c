"""The runtime choice per target (edgekit.pipeline.choice): every variant counted on the target's core is
ranked by its instructions per inference, across formats; the cheapest within the quality budget is
the choice; a file counted twice is ranked once; what was not counted is one line per reason."""

from __future__ import annotations

from edgekit.core.targets import load_target
from edgekit.pipeline.choice import choice_line, not_counted_lines, runtime_choice
from edgekit.pipeline.run import VariantRow
from edgekit.pipeline.target import HOST, TargetCost

COUNTED = "counted"


def row(tmp_path, variant: str, fmt: str, instructions: int | None, accuracy: float = 0.98, gate: str = "pass",
        content: bytes | None = None, note: str = "") -> VariantRow:
    path = tmp_path / f"{variant}.bin"
    path.write_bytes(content if content is not None else variant.encode())
    cost = (TargetCost(COUNTED, "counted on emulated Cortex-A76", instructions=instructions) if instructions
            else TargetCost(HOST, "host timing", note=note))
    return VariantRow(variant, fmt, str(path), 1000, accuracy, 0.1, 0.2, 50.0, gate, target=cost.to_dict())


def test_the_cheapest_count_across_formats_is_the_choice_and_ratios_are_to_it(tmp_path):
    from edgekit.estimate.on_target import counted_formats

    native, *_ = counted_formats()
    rows = [row(tmp_path, "fp32-a", native, 300_000), row(tmp_path, "int8-static-b", "tflite", 120_000),
            row(tmp_path, "int8-static-c", native, 150_000),
            row(tmp_path, "fp32-d", "torchscript", None, note="not counted: no runtime of it is counted"),
            row(tmp_path, "int8-static-d", "torchscript", None, note="not counted: no runtime of it is counted")]
    choice = runtime_choice(rows, 0.98, 1.0, load_target("rpi5"))
    assert [item["variant"] for item in choice["ranked"]] == ["int8-static-b", "int8-static-c", "fp32-a"]
    assert [round(item["ratio"], 6) for item in choice["ranked"]] == [1.0, 1.25, 2.5]
    assert choice["recommended"]["variant"] == "int8-static-b" and choice["recommended"]["python"] is True
    assert choice["recommended"]["next"] == {"variant": "int8-static-c", "runtime": "edgekit-run (no Python)",
                                             "ratio": 1.25}
    line = choice_line(choice)
    assert line.startswith("Fastest runtime for rpi5: int8-static-b in ai-edge-litert (Python's per-call work included): "
                           "120,000 instructions per inference, the fewest of 3 counted (next: int8-static-c, 1.25x)")
    assert "from emulated counts on Cortex-A76, not timed on a board" in line
    assert line.endswith(f"Bundle it: edgekit bundle {tmp_path} --format tflite --target rpi5")
    # the two uncounted variants share a reason: one line
    assert not_counted_lines(choice) == ["Not counted on Cortex-A76: fp32-d, int8-static-d: no runtime of it is counted"]


def test_the_cheapest_over_its_budget_or_failing_its_gate_is_ranked_but_not_chosen(tmp_path):
    rows = [row(tmp_path, "int8-static-a", "ncnn", 100_000, accuracy=0.90),
            row(tmp_path, "int8-static-b", "tflite", 110_000, gate="fail"),
            row(tmp_path, "fp32-c", "tflite", 200_000)]
    choice = runtime_choice(rows, 0.98, 1.0, load_target("rpi4"))
    assert choice["ranked"][0]["why_not"] == "quality drop 8.00 pt over the 1 pt budget"
    assert choice["ranked"][1]["why_not"] == "gate failed"
    assert choice["recommended"]["variant"] == "fp32-c" and choice["recommended"]["ratio"] == 2.0
    assert "2.00x the cheapest (int8-static-a: quality drop 8.00 pt over the 1 pt budget), the fewest within budget" \
        in choice_line(choice)
    rows[2] = row(tmp_path, "fp32-c", "tflite", 200_000, gate="fail")
    assert choice_line(runtime_choice(rows, 0.98, 1.0, load_target("rpi4"))).startswith("No runtime to recommend")


def test_the_same_file_counted_twice_is_ranked_once_and_nothing_counted_is_no_choice(tmp_path):
    rows = [row(tmp_path, "int8-static-x", "ncnn", 100_000, content=b"same"),
            row(tmp_path, "int8-static-x-native", "ncnn", 100_000, content=b"same")]
    assert [item["variant"] for item in runtime_choice(rows, 0.98, 1.0, load_target("rpi5"))["ranked"]] == \
        ["int8-static-x"]
    off = [row(tmp_path, "fp32-y", "ncnn", None, note="emulation off (--no-emulate)")]
    assert runtime_choice(off, 0.98, 1.0, load_target("rpi5")) is None


def test_without_qemu_a_format_counted_in_python_keeps_host_timings_and_says_why(tmp_path, monkeypatch):
    from dataclasses import replace

    from bench_results import make_result
    from edgekit.pipeline.target import target_costs

    model = tmp_path / "model.ncnn.param"
    model.write_text("7767517\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without qemu-user
    results = [replace(make_result("fp32-ncnn"), host={"machine": "x86_64"})]
    cost, = target_costs([(model, "ncnn")], results, load_target("rpi5"), emulate=True, threads=None, progress=print)
    assert cost.basis == HOST and cost.note.startswith("not counted under emulation: ")
    assert "\n" not in cost.note


def test_a_format_counted_both_ways_is_ranked_as_two_runtimes_and_the_cheaper_is_chosen(tmp_path):
    from dataclasses import replace

    python = TargetCost(COUNTED, "counted on emulated Cortex-A76", instructions=499_000).to_dict()
    rows = [replace(row(tmp_path, "fp32-onnx", "onnx", 500_000), in_python=python),
            row(tmp_path, "fp32-executorch", "executorch", 510_000)]
    choice = runtime_choice(rows, 0.98, 1.0, load_target("rpi5"))
    assert [(item["variant"], item["runtime"]) for item in choice["ranked"]] == [
        ("fp32-onnx", "onnxruntime (Python)"), ("fp32-onnx", "edgekit-run (no Python)"),
        ("fp32-executorch", "edgekit-run (no Python)")]
    best = choice["recommended"]
    assert best["python"] is True and best["next"] == {"variant": "fp32-onnx", "runtime": "edgekit-run (no Python)",
                                                       "ratio": 500_000 / 499_000}
    line = choice_line(choice)
    assert line.startswith("Fastest runtime for rpi5: fp32-onnx in onnxruntime (Python's per-call work included): "
                           "499,000 instructions per inference, the fewest of 3 counted (next: fp32-onnx in "
                           "edgekit-run, 1.00x)")
    assert line.endswith(f"Bundle it: edgekit bundle {tmp_path} --format onnx --target rpi5")  # a Python bundle

    # the same two counts the other way round: edgekit-run wins, and ties go to no Python on the board
    for native in (498_000, 499_000):
        rows[0] = replace(row(tmp_path, "fp32-onnx", "onnx", native), in_python=python)
        best = runtime_choice(rows, 0.98, 1.0, load_target("rpi5"))["recommended"]
        assert (best["python"], best["instructions"]) == (False, native)
        assert best["bundle"].endswith("--format onnx --target rpi5 --runtime native")


def test_a_python_count_that_could_not_run_is_one_line_naming_the_runtime(tmp_path):
    from dataclasses import replace

    missing = TargetCost(HOST, "host timing", note="not counted under emulation: needs root").to_dict()
    rows = [replace(row(tmp_path, f"{p}-onnx", "onnx", n), in_python=missing) for p, n in (("fp32", 9), ("int8", 5))]
    choice = runtime_choice(rows, 0.98, 1.0, load_target("rpi4"))
    assert [item["runtime"] for item in choice["ranked"]] == ["edgekit-run (no Python)"] * 2
    assert not_counted_lines(choice) == ["Not counted on Cortex-A72: fp32-onnx in onnxruntime (Python), "
                                         "int8-onnx in onnxruntime (Python): not counted under emulation: needs root"]


def test_python_costs_count_only_formats_both_runners_take_and_say_why_when_they_cannot(tmp_path, monkeypatch):
    from edgekit.pipeline.target import python_costs

    onnx, pte = tmp_path / "model.onnx", tmp_path / "model.pte"
    onnx.write_bytes(b"not counted: no qemu on PATH")
    pte.write_bytes(b"x")
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without qemu-user
    counted = TargetCost(COUNTED, "counted on emulated Cortex-A76", instructions=1000)
    host = TargetCost(HOST, "host timing", note="emulation off (--no-emulate)")
    costs = python_costs([(onnx, "onnx"), (pte, "executorch"), (onnx, "onnx")], [counted, counted, host],
                         load_target("rpi5"), threads=None, progress=print)
    assert costs[1] is None and costs[2] is None  # no Python bundle of a .pte; nothing native was counted
    assert costs[0].basis == HOST and costs[0].note.startswith("not counted under emulation: ")
    assert "\n" not in costs[0].note
