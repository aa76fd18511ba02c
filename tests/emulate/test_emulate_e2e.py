"""``edgekit verify --emulate`` end to end: the default model's bundles on an emulated aarch64 Debian.

Slow-marked, and they download nothing (the two marked ``board_torch`` need torch for aarch64 in the
rootfs: PyPI's is a CUDA build of several GB, so they are opt-in: ``EMULATED_TORCHSCRIPT=1
EMULATED_EXECUTORCH=1 bash benchmarks/emulated_verify.sh``, then ``pytest -m board_torch``): they run on the arm64 rootfs and the venv that
``bash benchmarks/emulated_verify.sh`` builds and caches (``$XDG_CACHE_HOME/edgekit/rootfs``,
else ``~/.cache/edgekit/rootfs``; .ci/run calls it before pytest). They skip with the reason
when that cache is missing, or without root, ``apt-get install qemu-user-static binfmt-support
debootstrap`` or binfmt_misc.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

pytestmark = pytest.mark.slow
runner = CliRunner()
TIMEOUT_S = "600"
PREPARE = "run `bash benchmarks/emulated_verify.sh` first (.ci/run does); these tests download nothing"


@pytest.fixture(scope="session")  # session scope: it runs before the session fixtures that train models
def emulation_ready() -> None:
    """Skip unless this host can run the emulated board and the rootfs is cached."""
    from edgekit.emulate.host import INSTALL_HINT
    from edgekit.emulate.rootfs import default_cache_dir, find_rootfs

    if os.geteuid() != 0:
        pytest.skip("edgekit verify --emulate needs root (debootstrap, chroot, mounts)")
    missing = [tool for tool in ("qemu-aarch64-static", "debootstrap", "unshare") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed; {INSTALL_HINT}")
    if find_rootfs(default_cache_dir(), "bookworm") is None:
        pytest.skip(f"no cached bookworm arm64 rootfs in {default_cache_dir()}; {PREPARE}")
    # No binfmt_misc is fine with a cached rootfs: verify then names qemu-aarch64-static as the command.


@pytest.fixture(scope="module")
def int8_onnx_bundle(digits_static, tmp_path_factory) -> Path:
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    base = tmp_path_factory.mktemp("emulate-e2e")
    export(digits_static, base / "export", formats=("onnx",), target="rpi4")
    return build_bundle(base / "export", "rpi4", base / "rpi4-int8")


@pytest.fixture(scope="module")
def int8_torchscript_bundle(digits_static, tmp_path_factory) -> Path:
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    base = tmp_path_factory.mktemp("emulate-e2e-ts")
    export(digits_static, base / "export", formats=("torchscript",), target="rpi4")
    return build_bundle(base / "export", "rpi4", base / "rpi4-int8-ts", fmt="torchscript")


@pytest.fixture(scope="module")
def int8_pte_bundle(digits_checkpoint, tmp_path_factory) -> Path:
    """Static int8 ``.pte`` (PT2E, XNNPACK) of the default digits model, bundled for rpi4."""
    pytest.importorskip("executorch")
    from conftest import CALIB_DIGITS

    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    base = tmp_path_factory.mktemp("emulate-e2e-pte")
    quantize(digits_checkpoint, "static", base / "int8", "rpi4", calib=CALIB_DIGITS, formats=("executorch",))
    export(base / "int8", base / "export", target="rpi4")
    return build_bundle(base / "export", "rpi4", base / "rpi4-int8-pte", fmt="executorch")


@pytest.fixture(scope="module")
def fp32_onnx_bundle(digits_fp32_export, tmp_path_factory) -> Path:
    from edgekit.bundle.build import build_bundle

    return build_bundle(digits_fp32_export, "rpi4", tmp_path_factory.mktemp("emulate-e2e") / "rpi4-fp32", fmt="onnx")


def _require_cache(bundle: Path, index_url: str | None = None) -> None:
    """Skip unless the rootfs and a venv with this bundle's requirements are cached already."""
    from edgekit import formats
    from edgekit.emulate.bundle import open_bundle
    from edgekit.emulate.rootfs import default_cache_dir, find_rootfs
    from edgekit.emulate.venv import MARKER, VENVS_DIR, requirements_key, with_index_url

    fs = find_rootfs(default_cache_dir(), "bookworm")
    if fs is None:
        pytest.skip(f"no cached bookworm arm64 rootfs in {default_cache_dir()}; {PREPARE}")
    opened = open_bundle(bundle)
    text = opened.requirements.read_text(encoding="utf-8")
    if index_url is not None:
        text = with_index_url(text, index_url)[0]
    entry = formats.get(opened.format)
    with_deps = entry.board.with_deps_off_index if index_url is not None and entry.board.no_deps else ()
    key = requirements_key(text, opened.wheels, fs.python, entry.board.no_deps, with_deps)
    if not (fs.path / VENVS_DIR.lstrip("/") / key / MARKER).is_file():
        pytest.skip(f"no cached venv for this bundle's requirements in {fs.path}; {PREPARE}")
    serving = bundle / "requirements-serve.txt"  # serve.py's venv (edgekit.emulate.serve_check), from the index
    if serving.is_file() and not (fs.path / VENVS_DIR.lstrip("/") / requirements_key(serving.read_text(encoding="utf-8"), [], fs.python) / MARKER).is_file():
        pytest.skip(f"no cached venv for this bundle's serve.py requirements in {fs.path}; {PREPARE}")


