"""Native bundles (``edgekit bundle --runtime native``): edgekit-run and the ExecuTorch libraries a program
needs, no Python on the board; through the CLI, checked with the system's own tools where they exist."""

from __future__ import annotations

import json
import os
import platform
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from corpus.hostile import assert_one_line_error, leftovers, snapshot
from typer.testing import CliRunner

from edgekit.cli.app import app

pytest.importorskip("executorch")
runner = CliRunner()
HOST_TARGET = {"x86_64": "x86-64"}.get(platform.machine())
LINKED = {"libexecutorch.so", "libexecutorch_threadpool.so", "libexecutorch_backend_xnnpack.so"}
ELF_MACHINE = {"x86_64": 62, "aarch64": 183}


@pytest.fixture(scope="module")
def int8_pte(digits_checkpoint, tmp_path_factory) -> Path:
    from conftest import CALIB_DIGITS

    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    base = tmp_path_factory.mktemp("native-bundle")
    quantize(digits_checkpoint, "static", base / "q", "rpi4", calib=CALIB_DIGITS, formats=("executorch", "onnx"))
    export(base / "q", base / "export", formats=("executorch", "onnx"), target="rpi4")
    return base / "export"


def _bundle(export: Path, target: str, out: Path, *extra: str):
    return runner.invoke(app, ["bundle", str(export), "--target", target, "--runtime", "native", "--out", str(out),
                               "--force", *extra])


