"""edgekit bundle: layout, checksums, reproducible archive, standalone output check, target checks, wheels."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.formats.artifacts import load_manifest
from edgekit.bundle import layout
from edgekit.board import BUNDLED_NAME
from edgekit.board.check import read_output
from edgekit.board.entries import entry_script, package_dir, package_files
from edgekit.bundle.build import build_bundle, tarball_path
from edgekit.bundle.requirements import download_error, pip_download_argv
from edgekit.bundle.verify import verify_checksums
from edgekit.cli.app import app
from edgekit.core.errors import EdgekitError, InputFileError, UsageError
from edgekit.core.fileio import sha256_file

runner = CliRunner()
CORE_FILES = {"manifest.json", "reference.npz", "runner.py", "check_outputs.py", "requirements.txt",
              "bundle.json", "README.txt", "SHA256SUMS"}
# the board package the entry scripts run (edgekit.board), byte for byte
BOARD_FILES = {BUNDLED_NAME, *(f"{BUNDLED_NAME}/{rel.as_posix()}" for rel in package_files()),
               *(f"{BUNDLED_NAME}/{rel.parent.as_posix()}" for rel in package_files() if rel.parent != Path("."))}
# ONNX bundles also carry the standalone server (edgekit.bundle.serving)
SERVE_FILES = {"serve.py", "requirements-serve.txt", "edgekit_serve",
               *(f"edgekit_serve/{name}" for name in __import__("edgekit.serve").serve.STANDALONE)}


@pytest.fixture(scope="module")
def int8_export(digits_static, tmp_path_factory) -> Path:
    """The static int8 digits model exported for rpi4 as ONNX and TorchScript."""
    from edgekit.export.api import export

    out = tmp_path_factory.mktemp("bundle-src") / "int8"
    export(digits_static, out, formats=("onnx", "torchscript"), target="rpi4")
    return out


@pytest.fixture(scope="module")
def onnx_bundle(int8_export, tmp_path_factory) -> Path:
    return build_bundle(int8_export, "rpi4", tmp_path_factory.mktemp("bundle") / "rpi4")


def _copy_export(src: Path, dest: Path, **manifest_changes) -> Path:
    """A copy of an export whose manifest.json says something else (a real file edit, no mocks)."""
    shutil.copytree(src, dest)
    data = json.loads((dest / "manifest.json").read_text())
    for key, value in manifest_changes.items():
        if key == "details":
            for entry in data["files"]:
                entry["details"].update(value)
        else:
            data[key] = value
    (dest / "manifest.json").write_text(json.dumps(data))
    return dest


def _host_version(dist: str) -> str:
    return metadata.version(dist).split("+")[0]


def test_bundle_layout(onnx_bundle, int8_export):
    names = {p.relative_to(onnx_bundle).as_posix() for p in onnx_bundle.rglob("*")}
    assert names == CORE_FILES | {"model.onnx"} | SERVE_FILES | BOARD_FILES
    assert (onnx_bundle / "runner.py").read_text() == entry_script("runner.py")
    for rel in package_files():
        assert (onnx_bundle / BUNDLED_NAME / rel).read_bytes() == (package_dir() / rel).read_bytes()
    assert os.access(onnx_bundle / "runner.py", os.X_OK) and os.access(onnx_bundle / "check_outputs.py", os.X_OK)
    assert sha256_file(onnx_bundle / "model.onnx") == sha256_file(int8_export / "model.onnx")
    assert (onnx_bundle / "reference.npz").read_bytes() == (int8_export / "reference.npz").read_bytes()

    folder, manifest = load_manifest(onnx_bundle)  # verifies the one model file it lists
    assert manifest.kind == "export" and [f.path for f in manifest.files] == ["model.onnx"]

    info = layout.read_bundle_json(onnx_bundle)
    assert info["schema"] == "edgekit.bundle" and info["schema_version"] == 1
    assert (info["target"], info["arch"], info["python_platform"]) == ("rpi4", "aarch64", "manylinux_2_28_aarch64")
    assert (info["model"], info["format"], info["precision"], info["variant"]) == (
        "model.onnx", "onnx", "int8", "int8-static-onnx")
    assert info["runtime"] == {"name": "onnxruntime", "version": _host_version("onnxruntime")}
    assert info["model_sha256"] == sha256_file(onnx_bundle / "model.onnx")
    assert info["override"] is None and info["wheels"] == [] and info["edgekit_version"] and info["created"]

    requirements = (onnx_bundle / "requirements.txt").read_text()
    assert "# platform: manylinux_2_28_aarch64" in requirements
    pins = [line for line in requirements.splitlines() if line and not line.startswith("#")]
    assert pins == [f"numpy=={_host_version('numpy')}", f"onnxruntime=={_host_version('onnxruntime')}"]

    readme = (onnx_bundle / "README.txt").read_text()
    assert "pip install --no-index --find-links wheels -r requirements.txt" in readme
    assert "python3 runner.py model.onnx --target rpi4" in readme and "sha256sum -c SHA256SUMS" in readme


def test_checksums_cover_every_file_and_sha256sum_agrees(onnx_bundle):
    sums = verify_checksums(onnx_bundle)
    folders = {name for name in SERVE_FILES | BOARD_FILES if (onnx_bundle / name).is_dir()}
    assert set(sums) == (CORE_FILES - {"SHA256SUMS"}) | {"model.onnx"} | ((SERVE_FILES | BOARD_FILES) - folders)
    if shutil.which("sha256sum"):
        proc = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=onnx_bundle, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_tarball_unpacks_to_the_same_folder(onnx_bundle, tmp_path):
    archive = tarball_path(onnx_bundle)
    assert archive == onnx_bundle.parent / "rpi4.tar.gz" and archive.is_file()
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        assert all(m.name == "rpi4" or m.name.startswith("rpi4/") for m in members)
        assert all(m.uid == 0 and m.mtime > 0 for m in members)
        tar.extractall(tmp_path, filter="data")
    verify_checksums(tmp_path / "rpi4")
    for path in onnx_bundle.rglob("*"):
        if path.is_file():
            assert (tmp_path / "rpi4" / path.relative_to(onnx_bundle)).read_bytes() == path.read_bytes()


def test_same_export_and_time_give_identical_bytes(int8_export, tmp_path):
    stamp = "2030-01-02T03:04:05+00:00"
    first = build_bundle(int8_export, "rpi4", tmp_path / "a" / "rpi4", created=stamp)
    second = build_bundle(int8_export, "rpi4", tmp_path / "b" / "rpi4", created=stamp)
    assert (first / "SHA256SUMS").read_bytes() == (second / "SHA256SUMS").read_bytes()
    assert tarball_path(first).read_bytes() == tarball_path(second).read_bytes()


def test_rebuilding_replaces_only_what_edgekit_wrote(int8_export, tmp_path):
    out = build_bundle(int8_export, "rpi4", tmp_path / "rpi4")
    build_bundle(int8_export, "rpi4", out)  # a bundle edgekit wrote is replaced
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="holds notes.txt, which edgekit did not write"):
        build_bundle(int8_export, "rpi4", out)
    assert (out / "notes.txt").read_text() == "mine"
    build_bundle(int8_export, "rpi4", out, force=True)  # --force replaces it
    assert not (out / "notes.txt").exists()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="holds notes.txt"):
        build_bundle(int8_export, "rpi4", precious)
    assert (precious / "notes.txt").read_text() == "mine"
    with pytest.raises(UsageError, match="holds the input"):
        build_bundle(int8_export, "rpi4", int8_export.parent)
    with pytest.raises(UsageError, match="lies inside the input"):
        build_bundle(int8_export, "rpi4", int8_export / "rpi4")


def _run_standalone(script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run a bundle script the way a board would, with ``import edgekit`` made impossible."""
    code = ("import runpy, sys; sys.modules['edgekit'] = None; "
            f"sys.argv = [{str(script)!r}, *sys.argv[1:]]; runpy.run_path({str(script)!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-P", "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "TORCH_CPP_LOG_LEVEL": "ERROR"})


def test_check_outputs_runs_standalone_and_matches_the_host_record(onnx_bundle, tmp_path):
    proc = _run_standalone(onnx_bundle / "check_outputs.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]  # a plain verdict line after the JSON
    assert last.startswith("PASS: model.onnx on ") and "cosine" in last, last
    doc, verdict = read_output(proc.stdout)
    assert verdict == last
    assert doc["schema"] == "edgekit.check_outputs" and doc["ok"] is True
    assert set(doc["batches"]) == {"1", "7"}
    assert doc["batches"]["7"]["shape"] == [7, 10]
    assert doc["cosine"] > 0.99 and doc["top1_agreement"] >= 0.85 and doc["max_abs"] < 1.0
    assert doc["model"]["sha256"] == sha256_file(onnx_bundle / "model.onnx")
    host = layout.read_bundle_json(onnx_bundle)["host_check"]
    assert doc["outputs_sha256"] == host["outputs_sha256"]  # same machine, same runtime: same bits
    assert doc["batches"]["1"]["max_abs"] == pytest.approx(host["batches"]["1"]["max_abs"])


def test_check_outputs_fails_past_a_limit(onnx_bundle, tmp_path):
    proc = _run_standalone(onnx_bundle / "check_outputs.py", "--min-cosine", "1.5", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.strip().splitlines()[-1].startswith("FAIL: outputs differ from the reference: cosine")
    assert proc.stderr.strip() == ""  # one message: the verdict line
    doc, _ = read_output(proc.stdout)
    assert doc["ok"] is False
    with_json = _run_standalone(onnx_bundle / "check_outputs.py", "--json", str(tmp_path / "c.json"), cwd=tmp_path)
    assert with_json.returncode == 0 and with_json.stdout.strip().startswith("PASS: ")  # JSON in the file
    assert json.loads((tmp_path / "c.json").read_text())["ok"] is True


def test_the_bundled_runner_times_the_model(onnx_bundle, tmp_path):
    proc = _run_standalone(onnx_bundle / "runner.py", str(onnx_bundle / "model.onnx"), "--min-runs", "3",
                           "--min-time", "0", "--warmup", "1", "--threads", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["results"][0]
    assert result["model"]["sha256"] == sha256_file(onnx_bundle / "model.onnx")
    assert result["model"]["variant"] == "int8-static-onnx" and result["timing"]["runs"] >= 3


def test_tampering_is_caught(onnx_bundle, tmp_path):
    bad = tmp_path / "rpi4"
    shutil.copytree(onnx_bundle, bad)
    data = bytearray((bad / "model.onnx").read_bytes())
    data[-1] ^= 0xFF
    (bad / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(InputFileError, match="model.onnx does not match"):
        verify_checksums(bad)
    shutil.copyfile(onnx_bundle / "model.onnx", bad / "model.onnx")
    (bad / "numpy.py").write_text("raise SystemExit('shadowed')\n")
    with pytest.raises(InputFileError, match="numpy.py is not listed"):
        verify_checksums(bad)
    assert "numpy.py" not in verify_checksums(bad, allow_extra=True)
    (bad / "numpy.py").unlink()
    (bad / "reference.npz").unlink()
    with pytest.raises(InputFileError, match="missing"):
        verify_checksums(bad)


def test_torchscript_bundle(int8_export, tmp_path):
    out = build_bundle(int8_export, "rpi4", tmp_path / "rpi4-ts", fmt="torchscript")
    info = layout.read_bundle_json(out)
    assert (info["model"], info["format"], info["quantized_engine"]) == ("model.pt", "torchscript", "qnnpack")
    assert info["runtime"] == {"name": "torch", "version": _host_version("torch")}
    assert "+" not in info["runtime"]["version"]  # a local label (+cpu) is not on PyPI for aarch64
    pins = [line for line in (out / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    # CPU-only torch for the board: PyPI's aarch64 torch wheels pull CUDA libraries.
    assert pins == [
        "--index-url https://download.pytorch.org/whl/cpu",
        f"numpy=={_host_version('numpy')}",
        f"torch=={_host_version('torch')}",
    ]
    assert info["host_check"]["runtime"]["name"] == "torch" and info["host_check"]["cosine"] > 0.99
    assert not (out / "model.onnx").exists()
    verify_checksums(out)


@pytest.fixture(scope="module")
def x86_export(digits_checkpoint, tmp_path_factory) -> Path:
    """Really quantized (torch dynamic, x86 engine) and exported for the x86-64 target."""
    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    work = tmp_path_factory.mktemp("x86")
    quantize(digits_checkpoint, "dynamic", work / "q", "x86-64", formats=("torchscript",))
    export(work / "q", work / "export", formats=("torchscript",), target="x86-64")
    return work / "export"


def test_x86_model_is_refused_for_rpi4_unless_forced(x86_export, tmp_path):
    with pytest.raises(UsageError) as caught:
        build_bundle(x86_export, "rpi4", tmp_path / "rpi4")
    message = str(caught.value)
    assert "'x86-64'" in message and "'rpi4'" in message and "'x86'" in message and "'qnnpack'" in message
    assert "--force" in message and not (tmp_path / "rpi4").exists()

    result = runner.invoke(app, ["bundle", str(x86_export), "--target", "rpi4", "--out", str(tmp_path / "cli")])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and len(result.stderr.strip().splitlines()) == 1

    result = runner.invoke(app, ["bundle", str(x86_export), "--target", "rpi4", "--out", str(tmp_path / "forced"), "--force"])
    assert result.exit_code == 0, result.stderr
    assert "Warning: bundled for rpi4 despite" in result.stderr
    override = layout.read_bundle_json(tmp_path / "forced")["override"]
    assert override["forced"] is True and override["made_for"] == "x86-64"
    assert any("quantized engine 'x86'" in m for m in override["mismatches"])


def test_settings_recorded_in_the_file_are_checked_without_a_target_name(int8_export, tmp_path):
    edited = _copy_export(int8_export, tmp_path / "export", target=None,
                          details={"quantized_engine": "x86", "activation_type": "int8"})
    with pytest.raises(UsageError, match="ONNX activation_type 'int8', but rpi4 uses 'uint8'"):
        build_bundle(edited, "rpi4", tmp_path / "a")
    with pytest.raises(UsageError, match="quantized engine 'x86', but rpi4 uses 'qnnpack'"):
        build_bundle(edited, "rpi4", tmp_path / "b", fmt="torchscript")


def test_cli_bundle_defaults_and_errors(int8_export, digits_checkpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["bundle", str(int8_export)])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "dist" / "rpi4" / "model.onnx").is_file() and (tmp_path / "dist" / "rpi4.tar.gz").is_file()
    assert "Bundled model.onnx (int8-static-onnx, int8" in result.stdout

    result = runner.invoke(app, ["bundle", str(int8_export), "--out", str(tmp_path / "j"), "--json", "--format", "torchscript"])
    assert result.exit_code == 0 and json.loads(result.stdout)["model"] == "model.pt"

    for args, expected in (
        ([str(digits_checkpoint)], "is a checkpoint artifact; export it first"),
        ([str(tmp_path / "missing")], "artifact not found"),
        ([str(int8_export), "--format", "toy"], "unknown format 'toy'"),
        ([str(int8_export), "--format", "tflite"], "artifact has no tflite model file (it has: onnx, torchscript)"),
        ([str(int8_export), "--target", "nope"], "unknown target 'nope'"),
        ([str(int8_export), "--platform", "many linux"], "is not a wheel platform tag"),
    ):
        result = runner.invoke(app, ["bundle", *args, "--out", str(tmp_path / "x")])
        assert result.exit_code == 2, (args, result.stderr)
        assert result.stderr.startswith("Error: ") and expected in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_pip_download_command_line(tmp_path):
    argv = pip_download_argv(tmp_path / "requirements.txt", tmp_path / "wheels", "manylinux_2_28_aarch64", "3.11",
                             python="/usr/bin/python3")
    assert argv[:4] == ["/usr/bin/python3", "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv
    assert argv[argv.index("--platform") + 1] == "manylinux_2_28_aarch64"
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert argv[argv.index("--implementation") + 1] == "cp"
    assert argv[argv.index("-r") + 1] == str(tmp_path / "requirements.txt")
    assert argv[argv.index("-d") + 1] == str(tmp_path / "wheels")
    for bad in ("manylinux2014 aarch64", "x;rm -rf /", ""):
        with pytest.raises(UsageError):
            pip_download_argv(tmp_path / "r.txt", tmp_path, bad, "3.11")
    with pytest.raises(UsageError):
        pip_download_argv(tmp_path / "r.txt", tmp_path, "manylinux_2_28_aarch64", "3.11; id")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_wheels_without_network_fail_with_one_line_and_leave_nothing(int8_export, tmp_path, monkeypatch):
    # pip really runs, against an index on a closed local port: offline, and nothing is downloaded.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{_closed_port()}/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(EdgekitError, match="not reachable") as caught:
        build_bundle(int8_export, "rpi4", tmp_path / "rpi4", wheels=True)
    assert "manylinux_2_28_aarch64" in str(caught.value)
    assert not (tmp_path / "rpi4").exists() and not (tmp_path / "rpi4.tar.gz").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary folder left behind either

    result = runner.invoke(app, ["bundle", str(int8_export), "--out", str(tmp_path / "cli"), "--wheels"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: cannot download the wheels") and len(result.stderr.strip().splitlines()) == 1


def test_download_error_explains_a_too_old_platform_tag():
    # What pip printed when asked for onnxruntime 1.32 wheels for manylinux2014_aarch64.
    output = ("ERROR: Could not find a version that satisfies the requirement onnxruntime==1.32.0 "
              "(from versions: 1.15.0, 1.15.1, 1.16.0, 1.16.1, 1.16.2, 1.16.3)\n"
              "ERROR: No matching distribution found for onnxruntime==1.32.0\n")
    message = str(download_error(output, "manylinux2014_aarch64", "3.11"))
    assert "--platform manylinux_2_28_aarch64" in message and "onnxruntime==1.32.0" in message


def test_bundle_modules_import_light():
    code = ("import sys, edgekit.cli.bundle, edgekit.bundle.build, edgekit.bundle.verify, edgekit.remote.bench, "
            "edgekit.remote.options; print(' '.join(m for m in ('torch', 'onnxruntime', 'onnx', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_info_describes_a_bundle(onnx_bundle):
    result = runner.invoke(app, ["info", str(onnx_bundle), "--json", "--verify"])
    assert result.exit_code == 0, result.output + result.stderr
    info = json.loads(result.stdout)
    described = layout.read_bundle_json(onnx_bundle)
    assert info["type"] == "bundle" and info["target"] == described["target"]
    assert info["bundle"]["runtime"] == described["runtime"]
    assert info["bundle"]["host_check"]["cosine"] == described["host_check"]["cosine"]
    assert [f["path"] for f in info["files"]] == ["model.onnx"]
    assert info["files"][0]["bytes"] == (onnx_bundle / "model.onnx").stat().st_size
    text = runner.invoke(app, ["info", str(onnx_bundle)])
    assert text.exit_code == 0 and "bundle (export artifact inside)" in text.stdout