def _torch_index() -> tuple[str, ...]:
    """torch's CPU build for aarch64: PyTorch's CPU index (the bundle's own), or a mirror of it named by
    EMULATED_TORCH_INDEX (PyPI's aarch64 torch is a CUDA build, which verify refuses for a board)."""
    index = os.environ.get("EMULATED_TORCH_INDEX")
    return ("--index-url", index) if index else ()


def _verify(bundle: Path, out: Path, *extra: str):
    _require_cache(bundle, extra[extra.index("--index-url") + 1] if "--index-url" in extra else None)
    result = runner.invoke(app, ["verify", str(bundle), "--emulate", "--timeout", TIMEOUT_S, "--json", str(out), *extra])
    report = json.loads(out.read_text()) if out.is_file() else None
    return result, report


def test_int8_bundle_matches_the_host_under_emulation(emulation_ready, int8_onnx_bundle, tmp_path):
    result, report = _verify(int8_onnx_bundle, tmp_path / "verify.json")
    assert result.exit_code == 0, result.output
    assert report["schema"] == "edgekit.verify" and report["mode"] == "emulated" and report["passed"]
    emulation = report["emulation"]
    assert emulation["machine"] == "aarch64" and emulation["qemu_cpu"] == "cortex-a72"
    assert emulation["runtime"]["name"] == report["host"]["runtime"]["name"] == "onnxruntime"
    assert [b["batch"] for b in report["batches"]] == [1, 7]
    for check in report["batches"]:
        vs_host = check["emulated_vs_host"]
        assert check["passed"] and vs_host["top1_agreement"] == 1.0 and vs_host["max_abs"] <= check["bound"]
        assert vs_host["cosine"] >= 0.999 and check["emulated_vs_float"]["top1_agreement"] >= 0.8
    bench = report["bench"]
    assert bench["ok"] and bench["status"] == "functional check under emulation"
    assert bench["result"]["mode"] == "emulated" and bench["result"]["host"]["emulated"] is True
    assert bench["result"]["host"]["machine"] == "aarch64" and bench["result"]["timing"]["runs"] == 10
    assert "functional check under emulation" in result.stdout and "not the device's latency" in result.stdout
    serve = report["serve"]  # the bundle's serve.py, started under QEMU, answered like the emulated probe
    assert serve["ok"] and serve["exit_code"] == 0 and [b["batch"] for b in serve["batches"]] == [1, 7]
    assert all(b["passed"] and b["vs_probe"]["top1_agreement"] == 1.0 for b in serve["batches"])
    assert "serve: serve.py answered /v1/predict" in result.stdout
    assert "PASS" in result.stdout
    assert "using the cached rootfs" in result.stderr and "using the cached venv" in result.stderr  # progress


def test_cached_rerun_with_an_explicit_interpreter(emulation_ready, int8_onnx_bundle, tmp_path):
    """The no-binfmt fallback: qemu-aarch64-static named as the command inside the cached rootfs."""
    result, report = _verify(int8_onnx_bundle, tmp_path / "verify.json", "--launcher", "interpreter", "--no-bench")
    assert result.exit_code == 0, result.output
    assert report["passed"] and report["emulation"]["launcher"] == "interpreter"
    assert report["emulation"]["machine"] == "aarch64"
    assert not report["emulation"]["rootfs_built"] and not report["emulation"]["venv"]["built"]
    assert report["bench"] is None


def test_a_difference_past_tolerance_fails_with_one_line(emulation_ready, fp32_onnx_bundle, tmp_path):
    """fp32 kernels round differently on x86 and ARM (FMA, vector widths); with --atol 0 that must fail."""
    result, report = _verify(fp32_onnx_bundle, tmp_path / "verify.json", "--atol", "0", "--no-bench")
    if report is not None and all(b["emulated_vs_host"]["max_abs"] == 0 for b in report["batches"]):
        pytest.skip("this runtime computes bit-identical fp32 outputs on both ISAs; nothing to fail")
    assert result.exit_code == 1, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the emulated aarch64 run differs from the host at batch 1: max abs difference")
    assert report is not None and not report["passed"]  # the report is written before the failure is raised