@pytest.fixture(scope="module")
def host_bundle(int8_pte, tmp_path_factory) -> Path:
    if HOST_TARGET is None:
        pytest.skip(f"no edgekit target for this host's architecture ({platform.machine()})")
    out = tmp_path_factory.mktemp("native-host") / "host"
    result = _bundle(int8_pte, HOST_TARGET, out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def rpi4_bundle(int8_pte, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("native-rpi4") / "rpi4"
    result = _bundle(int8_pte, "rpi4", out)
    assert result.exit_code == 0, result.output
    return out


def _elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF"
    return struct.unpack_from("<H", head, 18)[0]


def _runpath(path: Path) -> str:
    done = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True)
    return next(line.split("[", 1)[1].rstrip("]") for line in done.stdout.splitlines() if "RUNPATH" in line)


def test_the_bundle_holds_the_runner_its_libraries_and_no_python(rpi4_bundle):
    names = {p.relative_to(rpi4_bundle).as_posix() for p in rpi4_bundle.rglob("*") if p.is_file()}
    assert names == {"edgekit-run", "run.sh", "model.pte", "manifest.json", "reference.npz", "bundle.json", "README.txt",
                     "THIRD_PARTY_NOTICES.txt", "SHA256SUMS", *(f"lib/{name}" for name in LINKED)}
    assert not [n for n in names if n.endswith(".py") or "requirements" in n]
    assert _elf_machine(rpi4_bundle / "edgekit-run") == ELF_MACHINE["aarch64"]
    assert all(_elf_machine(rpi4_bundle / "lib" / name) == ELF_MACHINE["aarch64"] for name in LINKED)
    if shutil.which("readelf"):
        assert _runpath(rpi4_bundle / "edgekit-run") == "$ORIGIN/lib"  # runs from wherever the folder is
    info = json.loads((rpi4_bundle / "bundle.json").read_text())
    assert info["runtime"]["name"] == "executorch-native" and info["native"]["arch"] == "aarch64"
    assert info["native"]["cpu"] == "cortex-a72" and info["variant"].endswith("-native")
    assert sorted(info["native"]["libraries"]) == sorted(f"lib/{name}" for name in LINKED)
    on_disk = sum(p.stat().st_size for p in rpi4_bundle.rglob("*") if p.is_file() and p.name not in ("bundle.json", "SHA256SUMS"))
    assert info["bytes_on_disk"] == on_disk
    assert on_disk < 6 * 2**20  # the runner and three libraries: a few MB, not a Python stack
    notices = (rpi4_bundle / "THIRD_PARTY_NOTICES.txt").read_text()
    for component in ("ExecuTorch", "XNNPACK", "cpuinfo", "pthreadpool", "KleidiAI", "FlatBuffers"):
        assert f"== {component} (" in notices, component
    assert "Eigen" not in notices  # its code is in the kernel library this program does not need
    if shutil.which("sha256sum"):
        done = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=rpi4_bundle, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_run_sh_checks_the_model_with_no_python_on_path(host_bundle, tmp_path):
    """The bundle copied elsewhere, run through its sh entry point with a PATH that has no python."""
    board = tmp_path / "board" / "b"
    shutil.copytree(host_bundle, board)
    (tmp_path / "nobin").mkdir()
    for tool in ("sh", "dirname", "sha256sum"):  # what run.sh calls; no python anywhere on PATH
        os.symlink(shutil.which(tool), tmp_path / "nobin" / tool)
    env = {"PATH": str(tmp_path / "nobin")}
    done = subprocess.run([shutil.which("sh"), str(board / "run.sh"), "verify"], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout.rstrip("\n").rpartition("\n")[0])
    assert done.stdout.strip().splitlines()[-1].startswith("PASS: model.pte on ")
    # bit-identical to the Python ExecuTorch runtime on the same program (the board package's check)
    python = subprocess.run([sys.executable, "-m", "edgekit.board.check", "--model", str(board / "model.pte"),
                             "--reference", str(board / "reference.npz")], capture_output=True, text=True)
    assert python.returncode == 0, python.stderr
    from edgekit.board.check import read_output

    theirs, _ = read_output(python.stdout)
    assert doc["outputs_sha256"] == theirs["outputs_sha256"] and theirs["runtime"]["name"] == "executorch"
    assert doc["runtime"]["name"] == "executorch-native"


def test_bench_and_gate_read_the_native_runner_like_any_other(host_bundle, int8_pte, tmp_path):
    out = tmp_path / "bench.json"
    result = runner.invoke(app, ["bench", str(host_bundle), str(int8_pte / "model.pte"), "--threads", "1",
                                 "--min-runs", "20", "--min-time", "0.2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    native, python = json.loads(out.read_text())["results"]
    assert native["runtime"]["name"] == "executorch-native" and python["runtime"]["name"] == "executorch"
    assert native["model"]["sha256"] == python["model"]["sha256"]  # the same program, two runtimes
    assert native["memory"]["peak_rss"] < 0.25 * python["memory"]["peak_rss"]
    passed = runner.invoke(app, ["gate", str(out), "--max-rss-mb", "64", "--max-size-mb", "4"])
    failed = runner.invoke(app, ["gate", str(out), "--max-rss-mb", str(int(native["memory"]["peak_rss"] / 2) or 1)])
    assert failed.exit_code == 3 and passed.exit_code in (0, 3)
    assert "executorch-native" in passed.output or native["model"]["variant"] in passed.output


def test_info_says_what_the_board_needs(rpi4_bundle):
    result = runner.invoke(app, ["info", str(rpi4_bundle), "--json"])
    assert result.exit_code == 0, result.output
    bundle = json.loads(result.stdout)["bundle"]
    assert bundle["kind"] == "native" and "no Python" in bundle["board_needs"]
    assert bundle["folder_bytes"] == sum(p.stat().st_size for p in rpi4_bundle.rglob("*") if p.is_file())


def test_a_tampered_binary_or_library_is_refused(rpi4_bundle, tmp_path):
    for rel in ("edgekit-run", "lib/libexecutorch.so"):
        copy = tmp_path / rel.replace("/", "_") / "b"
        shutil.copytree(rpi4_bundle, copy)
        data = bytearray((copy / rel).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (copy / rel).write_bytes(bytes(data))
        result = runner.invoke(app, ["verify", str(copy)])
        assert_one_line_error(result, 2, rel)


def test_a_board_bundle_is_not_timed_on_this_host(rpi4_bundle):
    if platform.machine() == "aarch64":
        pytest.skip("this host is aarch64")
    result = runner.invoke(app, ["bench", str(rpi4_bundle)])
    assert_one_line_error(result, 2, "built for aarch64")


@pytest.mark.parametrize("case", ["torchscript-only", "32-bit", "wheels"])
def test_native_refusals_are_one_line_and_write_nothing(case, int8_pte, digits_checkpoint, tmp_path):
    before = snapshot(tmp_path)
    if case == "torchscript-only":  # ONNX and ncnn run natively too (ort_build, ncnn_build); TorchScript does not
        from edgekit.export.api import export

        export(digits_checkpoint, tmp_path / "ts-export", formats=("torchscript",), target="rpi4")
        before = snapshot(tmp_path)
        result = _bundle(tmp_path / "ts-export", "rpi4", tmp_path / "out")
        message = "--runtime native runs onnx, executorch, ncnn programs; this model is torchscript"
    elif case == "32-bit":
        target = tmp_path / "pi-armv7.toml"
        text = (Path(__file__).resolve().parents[2] / "targets" / "rpi4.toml").read_text()
        target.write_text(text.replace('arch = "aarch64"', 'arch = "armv7l"').replace('name = "rpi4"', 'name = "pi32"'))
        before = snapshot(tmp_path)
        result = _bundle(int8_pte, str(target), tmp_path / "out")
        message = "32-bit"
    else:
        result = _bundle(int8_pte, "rpi4", tmp_path / "out", "--wheels")
        message = "--wheels applies to Python bundles"
    assert_one_line_error(result, 2, message)
    assert leftovers(tmp_path, "out") == [] and snapshot(tmp_path) == before


def test_a_missing_cross_compiler_names_its_package(int8_pte, tmp_path):
    """With no compiler on PATH, one line naming the Debian package (before anything is downloaded)."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "EDGEKIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "edgekit", "bundle", str(int8_pte), "--target", "rpi4", "--runtime",
                           "native", "--out", str(tmp_path / "out"), "--force"], capture_output=True, text=True, env=env)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "apt-get install crossbuild-essential-arm64" in lines[0], done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache" / "native").exists()
