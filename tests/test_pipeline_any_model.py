"""`edgekit pipeline` for the model a user has: a checkpoint, `package.module:factory`, `hf:`, an
`.onnx` file (tests/formats/test_onnx_zoo_files.py runs the ONNX model zoo's files). The same table,
pipeline.json/md, report.html and gates; a model without labelled data is judged by fidelity,
and what cannot run for it is a row saying why, never silently fewer rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from conftest import one_line_error
from edgekit.cli.app import app

runner = CliRunner()
QUICK = ["--processes", "2", "--min-runs", "3", "--min-time", "0", "--max-p99-ms", "60s", "--max-peak-rss-mb", "8GiB"]
ZOO_ONNX = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"


def report_cells(page: str) -> dict[str, dict[str, str]]:
    """report.html's figures table: variant -> {p50-ratio, size-ratio, baseline} cell texts."""
    out = {}
    for variant, row in re.findall(r'<tr data-variant="([^"]+)">(.*?)</tr>', page):
        out[variant] = dict(re.findall(r'<td class="(p50-ratio|size-ratio|baseline)">([^<]*)</td>', row))
    return out


def test_a_checkpoint_pipeline_is_labelled_with_its_own_model(digits_checkpoint, tmp_path):
    """Before: a digits-cnn checkpoint's table, report and pipeline.json said "digits-mobilenet"."""
    out = tmp_path / "run"
    result = runner.invoke(app, ["pipeline", "--checkpoint", str(digits_checkpoint), "--methods", "dynamic",
                                 "--format", "onnx", "--out", str(out), *QUICK])
    assert result.exit_code == 0, result.output + result.stderr
    summary = json.loads((out / "pipeline.json").read_text())
    assert summary["model"] == "digits-cnn" and summary["metric"] == "accuracy"
    assert "edgekit pipeline: digits-cnn for rpi4" in result.stdout
    page = (out / "report.html").read_text()
    assert "<title>edgekit pipeline: digits-cnn for rpi4</title>" in page
    assert (out / "pipeline.md").read_text().startswith("# edgekit pipeline: digits-cnn for rpi4")
    for text in (result.stdout, result.stderr, page, (out / "pipeline.md").read_text()):
        assert "digits-mobilenet" not in text
    # --source takes the same folder, and names it the same way (decided before any work)
    from edgekit.pipeline.run import PipelineConfig
    from edgekit.pipeline.plan import make_plan

    assert make_plan(PipelineConfig(source=digits_checkpoint, out=tmp_path / "x")).name == "digits-cnn"


@pytest.fixture(scope="module")
def module_run(tmp_path_factory):
    """A user's nn.Module factory through the pipeline, no calibration data, a size budget the
    fp32 TorchScript file breaks."""
    out = tmp_path_factory.mktemp("module") / "run"
    result = runner.invoke(app, ["pipeline", "--source", "tiny_models:tiny_net", "--input-shape", "Nx3x6x6",
                                 "--format", "onnx,torchscript", "--max-size-mb", "6.2KiB", "--out", str(out), *QUICK])
    return out, result


def test_a_user_module_gets_the_table_judged_by_fidelity(module_run):
    out, result = module_run
    assert result.exit_code == 3, result.output + result.stderr  # a budget broke: the gate applies to any model
    summary = json.loads((out / "pipeline.json").read_text())
    assert summary["model"] == "module:tiny_models:tiny_net" and summary["metric"] == "fidelity"
    assert summary["passed"] is False and summary["source"]["kind"] == "module"
    rows = {row["variant"]: row for row in summary["variants"]}
    assert set(rows) == {"fp32-torchscript", "fp32-onnx", "int8-dynamic-torchscript", "int8-dynamic-onnx"}
    assert rows["fp32-torchscript"]["gate"] == "fail" and rows["fp32-onnx"]["gate"] == "pass"
    # no calibration set ships for a user model: static is a skipped row with its reason, not a missing one
    (skip,) = summary["skipped"]
    assert skip["variants"] == ["int8-static-onnx", "int8-static-torchscript"] and "--calib" in skip["reason"]
    header = next(line for line in result.stdout.splitlines() if "variant" in line and "format" in line)
    assert "fidelity" in header and "accuracy" not in header
    for variant in skip["variants"]:
        assert re.search(rf"{variant}\s.*skipped", result.stdout), variant
    assert "Skipped int8-static-onnx, int8-static-torchscript: " in result.stdout
    # fidelity: each int8 file against the float model the factory builds, computed here
    import torch

    from edgekit.formats.evaluation import board_predictor
    from tiny_models import tiny_net

    x = np.random.default_rng(3).standard_normal((5, 3, 6, 6)).astype(np.float32)
    with torch.inference_mode():
        ref = tiny_net().eval()(torch.from_numpy(x)).numpy().ravel()
    for variant, row in rows.items():
        assert row["accuracy"] is None and 0.95 <= row["fidelity"]["cosine"] <= 1.0, variant
        got = board_predictor(row["format"], row["path"])({"input": x}).ravel()
        assert float(got @ ref / np.linalg.norm(got) / np.linalg.norm(ref)) > 0.95, variant