def test_a_bundle_with_external_data_runs_under_emulation(emulation_ready, digits_static, tmp_path):
    """model.onnx + model.onnx.data (how models over 2 GB ship) load together on the emulated board."""
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    export(digits_static, tmp_path / "export", formats=("onnx",), target="rpi4", external_data=True)
    bundle = build_bundle(tmp_path / "export", "rpi4", tmp_path / "rpi4-int8-ext")
    assert (bundle / "model.onnx.data").is_file()
    result, report = _verify(bundle, tmp_path / "verify.json", "--no-bench")
    assert result.exit_code == 0, result.output
    assert report["passed"] and report["emulation"]["machine"] == "aarch64"
    assert all(b["emulated_vs_host"]["top1_agreement"] == 1.0 for b in report["batches"])


@pytest.mark.board_torch
def test_int8_torchscript_bundle_runs_qnnpack_under_emulation(emulation_ready, int8_torchscript_bundle, tmp_path):
    """PyTorch's int8 engine on ARM (QNNPACK) on the emulated Cortex-A72 reproduces the host's outputs.

    The torch wheel comes from PyPI (PyTorch's CPU index is out of reach here), which the report says.
    """
    result, report = _verify(int8_torchscript_bundle, tmp_path / "verify.json", *_torch_index())
    assert result.exit_code == 0, result.output
    assert report["passed"] and report["model"]["format"] == "torchscript" and report["model"]["precision"] == "int8"
    emulation = report["emulation"]
    assert emulation["machine"] == "aarch64" and emulation["runtime"]["name"] == "torch"
    assert emulation["runtime"]["version"].split("+")[0] == report["host"]["runtime"]["version"].split("+")[0]
    for check in report["batches"]:
        assert check["emulated_vs_host"]["top1_agreement"] == 1.0 and check["emulated_vs_host"]["cosine"] >= 0.999
    assert report["bench"]["ok"] and report["bench"]["result"]["host"]["machine"] == "aarch64"


@pytest.mark.board_torch
def test_int8_pte_bundle_runs_xnnpack_under_emulation(emulation_ready, int8_pte_bundle, tmp_path):
    """The PT2E int8 program on XNNPACK on the emulated Cortex-A72 keeps the host's decisions.

    Installed as a board does (``pip install --no-deps``, exactly the pinned list), except torch:
    from PyPI it is the CUDA build, installed with its own libraries, which the report notes.
    """
    result, report = _verify(int8_pte_bundle, tmp_path / "verify.json", *_torch_index())
    assert result.exit_code == 0, result.output
    assert report["passed"] and report["model"]["format"] == "executorch" and report["model"]["precision"] == "int8"
    emulation = report["emulation"]
    assert emulation["machine"] == "aarch64" and emulation["runtime"]["name"] == "executorch"
    for check in report["batches"]:
        assert check["emulated_vs_host"]["top1_agreement"] == 1.0 and check["emulated_vs_host"]["cosine"] >= 0.999
    assert report["bench"]["ok"] and report["bench"]["result"]["model"]["format"] == "executorch"


def test_a_hostile_runner_py_is_fenced_off_the_cached_rootfs_and_the_network(emulation_ready, int8_onnx_bundle,
                                                                             tmp_path):
    """A Python bundle's runner.py is its author's code: under emulation it runs as user 65534 with no
    network, so it can neither change the cached rootfs (shared by every later verify) nor reach a
    listener on this host."""
    import socket

    from corpus.hostile import rehash_sums
    from edgekit.emulate.rootfs import default_cache_dir, find_rootfs

    rootfs = find_rootfs(default_cache_dir(), "bookworm").path
    marker = rootfs / "etc" / "edgekit-round3-marker"
    bundle = tmp_path / "hostile"
    shutil.copytree(int8_onnx_bundle, bundle, symlinks=True)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        attack = (f"import socket\n"
                  f"for act in (lambda: open({str('/' + marker.relative_to(rootfs).as_posix())!r}, 'w').write('x'),\n"
                  f"            lambda: open('/usr/bin/edgekit-round3-marker', 'w').write('x'),\n"
                  f"            lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2)):\n"
                  f"    try:\n        act()\n    except Exception:\n        pass\n")
        runner_py = bundle / "runner.py"
        runner_py.write_text(attack + runner_py.read_text())
        rehash_sums(bundle)
        result, _ = _verify(bundle, tmp_path / "verify.json")
        try:
            connected = listener.accept()[0]
            connected.close()
            reached = True
        except OSError:
            reached = False
    assert not reached
    assert not marker.exists() and not (rootfs / "usr" / "bin" / "edgekit-round3-marker").exists()
    assert "Traceback" not in result.output
