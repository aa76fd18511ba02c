"""Decisions made for the target (edgekit.pipeline.target, edgekit.pipeline.verdict): with a variant's cost
estimated on the target's emulated core, the recommendation, the "int8 is not paying off" warning
and the target's latency budgets use it, not this host's timings, and say so; a variant measured on
the board keeps its own timing, labelled as measured."""

from __future__ import annotations

from dataclasses import replace

from bench_results import make_result
from edgekit.gates.evaluate import gate_results
from edgekit.pipeline.run import VariantRow
from edgekit.pipeline.target import ESTIMATED, HOST, MEASURED, TargetCost, apply_to_gate, basis_line, target_ratios
from edgekit.pipeline.verdict import recommend, recommendation_line, slower_than_fp32, slower_warning
from edgekit.core.targets import load_target

A72 = "estimated on emulated Cortex-A72 at 1800 MHz, 4 threads"


def row(variant: str, p50: float, p50_ratio: float | None, cost: TargetCost, target_ratio: float | None,
        fmt: str = "executorch") -> VariantRow:
    return VariantRow(variant=variant, format=fmt, path=f"{variant}/model.pte", size_bytes=1000, accuracy=0.98,
                      p50_ms=p50, p99_ms=p50 * 1.2, peak_rss_mb=100, gate="pass", size_ratio=1.0,
                      p50_ratio=p50_ratio, target=cost.to_dict(), target_ratio=target_ratio)


def estimated(ms: float) -> TargetCost:
    return TargetCost(ESTIMATED, A72, ms, ms * 0.8, ms * 1.25, instructions=int(ms * 1e6), classes={})


def test_target_ratios_compare_like_with_like():
    costs = [estimated(10.0), estimated(3.0), TargetCost(HOST, "host timing", note="not counted"),
             TargetCost(HOST, "host timing")]
    ratios = target_ratios(["executorch", "executorch", "onnx", "onnx"],
                           ["fp32-executorch", "int8-static-executorch", "fp32-onnx", "int8-dynamic-onnx"], costs)
    assert ratios == [1.0, 0.3, None, None]


def test_the_emulated_estimate_decides_where_the_host_timing_disagrees():
    """On this x86 host the int8 .pte is 1.5x slower than fp32 (the warning's case); on the target's
    emulated core it costs 0.3x: no warning, and it is recommended, on the target's basis."""
    rows = [row("fp32-executorch", 1.0, 1.0, estimated(10.0), 1.0),
            row("int8-static-executorch", 1.5, 1.5, estimated(3.0), 0.3)]
    assert not slower_than_fp32(rows[1])
    host_only = replace(rows[1], target=TargetCost(HOST, "host timing").to_dict(), target_ratio=None)
    assert slower_than_fp32(host_only)  # without the target's figure, the host timing still warns
    rec = recommend(rows, 0.98, 1.0)
    assert rec["variant"] == "int8-static-executorch" and rec["pays_off"] and rec["target_ratio"] == 0.3
    line = recommendation_line(rec)
    assert line.startswith(f"Recommended for the target, {A72}: int8-static-executorch: 0.30x the cost of fp32")
    assert "on this host 1.50x the p50" in line


def test_int8_costlier_on_the_target_is_warned_about_in_the_targets_terms():
    rows = [row("fp32-executorch", 1.0, 1.0, estimated(10.0), 1.0),
            row("int8-static-executorch", 0.5, 0.5, estimated(12.0), 1.2)]
    assert slower_than_fp32(rows[1])
    warning = slower_warning(rows[1], "rpi4")
    assert warning.startswith("int8-static-executorch costs 1.20x fp32 executorch on rpi4 (estimated on emulated")
    rec = recommend(rows, 0.98, 1.0)
    assert not rec["pays_off"] and recommendation_line(rec).startswith("Recommended for its size only")


def test_only_variants_with_a_target_figure_compete_when_some_have_one():
    rows = [row("fp32-executorch", 1.0, 1.0, estimated(10.0), 1.0),
            row("int8-static-executorch", 0.9, 0.9, estimated(6.0), 0.6),
            row("int8-dynamic-onnx", 0.1, 0.1, TargetCost(HOST, "host timing", note="not counted"), None, fmt="onnx")]
    assert recommend(rows, 0.98, 1.0)["variant"] == "int8-static-executorch"


def test_a_variant_measured_on_the_board_is_labelled_measured():
    board = TargetCost(MEASURED, "measured on aarch64 (Raspberry Pi 4 Model B)", 2.0)
    rows = [row("fp32-executorch", 4.0, 1.0, replace(board, ms=4.0), 1.0),
            row("int8-static-executorch", 2.0, 0.5, board, 0.5)]
    rec = recommend(rows, 0.98, 1.0)
    assert rec["basis"] == "measured on aarch64 (Raspberry Pi 4 Model B)" and "target_ratio" not in rec
    assert recommendation_line(rec).endswith("(measured on aarch64 (Raspberry Pi 4 Model B))")