def test_the_report_shows_the_tables_ratios_and_verdict(module_run):
    """Before: report.html held every variant to the first one (fp32-torchscript), not to fp32 of its
    own format, and had no recommendation."""
    out, result = module_run
    summary = json.loads((out / "pipeline.json").read_text())
    page = (out / "report.html").read_text()
    cells = report_cells(page)
    assert set(cells) == {row["variant"] for row in summary["variants"]}
    for row in summary["variants"]:
        low, high = row["p50_ratio_ci"]
        assert cells[row["variant"]] == {"p50-ratio": f"{row['p50_ratio']:.2f}× ({low:.2f}–{high:.2f})",
                                         "size-ratio": f"{row['size_ratio']:.2f}×", "baseline": f"fp32-{row['format']}"}
    from edgekit.pipeline.verdict import recommendation_line

    said = recommendation_line(summary["recommended"])  # what the terminal printed (wrapped there)
    assert " ".join(said.split()) in " ".join(result.stdout.split())
    assert f'<p class="{"recommended" if summary["recommended"] else "plain"}">{said}</p>' in page.replace("&#x27;", "'")
    assert "int8-static-onnx, int8-static-torchscript" in page  # the skipped rows are said there too


def test_static_asked_for_without_calibration_data_stops_before_any_work(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["pipeline", "--source", "tiny_models:tiny_net", "--input-shape", "Nx3x6x6",
                                 "--methods", "dynamic,static", "--out", str(out)])
    line = one_line_error(result, 2)
    assert "static int8 needs calibration data" in line and "--calib FOLDER" in line
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--format", "torchscript"], "only --format onnx applies"),
    (["--methods", "qat"], "QAT needs the PyTorch model"),
    (["--model", "digits-cnn"], "--model and --source both name the model"),
    (["--epochs", "3"], "--epochs trains a zoo model"),
    (["--input-shape", "pixels=1x3x8x8"], "unknown input name(s) pixels"),
])
def test_what_an_onnx_source_cannot_do_is_one_line_before_any_work(args, message, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["pipeline", "--source", str(ZOO_ONNX), *args, "--out", str(out)])
    assert message in one_line_error(result, 2)
    assert not out.exists()


def test_bench_html_ratios_are_against_fp32_of_the_same_format():
    """`bench --html` without a pipeline: each ratio against fp32 of its own format when the run has
    it, else against the first result, and the page says which."""
    from edgekit.bench.html_report import render_html
    from edgekit.records.result import BenchResult, Memory, ModelInfo, Timing

    def result(variant, fmt, kb, p50):
        timing = Timing(10.0, 12.0, p50, p50 * 1.2, p50 * 1.3, p50 * 1.6, p50, p50 * 0.1, p50 * 0.9, p50 * 2, 100, 1.0)
        return BenchResult(ModelInfo(f"out/{variant}/model", fmt, kb * 1024, precision=variant[:4], variant=variant),
                           {"name": "x", "threads": 1}, {}, {}, timing, 1000 / p50, Memory(100.0, 80.0, 20.0),
                           {"machine": "x86_64"})

    RESULTS = [result("fp32-torchscript", "torchscript", 420, 1.9), result("fp32-onnx", "onnx", 410, 1.2),
               result("int8-dynamic-onnx", "onnx", 115, 0.9), result("int8-static-torchscript", "torchscript", 112, 0.8),
               result("int8-static-onnx", "onnx", 110, 0.55)]
    cells = report_cells(render_html(RESULTS))
    # int8-dynamic-onnx: 0.9 ms vs fp32-onnx 1.2 ms (the old page said 0.47x: vs fp32-torchscript's 1.9 ms)
    assert cells["int8-dynamic-onnx"] == {"p50-ratio": "0.75×", "size-ratio": "0.28×", "baseline": "fp32-onnx"}
    assert cells["int8-static-torchscript"] == {"p50-ratio": "0.42×", "size-ratio": "0.27×",
                                                "baseline": "fp32-torchscript"}
    no_fp32_onnx = [r for r in RESULTS if r.model.variant != "fp32-onnx"]
    page = render_html(no_fp32_onnx)
    assert report_cells(page)["int8-static-onnx"]["baseline"] == "fp32-torchscript"
    assert "Variants whose format has no fp32 variant here are held to fp32-torchscript" in page
    verdict = render_html(RESULTS, verdict=["Recommended: int8-static-onnx: 0.46x", "Warning: int8-x is slow"])
    assert '<p class="recommended">Recommended: int8-static-onnx: 0.46x</p>' in verdict
    assert '<p class="warning">Warning: int8-x is slow</p>' in verdict


@pytest.mark.slow
def test_a_transformers_config_gets_the_table(tmp_path):
    pytest.importorskip("transformers")
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "bert", "vocab_size": 500, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 64}))
    out = tmp_path / "run"
    result = runner.invoke(app, ["pipeline", "--source", f"hf:{folder}", "--random-init", "--format", "onnx",
                                 "--out", str(out), *QUICK])
    assert result.exit_code == 0, result.output + result.stderr
    summary = json.loads((out / "pipeline.json").read_text())
    assert summary["model"] == "hf:bert" and summary["metric"] == "fidelity"
    assert [row["variant"] for row in summary["variants"]] == ["fp32-onnx", "int8-dynamic-onnx"]
    assert summary["skipped"][0]["variants"] == ["int8-static-onnx"]
    assert summary["variants"][1]["fidelity"]["cosine"] >= 0.99
    assert "random weights" in result.stderr  # said, since these are no trained weights
