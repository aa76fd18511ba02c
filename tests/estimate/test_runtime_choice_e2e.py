"""`edgekit pipeline --target rpi5` counts every format that runs on the board on its emulated Cortex-A76
(ONNX and ncnn each in edgekit-run and in a Python bundle with its runtime's wheel), ranks them by
instructions per inference and recommends the cheapest (edgekit.pipeline.choice).

Checked independently: both ncnn counts the pipeline reports equal `edgekit bench BUNDLE --emulate` on a
native and a Python bundle of the same file; the printed ratios are recomputed from the printed counts; the recommendation
is the variant with the fewest instructions among those within the accuracy budget, found from the
per-variant rows of pipeline.json. Needs root, qemu-user and the cached arm64 rootfs with the ncnn and
onnxruntime venvs (`bash benchmarks/emulated_verify.sh`, which .ci/run calls first); downloads nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

pytest.importorskip("ncnn")
pytest.importorskip("pnnx")

runner = CliRunner()
PREPARE = "run `bash benchmarks/emulated_verify.sh` first (.ci/run does); this test downloads nothing"
QUICK = ["--processes", "1", "--min-runs", "3", "--min-time", "0", "--no-reference", "--max-p99-ms", "10s",
         "--max-peak-rss-mb", "8GiB"]
FORMATS = "onnx,ncnn,torchscript"  # two counted in edgekit-run and in a Python bundle, one not counted at all
ROW = re.compile(r"^\| (\S+) \| (\S+) \| ([^|]+) \| ([\d,]+) \| ([\d.]+)x \| ([\d.]+) \| ([^|]*) \|$")


@pytest.fixture(scope="module")
def ncnn_counting_ready() -> None:
    from edgekit import formats
    from edgekit.bundle.requirements import board_dists, host_version
    from edgekit.emulate.rootfs import default_cache_dir, find_rootfs
    from edgekit.emulate.venv import MARKER, VENVS_DIR, requirements_key

    if os.geteuid() != 0:
        pytest.skip("counting a Python bundle under emulation needs root (the rootfs's sandbox)")
    missing = [tool for tool in ("qemu-aarch64", "unshare") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed; apt-get install qemu-user")
    fs = find_rootfs(default_cache_dir(), "bookworm")
    if fs is None:
        pytest.skip(f"no cached bookworm arm64 rootfs in {default_cache_dir()}; {PREPARE}")
    for name in ("ncnn", "onnx"):
        entry = formats.get(name)
        text = "".join(f"{dist}=={host_version(dist)}\n" for dist in board_dists(entry))  # what its bundle pins
        key = requirements_key(text, [], fs.python, entry.board.no_deps)
        if not (fs.path / VENVS_DIR.lstrip("/") / key / MARKER).is_file():
            pytest.skip(f"no cached venv for an {name} bundle's requirements in {fs.path}; {PREPARE}")


@pytest.mark.slow
def test_pipeline_recommends_the_runtime_with_the_fewest_instructions_on_rpi5(ncnn_counting_ready, digits_checkpoint,
                                                                               tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["pipeline", "--checkpoint", str(digits_checkpoint), "--methods", "static",
                                 "--format", FORMATS, "--target", "rpi5", "--out", str(out), *QUICK])
    assert result.exit_code == 0, result.output + result.stderr
    summary = json.loads((out / "pipeline.json").read_text())
    counts = {row["variant"]: row["target"]["instructions"] for row in summary["variants"]
              if row["target"]["basis"] != "host"}
    assert {"fp32-onnx", "int8-static-onnx", "fp32-ncnn", "int8-static-ncnn"} <= set(counts), summary["variants"]

    in_python = {row["variant"]: row["in_python"]["instructions"] for row in summary["variants"]
                 if (row.get("in_python") or {}).get("basis") not in (None, "host")}
    assert set(in_python) == {"fp32-onnx", "int8-static-onnx", "fp32-ncnn", "int8-static-ncnn"}, summary["variants"]

    # the ncnn counts are edgekit-run's on the file (`edgekit bench FILE --emulate`: the same seeded inputs, the
    # run having no reference data) and a Python bundle's own wheel's (`edgekit bench BUNDLE --emulate`)
    bundle = tmp_path / "bundle"
    done = runner.invoke(app, [str(a) for a in ["bundle", out / "export" / "int8-static", "--format", "ncnn",
                                                "--target", "rpi5", "--out", bundle]])
    assert done.exit_code == 0, done.output
    param = next((out / "export" / "int8-static").glob("*.param"))
    for runtime, model, expected in (("native", [param, "--target", "rpi5"], counts["int8-static-ncnn"]),
                                     ("python", [bundle], in_python["int8-static-ncnn"])):
        done = runner.invoke(app, [str(a) for a in ["bench", *model, "--emulate", "--emulate-runs", "4", "--json",
                                                    tmp_path / f"{runtime}.json"]])
        assert done.exit_code == 0, done.output
        bench = json.loads((tmp_path / f"{runtime}.json").read_text())["results"][0]["emulated"]
        assert bench["runner"].startswith("edgekit-run") == (runtime == "native"), bench["runner"]
        # a Python bundle's count may move by a few instructions with the number of timed calls (CI saw 310,017 vs
        # 310,019: the interpreter's per-call state), so two independent counts agree to 0.01 %, not to the last one
        assert bench["cpu"] == "cortex-a76"
        assert bench["instructions"]["per_run"] == pytest.approx(expected, rel=1e-4)

    # each ONNX variant's Python bundle runs ONNX Runtime's wheel: the same kernels through another build of the
    # library, plus Python's per-call work: close to edgekit-run's count, not equal
    for variant in ("fp32-onnx", "int8-static-onnx"):
        assert 0.95 < in_python[variant] / counts[variant] < 1.5, (variant, in_python[variant], counts[variant])

    # the ranking as pipeline.md prints it: every count once, its ratio to the cheapest recomputed here
    printed = [ROW.match(line).groups() for line in (out / "pipeline.md").read_text().splitlines() if ROW.match(line)]
    ranked = {(variant, "(Python)" in runs_in): int(instructions.replace(",", ""))
              for variant, _, runs_in, instructions, *_ in printed}
    expected = {**{(v, False): n for v, n in counts.items()}, **{(v, True): n for v, n in in_python.items()}}
    assert ranked == {key: expected[key] for key in ranked} and len(ranked) == len(printed)
    assert set(ranked) >= {(variant, python) for variant in ("fp32-onnx", "int8-static-onnx", "fp32-ncnn",
                                                             "int8-static-ncnn") for python in (False, True)}
    cheapest = min(ranked.values())
    for variant, _, runs_in, instructions, shown, _, _ in printed:
        assert float(shown) == pytest.approx(int(instructions.replace(",", "")) / cheapest, abs=0.0051)
        assert runs_in.strip() in ("edgekit-run (no Python)", "onnxruntime (Python)", "ncnn (Python)")

    # the recommendation: the fewest instructions among the counts within the 1 pt accuracy budget
    within = {(row["variant"], python): n for row in summary["variants"] for (variant, python), n in ranked.items()
              if variant == row["variant"] and row["gate"] != "fail"
              and row["accuracy"] >= summary["float_accuracy"] - 0.01}
    best, python = min(within, key=lambda key: (within[key], key[1]))
    choice = summary["runtime_choice"]["recommended"]
    assert (choice["variant"], choice["python"]) == (best, python) and choice["instructions"] == within[best, python]
    stdout = " ".join(result.stdout.split())
    assert f"Fastest runtime for rpi5: {best} in " in stdout
    assert ("--runtime native" in choice["bundle"]) == (not python)
    assert "from emulated counts on Cortex-A76, not timed on a board" in stdout
    assert "Python bundles include Python's per-call work" in stdout
    # the format no runtime is counted for: one line saying why, the rest ranked
    assert re.search(r"Not counted on Cortex-A76: fp32-torchscript, int8-static-torchscript: emulated counts run "
                     r"[\w, ]+ files \(edgekit-run\) and Python bundles of", stdout)
