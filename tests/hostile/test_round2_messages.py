"""Issue 19, round two: message quality and the files an artifact carries (the LOW findings).

1. A failing run prints exactly one line: no third-party log lines (torch's pytree notices,
   transformers, torchao, ONNX Runtime) before ``Error:`` (a real process, real stderr).
2. Escape sequences from a bench JSON file or a model's file name never reach the terminal: the
   gate's table and verdict and the bench table show them escaped (and never as rich markup).
3. Every file an artifact carries beside its models (``reference.npz``, ``tokenizer.json``) is in
   its manifest's checksums and verified on load; a derived artifact carries a parent's tokenizer
   only while it is the one the parent's manifest lists.
4. The Python API's config objects refuse a wrong type at construction, naming the field, the
   value and what is allowed (not a raw TypeError/AttributeError later, not silently).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpus.hostile import assert_one_line_error, leftovers, snapshot
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.core.errors import InputFileError, UsageError

runner = CliRunner()
TESTS = Path(__file__).resolve().parent.parent
CORPUS = TESTS / "corpus"
ESCAPES = "\x1b]0;pwned\x07\x1b[31m[red]x[/red]"


# -- 1. one line, nothing else ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["quantize", "export"])
def test_a_failing_hf_build_prints_one_line_and_no_library_logs(tmp_path, command):
    """transformers builds a BERT (importing torchao, whose import logs torch pytree notices) and
    refuses the config: before the fix two ``W... torch/utils/_pytree.py`` lines came first."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 6, "num_attention_heads": 4}))
    args = [command, "hf:config.json", "--out", "out"] + (["--method", "dynamic"] if command == "quantize" else [])
    done = subprocess.run([sys.executable, "-m", "edgekit", *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr[-2000:]
    assert "not a multiple of the number of attention heads" in lines[0] and "internal error" not in lines[0]
    assert done.stdout == "" and not (tmp_path / "out").exists()
    if command == "export":  # the quiet is edgekit's default, not a loss: --debug lets everything through
        debug = subprocess.run([sys.executable, "-m", "edgekit", "--debug", *args], cwd=tmp_path, capture_output=True,
                               text=True, timeout=600)
        assert debug.returncode == 2 and "Traceback" in debug.stderr




# -- 2. escape sequences ------------------------------------------------------------------------------


def _hostile_bench(tmp_path: Path) -> Path:
    doc = json.loads((CORPUS / "bench" / "good.json").read_text())
    result = doc["results"][0]
    result["model"]["variant"] = "v" + ESCAPES
    result["model"]["path"] = "/models/" + ESCAPES + ".onnx"
    result["target"] = "rpi4" + ESCAPES
    result["mode"] = "local" + ESCAPES
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("budget, code", [("1000", 0), ("0.001", 3)])
def test_gate_never_sends_a_files_escape_sequences_to_the_terminal(tmp_path, budget, code):
    path = _hostile_bench(tmp_path)
    result = runner.invoke(app, ["gate", str(path), "--max-p99-ms", budget, "--max-size-mb", "100"])
    assert result.exit_code == code, result.output
    for stream in (result.stdout, result.stderr):
        assert "\x1b" not in stream and "\x07" not in stream, repr(stream[-500:])
    assert "\\x1b]0;pwned\\x07" in result.stdout  # shown, escaped
    assert "[red]x[/red]" in result.stdout  # as text, not read as markup


def test_gate_reports_carry_no_escape_sequences_either(tmp_path):
    path = _hostile_bench(tmp_path)
    result = runner.invoke(app, ["gate", str(path), "--max-p99-ms", "0.001", "--markdown", str(tmp_path / "g.md"),
                                 "--junit", str(tmp_path / "g.xml"), "--json", str(tmp_path / "g.json")])
    assert result.exit_code == 3, result.output
    import xml.etree.ElementTree as ET

    ET.parse(tmp_path / "g.xml")  # still XML
    for name in ("g.md", "g.xml"):
        assert "\x1b" not in (tmp_path / name).read_text()
    assert "\x1b" not in json.loads((tmp_path / "g.json").read_text())["verdict"]


def test_the_bench_table_escapes_a_model_file_name(digits_fp32_export, tmp_path):
    model = tmp_path / "m\x1b]0;pwned\x07\x1b[31m[bold]x.onnx"  # a file name holds no "/"
    shutil.copyfile(digits_fp32_export / "model.onnx", model)
    result = runner.invoke(app, ["bench", str(model), "--min-runs", "3", "--min-time", "0", "--warmup", "1"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout, repr(result.stdout[-800:])
    assert "[bold]x" in result.stdout.replace("\n", "")  # not read as markup


# -- 3. the files an artifact carries ------------------------------------------------------------------


def test_a_fresh_artifact_lists_its_reference_data_with_its_checksum(digits_fp32_export, digits_static):
    from edgekit.core.fileio import sha256_file

    for folder in (digits_fp32_export, digits_static):
        manifest = json.loads((folder / "manifest.json").read_text())
        listed = {e["path"]: e for e in manifest["extra_files"]}
        assert listed["reference.npz"]["sha256"] == sha256_file(folder / "reference.npz")
        assert listed["reference.npz"]["bytes"] == (folder / "reference.npz").stat().st_size


@pytest.fixture()
def with_tokenizer(digits_checkpoint, tmp_path) -> Path:
    """A checkpoint artifact carrying a tokenizer.json, stamped by edgekit (its manifest lists it)."""
    from edgekit.formats.artifacts import finalize, load_manifest

    folder = tmp_path / "work" / "ckpt"
    shutil.copytree(digits_checkpoint, folder)
    (folder / "tokenizer.json").write_text(json.dumps({"kind": "char", "max_vocab": 128, "vocab": ["<pad>", "<unk>", "a"]}))
    _, manifest = load_manifest(folder, verify=False)
    finalize(manifest, folder)
    return folder


def _tampered_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").write_text(json.dumps({"kind": "char", "max_vocab": 128, "vocab": ["<pad>", "<unk>", "z"]}))


def test_a_changed_tokenizer_is_refused_by_every_stage(with_tokenizer, monkeypatch, tmp_path):
    work = with_tokenizer.parent
    _tampered_tokenizer(with_tokenizer)
    before = snapshot(work)
    monkeypatch.chdir(work)
    for args in (["quantize", "ckpt", "--method", "dynamic", "--out", "out"], ["export", "ckpt", "--out", "out"]):
        result = runner.invoke(app, args)
        assert_one_line_error(result, 2, "tokenizer.json does not match its manifest checksum")
        assert leftovers(work, "out") == [] and snapshot(work) == before


def test_a_tokenizer_added_after_the_fact_is_refused(digits_checkpoint, tmp_path, monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(digits_checkpoint, work / "ckpt")
    (work / "ckpt" / "tokenizer.json").write_text(json.dumps({"kind": "char", "vocab": ["a"]}))
    monkeypatch.chdir(work)
    result = runner.invoke(app, ["export", "ckpt", "--out", "out"])
    assert_one_line_error(result, 2, "is not covered by")
    assert leftovers(work, "out") == []


def test_the_tokenizer_readers_check_it_too(with_tokenizer, tmp_path):
    from edgekit.formats.artifacts import load_manifest, parent_ref
    from edgekit.formats.artifacts import carry_tokenizer
    from edgekit.llm.lm_runtime import load_tokenizer

    folder, manifest = load_manifest(with_tokenizer)
    assert load_tokenizer(folder, manifest).vocab == ("<pad>", "<unk>", "a")
    _tampered_tokenizer(with_tokenizer)
    with pytest.raises(InputFileError, match="does not match its manifest checksum"):
        load_tokenizer(folder, manifest)
    dest = tmp_path / "derived"
    dest.mkdir()
    with pytest.raises(InputFileError, match="does not match its manifest checksum"):
        carry_tokenizer(parent_ref(folder, manifest), dest)  # a derived artifact never inherits a changed one
    assert not (dest / "tokenizer.json").exists()


def test_replaced_reference_data_is_refused(digits_fp32_export, tmp_path, monkeypatch):
    """A valid reference.npz with other numbers (parity would be checked against them)."""
    work = tmp_path / "work"
    folder = work / "fp32"
    shutil.copytree(digits_fp32_export, folder)
    with np.load(folder / "reference.npz") as data:
        arrays = {k: data[k] * 0 + 1 for k in data.files}
    np.savez(folder / "reference.npz", **arrays)
    before = snapshot(work)
    monkeypatch.chdir(work)
    for args in (["bundle", "fp32", "--out", "out"], ["bench", "fp32/model.onnx", "--json", "out"]):
        result = runner.invoke(app, args)
        assert_one_line_error(result, 2, "reference data")
        assert "does not match its manifest checksum" in result.stderr
        assert leftovers(work, "out") == [] and snapshot(work) == before


# -- 4. the Python API's config objects ---------------------------------------------------------------


def _api():
    from edgekit import api

    return api


CONFIG_CASES = [
    # (config, field, bad value); before the fix each was accepted, or failed later with a raw
    # TypeError/AttributeError, or named something else ("unknown format 'o'" for formats="onnx")
    ("TrainConfig", "device", 5),
    ("TrainConfig", "grad_checkpoint", "yes"),
    ("TrainConfig", "resume", "no"),
    ("TrainConfig", "model", 5),
    ("TrainConfig", "data", 5),
    ("TrainConfig", "model_config", {1: 2}),
    ("DynamicConfig", "formats", "onnx"),
    ("DynamicConfig", "per_channel", "yes"),
    ("DynamicConfig", "exclude", "conv1"),
    ("DynamicConfig", "exclude", [1, 2]),
    ("StaticConfig", "calib", 123),
    ("StaticConfig", "calib_cache", "no"),
    ("StaticConfig", "op_types", "MatMul"),
    ("StaticConfig", "smooth", 1),
    ("QatConfig", "seed", "x"),
    ("QatConfig", "per_channel", 1),
    ("PipelineConfig", "methods", "static"),
    ("PipelineConfig", "out", 5),
    ("PipelineConfig", "calib", 5),
    ("PipelineConfig", "target", None),
    ("PipelineConfig", "force", "yes"),
    ("PipelineConfig", "budget_overrides", [1]),
]


@pytest.mark.parametrize("config, name, value", CONFIG_CASES, ids=[f"{c}.{n}={v!r}" for c, n, v in CONFIG_CASES])
def test_a_wrong_type_in_a_config_is_a_usage_error_naming_it(config, name, value):
    cls = getattr(_api(), config)
    with pytest.raises(UsageError) as caught:
        cls(**{name: value})
    message = str(caught.value)
    assert f"{config}.{name} must be " in message and repr(value)[:20] in message, message
    assert "\n" not in message


@pytest.mark.parametrize("make, fragment", [
    (lambda api: api.QatConfig(lr=math.inf), "QAT learning rate must be positive"),
    (lambda api: api.QatConfig(seed=-1), "QAT seed must be an integer between 0 and"),
])
def test_a_config_value_out_of_range_is_refused(make, fragment):
    with pytest.raises(UsageError, match=fragment):
        make(_api())


def test_a_str_is_no_tuple_but_a_list_is_and_a_str_is_a_path():
    """``formats="onnx"`` is refused by name (it read as the formats 'o', 'n', ...); a list for a
    tuple field, a str for a Path, an int for a float are what callers write, and are taken."""
    api = _api()
    with pytest.raises(UsageError, match=r"DynamicConfig.formats must be a tuple \(or list\) of strings, got 'onnx'"):
        api.DynamicConfig(formats="onnx")
    assert api.DynamicConfig(formats=["onnx"], exclude=["conv1"]).formats == ["onnx"]
    assert api.TrainConfig(lr=1, model_config={"width": 8}).lr == 1
    assert api.PipelineConfig(out="runs/x", calib=None).out == "runs/x"
    assert api.StaticConfig(calib=None).calib is None
