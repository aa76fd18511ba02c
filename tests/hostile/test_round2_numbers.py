"""Issue 19, round two: numbers and OS errors, through the real CLI.

1. Numbers in files: a 5,000-digit integer, a 400-digit one, a float that overflows to infinity,
   NaN where a finite number belongs, nesting thousands of levels deep, in every file edgekit
   reads (bench/gate results, manifests, bundle.json, Hugging Face configs, target and budget
   TOML, ``--set`` values). Each is one ``Error: <file> is malformed: ...`` line and exit 2; a
   merely absurd figure (a p99 of 1e300 ms) is refused by the schema naming the field.
2. OS errors: a path component of 300 characters (ENAMETOOLONG) as an output or an input is one
   line, exit 2; a full disk during quantize is one line, exit 1, nothing half-written.

Every CLI case checks the exit code, exactly one ``Error:`` line, no traceback, nothing left under
the output name, and the workspace unchanged (``corpus.hostile``).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corpus.hostile import assert_one_line_error, child_pids, leftovers, snapshot
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
TESTS = Path(__file__).resolve().parent.parent
CORPUS = TESTS / "corpus"
REPO = TESTS.parent
CALIB_DIGITS = REPO / "calib_data" / "digits"

HUGE = "1" + "0" * 4999  # 5,000 digits: past Python's int/str conversion limit
LONG = "9" * 400  # 400 digits: a float() of it overflows
DEEP_JSON = "[" * 5000 + "]" * 5000
DEEP_TOML = "[" * 3000 + "]" * 3000


@pytest.fixture(scope="module")
def bundle(digits_fp32_export, tmp_path_factory) -> Path:
    from edgekit.bundle.build import build_bundle

    return build_bundle(digits_fp32_export, "rpi4", tmp_path_factory.mktemp("r2-bundle") / "rpi4", archive=False)


# -- what the cases are made of -----------------------------------------------------------------------


def _sub(text: str, pattern: str, value: str) -> str:
    """``text`` with the first ``"key": number`` / ``key = value`` match of ``pattern`` given ``value``."""
    new, count = re.subn(pattern, lambda m: m.group(1) + value, text, count=1)
    assert count == 1, pattern
    return new


def _bench_file(value: str, key: str = "p99"):
    def build(w: Path) -> Path:
        text = (CORPUS / "bench" / "good.json").read_text()
        path = w / f"bench-{key}.json"
        path.write_text(_sub(text, rf'("{key}": )[-0-9.e]+', value))
        return path

    return build


def _bench_deep(w: Path) -> Path:
    text = (CORPUS / "bench" / "good.json").read_text()
    path = w / "bench-deep.json"
    path.write_text(text.replace('"notes": []', f'"notes": {DEEP_JSON}', 1))
    return path


def _manifest(source: str, pattern: str, value: str):
    def build(w: Path, artifacts: dict) -> Path:
        folder = w / f"{source}-edited"
        shutil.copytree(artifacts[source], folder)
        text = (folder / "manifest.json").read_text()
        (folder / "manifest.json").write_text(_sub(text, pattern, value))
        return folder

    return build


def _target(pattern: str, value: str):
    def build(w: Path) -> Path:
        path = w / "board.toml"
        path.write_text(_sub((REPO / "targets" / "rpi4.toml").read_text(), pattern, value))
        return path

    return build


def _budgets(body: str):
    def build(w: Path) -> Path:
        path = w / "budgets.toml"
        path.write_text(body)
        return path

    return build


def _hf(text: str):
    def build(w: Path) -> Path:
        path = w / "config.json"
        path.write_text(text)
        return path

    return build


def _bundle_json(value: str):
    def build(w: Path, artifacts: dict) -> Path:
        folder = w / "bundle-edited"
        shutil.copytree(artifacts["bundle"], folder)
        path = folder / "bundle.json"
        path.write_text(_sub(path.read_text(), r'("threads": )\d+', value))
        sums = folder / "SHA256SUMS"  # consistent, as an attacker's bundle is: only reading it can tell
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        sums.write_text(re.sub(r"^[0-9a-f]{64}(\s+\*?bundle\.json)$", lambda m: digest + m.group(1),
                               sums.read_text(), flags=re.M))
        return folder

    return build


HF_OK = '"model_type": "bert", "vocab_size": 100, "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8'

BUILDERS = {
    # bench / gate results
    "bench_huge_runs": _bench_file(HUGE, "runs"),
    "bench_long_p99": _bench_file(LONG),
    "bench_inf_p99": _bench_file("1e400"),
    "bench_absurd_p99": _bench_file("1e300"),
    "bench_int64_bytes": _bench_file("9223372036854775808", "bytes"),
    "bench_deep": _bench_deep,
    # target profiles
    "target_huge_cores": _target(r"(cores = )\d+", HUGE),
    "target_long_ram": _target(r"(ram_mb = )\d+", LONG),
    "target_int64_threads": _target(r"(threads = )\d+", "9223372036854775808"),
    "target_inf_budget": _target(r"(max_size_mb = )[0-9.]+", "1e400"),
    "target_deep_isa": _target(r"(isa = )\[[^\]]*\]", DEEP_TOML),
    "target_deep_table": _target(r"(max_p99_ms = )[0-9.]+", "{a = " * 60 + "1" + "}" * 60),
    # project budget files
    "budgets_huge": _budgets(f"[budgets]\nmax_size_mb = {HUGE}\n"),
    "budgets_long": _budgets(f"[budgets]\nmax_p99_ms = {LONG}\n"),
    "budgets_inf": _budgets("[budgets]\nmax_p99_ms = 1e400\n"),
    "budgets_deep": _budgets(f"[budgets]\nmax_p99_ms = {DEEP_TOML}\n"),
    "budgets_deep_keys": _budgets("[budgets]\n" + ".".join(["m"] * 200) + " = 1\n"),
    # Hugging Face configs
    "hf_huge": _hf("{" + HF_OK + f', "num_hidden_layers": {HUGE}' + "}"),
    "hf_long": _hf("{" + HF_OK + f', "max_position_embeddings": {LONG}' + "}"),
    "hf_nan": _hf("{" + HF_OK + ', "layer_norm_eps": NaN}'),
    "hf_inf": _hf("{" + HF_OK + ', "rope_theta": 1e400}'),
    "hf_deep": _hf("{" + HF_OK + f', "id2label": {DEEP_JSON}' + "}"),
}
ARTIFACT_BUILDERS = {
    "manifest_huge_bytes": _manifest("ckpt", r'("bytes": )\d+', HUGE),
    "manifest_long_width": _manifest("ckpt", r'("width": )\d+', LONG),
    "manifest_int64_dim": _manifest("ckpt", r'("shape": \[\s*null,\s*)\d+', "9223372036854775808"),
    "manifest_inf_metric": _manifest("ckpt", r'("accuracy": )[0-9.]+', "1e400"),
    "manifest_deep_config": _manifest("ckpt", r'("config": )', DEEP_JSON + ', "x": '),
    "export_huge_bytes": _manifest("fp32", r'("bytes": )\d+', HUGE),
    "static_long_samples": _manifest("static", r'("samples": )\d+', LONG),
    "bundle_huge_threads": _bundle_json(HUGE),
    "bundle_long_threads": _bundle_json(LONG),
}

MALFORMED = "is malformed"
# (id, argv template, exit code, a piece of the one-line message); {out}: the output name (must not
# appear); {ckpt} {static} {fp32} {bundle}: good artifacts; other {names}: BUILDERS / ARTIFACT_BUILDERS.
CASES = [
    # ---- gate: results, baselines, budget files, targets
    ("gate-result-huge-int", ["gate", "{bench_huge_runs}", "--target", "rpi4", "--json", "{out}"], 2, MALFORMED),
    ("gate-result-400-digit-p99", ["gate", "{bench_long_p99}", "--target", "rpi4", "--json", "{out}"], 2, MALFORMED),
    ("gate-result-inf-p99", ["gate", "{bench_inf_p99}", "--target", "rpi4", "--json", "{out}"], 2, MALFORMED),
    ("gate-result-absurd-p99", ["gate", "{bench_absurd_p99}", "--target", "rpi4", "--json", "{out}"], 2, "timing.p99"),
    ("gate-result-past-int64", ["gate", "{bench_int64_bytes}", "--target", "rpi4", "--json", "{out}"], 2, MALFORMED),
    ("gate-result-deep", ["gate", "{bench_deep}", "--target", "rpi4", "--json", "{out}"], 2, MALFORMED),
    ("gate-baseline-400-digit-p99", ["gate", "{c:bench/good.json}", "--baseline", "{bench_long_p99}", "--max-regression", "10%",
                                     "--json", "{out}"], 2, MALFORMED),
    ("gate-config-huge-int", ["gate", "{c:bench/good.json}", "--config", "{budgets_huge}", "--json", "{out}"], 2, MALFORMED),
    ("gate-config-400-digit", ["gate", "{c:bench/good.json}", "--config", "{budgets_long}", "--json", "{out}"], 2, MALFORMED),
    ("gate-config-inf", ["gate", "{c:bench/good.json}", "--config", "{budgets_inf}", "--json", "{out}"], 2, MALFORMED),
    ("gate-config-deep-array", ["gate", "{c:bench/good.json}", "--config", "{budgets_deep}", "--json", "{out}"], 2, MALFORMED),
    ("gate-config-deep-keys", ["gate", "{c:bench/good.json}", "--config", "{budgets_deep_keys}", "--json", "{out}"], 2, MALFORMED),
    ("gate-target-huge-cores", ["gate", "{c:bench/good.json}", "--target", "{target_huge_cores}", "--json", "{out}"], 2, MALFORMED),
    ("gate-target-inf-budget", ["gate", "{c:bench/good.json}", "--target", "{target_inf_budget}", "--json", "{out}"], 2, MALFORMED),
    # ---- quantize / export / bundle / bench / pipeline: target profiles
    ("quantize-target-huge-cores", ["quantize", "{ckpt}", "--method", "dynamic", "--target", "{target_huge_cores}", "--out", "{out}"], 2, MALFORMED),
    ("quantize-target-400-digit-ram", ["quantize", "{ckpt}", "--method", "dynamic", "--target", "{target_long_ram}", "--out", "{out}"], 2, MALFORMED),
    ("export-target-past-int64", ["export", "{ckpt}", "--target", "{target_int64_threads}", "--out", "{out}"], 2, MALFORMED),
    ("export-target-deep-array", ["export", "{ckpt}", "--target", "{target_deep_isa}", "--out", "{out}"], 2, MALFORMED),
    ("bundle-target-deep-table", ["bundle", "{fp32}", "--target", "{target_deep_table}", "--out", "{out}"], 2, MALFORMED),
    ("bench-target-huge-cores", ["bench", "{fp32}/model.onnx", "--target", "{target_huge_cores}", "--json", "{out}"], 2, MALFORMED),
    ("pipeline-target-inf-budget", ["pipeline", "--checkpoint", "{ckpt}", "--target", "{target_inf_budget}", "--calib", "{calib}",
                                    "--out", "{out}"], 2, MALFORMED),
    ("pipeline-config-huge-int", ["pipeline", "--checkpoint", "{ckpt}", "--config", "{budgets_huge}", "--calib", "{calib}",
                                  "--out", "{out}"], 2, MALFORMED),
    # ---- manifests
    ("quantize-manifest-huge-int", ["quantize", "{manifest_huge_bytes}", "--method", "dynamic", "--out", "{out}"], 2, MALFORMED),
    ("quantize-manifest-400-digit-config", ["quantize", "{manifest_long_width}", "--method", "dynamic", "--out", "{out}"], 2, MALFORMED),
    ("quantize-manifest-past-int64-dim", ["quantize", "{manifest_int64_dim}", "--method", "dynamic", "--out", "{out}"], 2, MALFORMED),
    ("export-manifest-inf-metric", ["export", "{manifest_inf_metric}", "--out", "{out}"], 2, MALFORMED),
    ("export-manifest-deep-config", ["export", "{manifest_deep_config}", "--out", "{out}"], 2, MALFORMED),
    ("info-manifest-huge-int", ["info", "{manifest_huge_bytes}"], 2, MALFORMED),
    ("info-manifest-400-digit", ["info", "{manifest_long_width}"], 2, MALFORMED),
    ("bundle-manifest-huge-int", ["bundle", "{export_huge_bytes}", "--out", "{out}"], 2, MALFORMED),
    ("bench-manifest-huge-int", ["bench", "{export_huge_bytes}/model.onnx", "--json", "{out}"], 2, MALFORMED),
    ("export-quantized-manifest-400-digit", ["export", "{static_long_samples}", "--out", "{out}"], 2, MALFORMED),
    # ---- bundle.json
    ("verify-bundle-json-huge-int", ["verify", "{bundle_huge_threads}"], 2, MALFORMED),
    ("verify-bundle-json-400-digit", ["verify", "{bundle_long_threads}"], 2, MALFORMED),
    # ---- Hugging Face configs
    ("quantize-hf-huge-int", ["quantize", "hf:{hf_huge}", "--method", "dynamic", "--out", "{out}"], 2, MALFORMED),
    ("quantize-hf-400-digit", ["quantize", "hf:{hf_long}", "--method", "dynamic", "--out", "{out}"], 2, MALFORMED),
    ("quantize-hf-nan", ["quantize", "hf:{hf_nan}", "--method", "dynamic", "--out", "{out}"], 2, MALFORMED),
    ("quantize-hf-inf", ["quantize", "hf:{hf_inf}", "--method", "dynamic", "--out", "{out}"], 2, MALFORMED),
    ("export-hf-deep", ["export", "hf:{hf_deep}", "--out", "{out}"], 2, MALFORMED),
    # ---- --set values
    ("train-set-huge-int", ["train", "--set", f"width={HUGE}", "--max-steps", "1", "--out", "{out}"], 2, MALFORMED),
    ("train-set-past-int64", ["train", "--set", "width=9223372036854775808", "--max-steps", "1", "--out", "{out}"], 2, MALFORMED),
    ("train-set-deep", ["train", "--set", f"width={DEEP_JSON}", "--max-steps", "1", "--out", "{out}"], 2, MALFORMED),
    ("train-set-inf", ["train", "--set", "dropout=1e400", "--max-steps", "1", "--out", "{out}"], 2, MALFORMED),
]

NAME = "n" * 300  # one path component of 300 characters: ENAMETOOLONG on every Linux filesystem
TOO_LONG = "File name too long"
OS_CASES = [
    ("export-out-name-too-long", ["export", "{ckpt}", "--out", NAME], 2, TOO_LONG),
    ("export-out-parent-too-long", ["export", "{ckpt}", "--out", f"{NAME}/fp32"], 2, TOO_LONG),
    ("quantize-out-name-too-long", ["quantize", "{ckpt}", "--method", "dynamic", "--out", NAME], 2, TOO_LONG),
    ("train-out-name-too-long", ["train", "--max-steps", "1", "--out", NAME], 2, TOO_LONG),
    ("bundle-out-name-too-long", ["bundle", "{fp32}", "--out", NAME], 2, TOO_LONG),
    ("pipeline-out-name-too-long", ["pipeline", "--checkpoint", "{ckpt}", "--calib", "{calib}", "--out", NAME], 2, TOO_LONG),
    ("bench-json-name-too-long", ["bench", "{fp32}/model.onnx", "--json", f"{NAME}.json"], 2, TOO_LONG),
    ("bench-html-name-too-long", ["bench", "{fp32}/model.onnx", "--html", f"{NAME}.html"], 2, TOO_LONG),
    ("gate-json-name-too-long", ["gate", "{c:bench/good.json}", "--target", "rpi4", "--json", f"{NAME}.json"], 2, TOO_LONG),
    ("gate-junit-name-too-long", ["gate", "{c:bench/good.json}", "--target", "rpi4", "--junit", f"{NAME}.xml"], 2, TOO_LONG),
    ("gate-input-name-too-long", ["gate", f"{NAME}.json", "--target", "rpi4"], 2, TOO_LONG),
    ("gate-config-name-too-long", ["gate", "{c:bench/good.json}", "--config", f"{NAME}.toml"], 2, TOO_LONG),
    ("quantize-input-name-too-long", ["quantize", NAME, "--method", "dynamic", "--out", "{out}"], 2, TOO_LONG),
    ("quantize-calib-name-too-long", ["quantize", "{ckpt}", "--calib", NAME, "--out", "{out}"], 2, TOO_LONG),
    ("quantize-hf-name-too-long", ["quantize", f"hf:{NAME}.json", "--method", "dynamic", "--out", "{out}"], 2, TOO_LONG),
    ("export-target-name-too-long", ["export", "{ckpt}", "--target", f"{NAME}.toml", "--out", "{out}"], 2, TOO_LONG),
    ("info-input-name-too-long", ["info", NAME], 2, TOO_LONG),
    ("verify-input-name-too-long", ["verify", NAME], 2, TOO_LONG),
    ("bench-input-name-too-long", ["bench", f"{NAME}.onnx"], 2, TOO_LONG),
    ("generate-input-name-too-long", ["generate", NAME, "-p", "x"], 2, TOO_LONG),
    ("serve-input-name-too-long", ["serve", NAME], 2, TOO_LONG),
]


def _resolve(argv: list[str], work: Path, artifacts: dict) -> list[str]:
    fixed = {"out": work / "out", "calib": CALIB_DIGITS, "tmp": work, **artifacts}
    made: dict[str, Path] = {}

    def value(name: str) -> str:
        if name.startswith("c:"):
            return str(CORPUS / name[2:])
        if name in fixed:
            return str(fixed[name])
        if name not in made:
            made[name] = BUILDERS[name](work) if name in BUILDERS else ARTIFACT_BUILDERS[name](work, artifacts)
        return str(made[name])

    return [re.sub(r"\{([^}]+)\}", lambda m: value(m.group(1)), arg) for arg in argv]


def _run_case(argv, code, message, tmp_path, monkeypatch, artifacts):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    args = _resolve(argv, work, artifacts)
    before = snapshot(work)
    children = child_pids()
    monkeypatch.chdir(work)
    result = runner.invoke(app, args)
    assert_one_line_error(result, code, message)
    assert "\x1b" not in result.stderr, "a control character reached the terminal"
    assert leftovers(work, "out") == [] and not list(work.glob(".n*")), "a partial output was left behind"
    assert child_pids() <= children, "a child process outlived the command"
    assert snapshot(work) == before, "the command changed the workspace"
    return result


@pytest.fixture()
def artifacts(digits_checkpoint, digits_static, digits_fp32_export, bundle) -> dict:
    return {"ckpt": digits_checkpoint, "static": digits_static, "fp32": digits_fp32_export, "bundle": bundle}


@pytest.mark.parametrize("argv, code, message", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_numbers_in_files_are_one_line_errors(argv, code, message, tmp_path, monkeypatch, artifacts):
    result = _run_case(argv, code, message, tmp_path, monkeypatch, artifacts)
    assert "4300 digits" not in result.stderr and "OverflowError" not in result.stderr


@pytest.mark.parametrize("argv, code, message", [pytest.param(*c[1:], id=c[0]) for c in OS_CASES])
def test_a_path_no_filesystem_takes_is_one_line_exit_2(argv, code, message, tmp_path, monkeypatch, artifacts):
    _run_case(argv, code, message, tmp_path, monkeypatch, artifacts)


# -- the readers themselves -----------------------------------------------------------------------


@pytest.mark.parametrize("text, fragment", [
    (f'{{"a": {HUGE}}}', "5000 digits"),
    (f'{{"a": -{LONG}}}', "400 digits"),
    ('{"a": 18446744073709551616}', "20 digits"),
    ('{"a": 9223372036854775808}', "outside the 64-bit range"),
    ('{"a": 1e400}', "out of range"),
    (f'{{"a": 1{"0" * 400}.5}}', "out of range"),
    (DEEP_JSON, "nested too deeply"),
    ('{"a":' * 40 + "1" + "}" * 40, "nested more than 32 levels"),
])
def test_read_json_bounds_numbers_and_nesting(tmp_path, text, fragment):
    from edgekit.core.errors import InputFileError
    from edgekit.core.fileio import read_json

    path = tmp_path / "doc.json"
    path.write_text(text)
    with pytest.raises(InputFileError, match=re.escape(f"result file {path} is malformed: ") + ".*" + re.escape(fragment)):
        read_json(path, "result file")


def test_read_json_refuses_nan_only_where_finite_numbers_are_asked_for(tmp_path):
    from edgekit.core.errors import InputFileError
    from edgekit.core.fileio import read_json

    path = tmp_path / "doc.json"
    path.write_text('{"a": NaN, "b": -Infinity, "c": 9223372036854775807}')
    doc = read_json(path)  # a manifest's SQNR of identical outputs is Infinity, and edgekit writes it so
    assert doc["b"] == float("-inf") and doc["c"] == 2**63 - 1 and doc["a"] != doc["a"]
    with pytest.raises(InputFileError, match="is malformed: NaN is not allowed here"):
        read_json(path, finite=True)


def test_read_json_and_read_toml_bound_the_size_they_read(tmp_path):
    from edgekit.core.errors import InputFileError
    from edgekit.core.fileio import read_json, read_toml

    big = tmp_path / "big.json"
    big.write_text('{"a": "' + "x" * 2048 + '"}')
    with pytest.raises(InputFileError, match="larger than 1 KiB"):
        read_json(big, max_bytes=1024)
    toml = tmp_path / "big.toml"
    toml.write_text('a = "' + "x" * 2048 + '"\n')
    with pytest.raises(InputFileError, match="larger than 1 KiB"):
        read_toml(toml, max_bytes=1024)


@pytest.mark.parametrize("text, fragment", [
    (f"a = {HUGE}", "thousands of digits"),
    (f"a = {LONG}", "an integer of 400 digits"),
    ("a = 9223372036854775808", "64-bit range"),
    ("a = 0x" + "f" * 17, "64-bit range"),
    ("a = 1e400", "out of range"),
    (f"a = {DEEP_TOML}", "nested too deeply"),
    ("a = " + "[" * 40 + "]" * 40, "nested more than 32"),
    (".".join(["k"] * 100) + " = 1", "nested more than 32"),
])
def test_read_toml_bounds_numbers_and_nesting(tmp_path, text, fragment):
    from edgekit.core.errors import InputFileError
    from edgekit.core.fileio import read_toml

    path = tmp_path / "board.toml"
    path.write_text(text + "\n")
    with pytest.raises(InputFileError, match=re.escape(f"target file {path} is malformed: ") + ".*" + re.escape(fragment)):
        read_toml(path, "target file")


def test_a_checkpoints_metadata_is_read_with_the_same_bounds(digits_checkpoint, tmp_path):
    import torch

    from edgekit.core.errors import InputFileError
    from edgekit.sources.checkpoint import load_payload

    payload = torch.load(digits_checkpoint / "checkpoint.pt", weights_only=True)
    for meta in (f'{{"config": {{"width": {HUGE}}}}}', DEEP_JSON, '{"width": 1e400}'):
        path = tmp_path / "c.pt"
        torch.save({**payload, "meta": meta}, path)
        with pytest.raises(InputFileError, match="has malformed metadata"):
            load_payload(path)


# -- a full disk ----------------------------------------------------------------------------------


# How much of the 600 KiB is taken before the run: each fill makes a different writer hit the
# full disk (ONNX Runtime's quantizer reading a cut float export, the TorchScript exporter's C++
# writer, torch.jit.save's zip writer, which used to abort the whole process).
# Before the fix: (dynamic, 300) an internal ValueError, (dynamic, 520) SIGABRT with a temporary
# folder and lock left, (static, 450) exit 2 "cannot export ... to ONNX", (static, 580) SIGABRT.
FILLS = [("dynamic", 300), ("dynamic", 520), ("static", 450), ("static", 580)]


@pytest.mark.parametrize("method, fill_kb", FILLS)
def test_disk_full_during_quantize_is_exit_1_and_leaves_nothing(digits_checkpoint, small_disk, method, fill_kb):
    (small_disk / "filler").write_bytes(b"\0" * (fill_kb << 10))
    before = snapshot(small_disk)
    argv = ["quantize", str(digits_checkpoint), "--out", str(small_disk / "q")]
    argv += ["--method", "dynamic"] if method == "dynamic" else ["--calib", str(CALIB_DIGITS)]
    done = subprocess.run([sys.executable, "-m", "edgekit", *argv], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])  # a tool error, not the user's input (2), not an abort
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: No space left on device"), done.stderr[-2000:]
    assert "internal error" not in lines[0]
    assert snapshot(small_disk) == before  # nothing half-written, no temporary, no lock file


def test_a_storage_error_wrapped_by_a_library_is_still_reported_as_one(tmp_path):
    """handles_errors: an ENOSPC that an exporter turned into its own error (``raise ... from None``
    keeps it as the context) is exit 1 and says so, whatever the wrapper's exit code."""
    import errno

    import typer

    from edgekit.cli.common import handles_errors
    from edgekit.core.errors import UsageError

    @handles_errors
    def command():
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "model.onnx"))
        except OSError as exc:
            raise UsageError(f"cannot export: {exc}") from None

    app_ = typer.Typer()
    app_.command()(command)
    result = CliRunner().invoke(app_, [])
    assert_one_line_error(result, 1, "No space left on device while writing")