def test_the_targets_latency_budget_is_held_to_the_estimate_off_the_board():
    """rpi4's p99 budget (20 ms) is skipped for an x86 timing; with an estimate it passes or fails on it."""
    target = load_target("rpi4")
    results = [replace(make_result(variant, p99=1.0), host={"machine": "x86_64"})
               for variant in ("fp32-executorch", "int8-static-executorch")]
    report = gate_results(results, target)
    skipped = [c for c in report.checks if c.metric == "p99"]
    assert all(c.skipped and c.detail.startswith("not measured on") for c in skipped)
    gated = apply_to_gate(report, [estimated(30.0), estimated(8.0)], target)
    p99 = {c.model: c for c in gated.checks if c.metric == "p99"}
    assert p99["fp32-executorch"].failed and p99["fp32-executorch"].measured == 30.0
    assert p99["int8-static-executorch"].passed and p99["int8-static-executorch"].detail == "estimated"
    assert "estimated on emulated Cortex-A72" in p99["fp32-executorch"].message
    assert not gated.passed and any("held to the estimate" in note for note in gated.notes)
    untouched = apply_to_gate(report, [TargetCost(HOST, "host timing")] * 2, target)
    assert untouched.checks == report.checks


def test_the_basis_line_says_what_the_column_holds_or_why_it_is_empty():
    off = [TargetCost(HOST, "host timing", note="emulation off (--no-emulate)").to_dict()] * 2
    assert basis_line(off, "rpi4") == ("rpi4 column: no figure for the board (emulation off (--no-emulate)); "
                                       "decisions use this host's timings.")
    mixed = [estimated(3.0).to_dict(), TargetCost(HOST, "host timing", note="not counted: onnx").to_dict()]
    assert basis_line(mixed, "rpi4").startswith(f"rpi4 column: {A72} (ratio vs fp32 of the same format); "
                                                "other rows: not counted: onnx")


def test_without_qemu_the_rows_keep_host_timings_and_say_why(tmp_path, monkeypatch):
    from edgekit.pipeline.target import target_costs

    program = tmp_path / "model.pte"
    program.write_bytes(b"\0" * 64)
    (tmp_path / "model.onnx").write_bytes(b"\0" * 64)
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without qemu-user: no qemu-aarch64 on the PATH
    results = [replace(make_result(v), host={"machine": "x86_64"})
               for v in ("fp32-executorch", "fp32-onnx", "fp32-torchscript")]
    models = [(program, "executorch"), (tmp_path / "model.onnx", "onnx"), (tmp_path / "model.pt", "torchscript")]

    def costs(target: str, emulate: bool = True) -> list[TargetCost]:
        return target_costs(models, results, load_target(target), emulate=emulate, threads=None, progress=print)

    notes = [c.note for c in costs("rpi4")]
    assert all(c.basis == HOST for c in costs("rpi4"))
    assert notes[0].startswith("not counted under emulation: counting instructions needs qemu-aarch64")
    assert notes[1] == notes[0]  # the ONNX row is not counted either, for the same reason
    assert notes[2] == ("not counted: emulated counts run executorch, onnx and ncnn files (edgekit-run) and Python "
                        "bundles of tflite, not torchscript")
    assert {c.note for c in costs("rpi4", emulate=False)} == {"emulation off (--no-emulate)"}
    assert {c.label for c in costs("x86-64")} == {"measured on x86_64"}  # this host is an x86-64 target's board
    board = [replace(r, host={"machine": "aarch64", "board": "Raspberry Pi 4 Model B Rev 1.4"}) for r in results]
    measured = target_costs(models, board, load_target("rpi4"), emulate=True, threads=None, progress=print)
    assert [c.basis for c in measured] == [MEASURED] * 3
    assert measured[0].label == "measured on aarch64 (Raspberry Pi 4 Model B Rev 1.4)" and measured[0].ms == 10.0


def test_auto_falls_back_to_host_timings_and_says_why(tmp_path, monkeypatch):
    from edgekit.quantize.search.auto import Candidate
    from edgekit.quantize.search.target_choice import choice_key, decide_on_target

    (tmp_path / "fp32.pte").write_bytes(b"\0" * 64)
    (tmp_path / "int8.pte").write_bytes(b"\1" * 64)
    cand = Candidate("static-minmax", "static", "executorch", {}, str(tmp_path / "int8.pte"), 64, drop_points=0.1,
                     p50_ms=2.0, meets_budget=True)
    floats = [("executorch", tmp_path / "fp32.pte")]

    def decide(target: str, emulate: bool = True):
        return decide_on_target([cand], floats, load_target(target), 1.0, emulate=emulate, progress=print)

    assert decide("x86-64") == {"not_counted": "emulated counts are for aarch64 boards; x86-64 is x86_64"}
    assert decide("rpi4", emulate=False) == {"not_counted": "emulation off (--no-emulate)"}
    monkeypatch.setenv("PATH", str(tmp_path))  # no qemu-aarch64
    assert decide("rpi4")["not_counted"].startswith("not counted under emulation: counting instructions needs qemu-aarch64")
    assert cand.target is None and cand.meets_budget and choice_key(cand) == 2.0  # the host's p50 decides
    assert decide_on_target([replace(cand, format="torchscript")], [("torchscript", tmp_path / "m.pt")],
                            load_target("rpi4"), 1.0, emulate=True, progress=print) is None
    cand.target = {"ratio_to_float": 0.4}
    assert choice_key(cand) == 0.4
