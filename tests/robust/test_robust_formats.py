"""Each format stands alone; TorchScript files as a source; a quantization that changed nothing is
refused; error hints that work where they are printed (issue 32). Through the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import robust_models
from edgekit.cli.app import app

runner = CliRunner()
BRANCHING = ["robust_models:branching", "--input-shape", "1x16"]


def one_line_error(result, code: int) -> str:
    """The run exited ``code`` with one ``Error:`` line on stderr (warnings aside) and no traceback."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("Warning: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def _manifest(folder) -> dict:
    return json.loads((folder / "manifest.json").read_text())


@pytest.mark.slow  # torch.export's attempt and two exports: ~25 s
def test_a_format_that_fails_is_a_row_and_the_others_are_written(tmp_path):
    """torch.export refuses the model's branch on data (ExecuTorch cannot be made); the ONNX file
    is written and checked, the table shows executorch FAILED with the reason, exit 4 says so, and
    no .pte is left behind. Before, the whole run ended with nothing written."""
    out = tmp_path / "q"
    result = runner.invoke(app, ["quantize", *BRANCHING, "--method", "dynamic", "--format", "onnx,executorch",
                                 "--out", str(out)])
    line = one_line_error(result, 4)
    assert line.startswith("Error: 1 of 2 formats failed (executorch: torch.export cannot capture the model")
    assert "FAILED" in result.stdout and "failed (quantize)" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.onnx", "reference.npz"]
    manifest = _manifest(out)
    assert [f["format"] for f in manifest["files"]] == ["onnx"]
    assert manifest["quantization"]["failed"][0]["format"] == "executorch"

    exported = tmp_path / "e"
    line = one_line_error(runner.invoke(app, ["export", *BRANCHING, "--format", "onnx,executorch",
                                              "--out", str(exported)]), 4)
    assert "executorch: torch.export cannot capture the model" in line
    assert (exported / "model.onnx").is_file() and not list(exported.glob("*.pte"))
    assert _manifest(exported)["metrics"]["failed"][0]["format"] == "executorch"


def test_one_format_failing_alone_is_still_its_own_error(tmp_path):
    """A run of one format that fails ends as it always did: one line, its own exit code."""
    model = tmp_path / "net.pt"
    robust_models.save_scripted_mlp(model)
    line = one_line_error(runner.invoke(app, ["quantize", str(model), "--input-shape", "1x16", "--method", "dynamic",
                                              "--format", "torchscript", "--out", str(tmp_path / "q")]), 2)
    assert "would be the float model unchanged" in line
    assert not (tmp_path / "q").exists()


def test_a_torchscript_file_is_a_source_with_a_warning(tmp_path):
    """A scripted model (.pt): before, "`.` has no manifest.json". Now it is loaded with a warning
    that its code runs, quantized the ONNX way, and its int8 file follows the TorchScript model."""
    import onnxruntime as ort
    import torch

    model = tmp_path / "net.pt"
    robust_models.save_scripted_mlp(model)
    out = tmp_path / "q"
    result = runner.invoke(app, ["quantize", str(model), "--input-shape", "Nx16", "--method", "dynamic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "loading a TorchScript file runs the TorchScript code inside it" in result.stderr
    manifest = _manifest(out)
    assert [(f["format"], f["precision"]) for f in manifest["files"]] == [("onnx", "int8")]
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    want = torch.jit.load(str(model))(torch.from_numpy(x)).detach().numpy()
    got = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    cosine = float((want * got).sum() / (np.linalg.norm(want) * np.linalg.norm(got)))
    assert cosine > 0.99


def test_a_torchscript_quantization_that_changes_nothing_is_refused_beside_onnx(tmp_path):
    """torch.ao quantizes no layer of a ScriptModule: the file came out byte-for-byte the float model
    (0.97x) labelled int8. Now that format is a failed row and the ONNX int8 file is written."""
    model = tmp_path / "net.pt"
    robust_models.save_scripted_mlp(model)
    out = tmp_path / "q"
    result = runner.invoke(app, ["quantize", str(model), "--input-shape", "1x16", "--method", "dynamic",
                                 "--format", "torchscript,onnx", "--out", str(out)])
    line = one_line_error(result, 4)
    assert "torchscript: int8 TorchScript of" in line and "would be the float model unchanged" in line
    assert not (out / "model.pt").exists() and (out / "model.onnx").is_file()


def test_a_pt_file_without_torchscript_code_says_what_to_give(tmp_path):
    import torch

    torch.save(robust_models.Mlp().state_dict(), tmp_path / "weights.pt")
    line = one_line_error(runner.invoke(app, ["quantize", str(tmp_path / "weights.pt"), "--input-shape", "1x16",
                                              "--method", "dynamic", "--out", str(tmp_path / "q")]), 2)
    assert "without TorchScript code" in line and "package.module:factory with --state-dict weights.pt" in line


def test_the_internal_error_hint_puts_debug_where_it_works():
    """`--debug` is edgekit's own option: the hint printed with an internal error says
    `edgekit --debug CMD ...` (`edgekit CMD ... --debug` is refused as "No such option")."""
    from edgekit.cli.common import handles_errors

    demo = typer.Typer()

    @demo.callback()
    def root() -> None:
        pass

    @demo.command("quantize")
    @handles_errors
    def quantize_command() -> None:
        raise RuntimeError("something edgekit did not expect")

    result = runner.invoke(demo, ["quantize"])
    assert result.exit_code == 1
    assert "(rerun as `edgekit --debug quantize ...` for the traceback)" in result.stderr
    assert "--debug" in runner.invoke(app, ["--help"]).stdout  # the option the hint names exists there
    assert runner.invoke(app, ["--debug", "quantize", "--help"]).exit_code == 0
