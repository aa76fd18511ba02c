"""``verify --emulate``: errors that name the real cause and the flag that fixes it, no CUDA torch for
a board, and an emulation cache that stays bounded (and says what it removed).

Nothing here installs torch into the rootfs: the TorchScript bundle's install is refused before
pip runs (its index unreachable from here, or PyPI's aarch64 torch a CUDA build). The eviction runs
on a hard-linked copy of the cached rootfs, so the real cache's venvs stay for the other tests.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.emulate import EmulationError

runner = CliRunner()
PYPI = "https://pypi.org/simple"
TORCH_CPU = "https://download.pytorch.org/whl/cpu"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_error_line(result, code: int) -> str:
    assert result.exit_code == code, result.output
    errors = [line for line in result.stderr.strip().splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and result.stderr.strip().splitlines()[-1] == errors[0], result.stderr
    assert "Traceback" not in result.output
    return errors[0]


def need_pypi() -> None:
    from edgekit.emulate.index_check import unreachable

    problem = unreachable(PYPI)
    if problem:
        pytest.skip(f"PyPI is not reachable from here ({problem})")


# -- the index check, on this host (no emulation, no root) -------------------------------------------


def test_an_unreachable_index_is_named_with_the_fix():
    from edgekit.emulate.index_check import check_indexes

    url = f"http://127.0.0.1:{closed_port()}/simple"
    with pytest.raises(EmulationError) as caught:
        check_indexes(f"--index-url {url}\nnumpy==2.4.6\n", "manylinux_2_36_aarch64", "3.11")
    message = str(caught.value)
    assert message.startswith(f"the package index {url} named by the bundle's requirements.txt is not reachable")
    assert "Connection refused" in message and "--index-url" in message and "--wheels" in message
    assert "numpy" not in message.split(";")[0]  # the cause is the index, not numpy
    with pytest.raises(EmulationError, match=r"named by --index-url is not reachable"):
        check_indexes(f"--index-url {url}\nnumpy==2.4.6\n", "manylinux_2_36_aarch64", "3.11", replaced=True)


def test_a_pin_without_a_board_wheel_is_named():
    need_pypi()
    from edgekit.emulate.index_check import check_indexes

    with pytest.raises(EmulationError) as caught:
        check_indexes("numpy==1.0.0\n", "manylinux_2_36_aarch64", "3.11")
    assert str(caught.value).startswith("numpy==1.0.0 has no wheel for manylinux_2_36_aarch64 .. manylinux2014_aarch64 "
                                        "/ Python 3.11 on the indexes the requirements name")


def test_pypi_aarch64_torch_is_refused_as_a_cuda_build_and_numpy_is_fine():
    need_pypi()
    from edgekit.bundle.requirements import host_version
    from edgekit.emulate.index_check import check_indexes

    torch = host_version("torch")
    with pytest.raises(EmulationError) as caught:
        check_indexes(f"--index-url {PYPI}\nnumpy=={host_version('numpy')}\ntorch=={torch}\n",
                      "manylinux_2_36_aarch64", "3.11", replaced=True)
    message = str(caught.value)
    assert message.startswith(f"{PYPI} (--index-url) has torch {torch} for manylinux_2_36_aarch64 only as a CUDA build")
    assert "nvidia-" in message and "not installed" in message and TORCH_CPU in message
    indexes = check_indexes(f"numpy=={host_version('numpy')}\nonnxruntime=={host_version('onnxruntime')}\n",
                            "manylinux_2_36_aarch64", "3.11")
    assert indexes.main == PYPI  # the ONNX runtime's pins: CPU builds, nothing refused


def test_pip_failing_on_an_unreachable_index_in_the_rootfs_says_so():
    """What pip prints when its index does not answer, turned into the cause (not 'no matching numpy')."""
    from edgekit.emulate.venv import install_error

    def pip_tail(index: str, pin: str = "numpy==2.4.6") -> tuple[list[str], int]:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--retries", "1", "--timeout",
             "5", "--index-url", index, "-d", "/nonexistent-edgekit-test", pin],
            capture_output=True, text=True, timeout=120, env={**os.environ, "PIP_CONFIG_FILE": os.devnull,
                                                              "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""})
        output = done.stdout + done.stderr
        assert done.returncode != 0 and f"No matching distribution found for {pin}" in output
        return output.splitlines()[-40:], done.returncode

    tail, code = pip_tail("https://edgekit-test.invalid/simple")  # .invalid never resolves (RFC 2606)
    message = str(install_error("pip install", tail, code, False))
    assert "was not reachable from the rootfs" in message and "edgekit-test.invalid" in message
    assert "--index-url" in message and "--wheels" in message
    offline = str(install_error("pip install", tail, code, True))
    assert "not reachable" not in offline  # with --no-index, pip's own words stand
    tail, code = pip_tail(f"http://127.0.0.1:{closed_port()}/simple")  # refused
    message = str(install_error("pip install", tail, code, False))
    assert "was not reachable from the rootfs" in message and "127.0.0.1" in message
    need_pypi()
    tail, code = pip_tail(PYPI, "edgekit-test-no-such-distribution==1.0")  # the index answers: it has none
    message = str(install_error("pip install", tail, code, False))
    assert "not reachable" not in message and f"{PYPI} listed no version of it for this board" in message


# -- the cache bound, on real venv folders (no emulation) --------------------------------------------


def fake_venv(rootfs: Path, key: str, used: str, size: int, complete: bool = True) -> Path:
    from edgekit.core.venv_cache import MARKER, venvs_dir

    folder = venvs_dir(rootfs) / key
    (folder / "lib").mkdir(parents=True)
    with open(folder / "lib" / "blob", "wb") as fh:
        fh.truncate(size)  # sparse: its size counts, no disk is used
    if complete:
        (folder / MARKER).write_text(json.dumps({"key": key, "used": used, "created": used, "source": "wheels",
                                                 "packages": {"numpy": "2.4.6"}, "bytes": size}))
    return folder


def test_the_least_recently_used_go_and_the_run_says_so(tmp_path, monkeypatch):
    from edgekit.core import venv_cache

    rootfs = tmp_path / "rootfs"
    keys = [f"{i:016x}" for i in range(6)]
    folders = [fake_venv(rootfs, key, f"2026-01-0{i + 1}T00:00:00+00:00", 1000) for i, key in enumerate(keys)]
    interrupted = fake_venv(rootfs, "f" * 16, "", 10, complete=False)
    monkeypatch.setenv(venv_cache.MAX_VENVS_ENV, "3")
    venv_cache.hold(rootfs, keys[1])  # in use by this process: never removed, however old
    said: list[str] = []
    try:
        removed = venv_cache.evict(rootfs, keep=keys[0], progress=said.append)  # keys[0]: the oldest, this run's
    finally:
        venv_cache.release_all()
    assert not interrupted.exists()
    # 7 folders, at most 3 kept: the interrupted one, then the oldest that are free (keys[2..4]); keys[5] is newest
    assert [v.key for v in removed] == ["f" * 16, keys[2], keys[3], keys[4]]
    assert [f.exists() for f in folders] == [True, True, False, False, False, True]
    assert any(f"removed the venv {keys[2]}" in line and "to keep at most 3 venvs" in line for line in said), said
    assert any("removed the interrupted venv" in line for line in said)
    monkeypatch.setenv(venv_cache.MAX_GB_ENV, "0.1")
    monkeypatch.setenv(venv_cache.MAX_VENVS_ENV, "100")
    big = fake_venv(rootfs, "a" * 16, "2026-02-01T00:00:00+00:00", 200 << 20)
    removed = venv_cache.evict(rootfs, keep="a" * 16)
    assert big.exists() and {v.key for v in removed} == {keys[0], keys[1], keys[5]}  # over 0.1 GB: all but this run's


def test_a_venv_another_run_builds_is_left_alone(tmp_path, monkeypatch):
    from edgekit.core import venv_cache

    rootfs = tmp_path / "rootfs"
    building = fake_venv(rootfs, "b" * 16, "", 10, complete=False)
    fake_venv(rootfs, "c" * 16, "2026-01-01T00:00:00+00:00", 10)
    monkeypatch.setenv(venv_cache.MAX_VENVS_ENV, "1")
    code = ("import fcntl, sys, time\nfh = open(sys.argv[1], 'a+')\nfcntl.flock(fh, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\ntime.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(venv_cache.venvs_dir(rootfs) / f".{'b' * 16}.lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert venv_cache.evict(rootfs, keep="c" * 16) == [] and building.exists()
    finally:
        holder.kill()
        holder.wait()
    assert [v.key for v in venv_cache.evict(rootfs, keep="c" * 16)] == ["b" * 16]


def test_bad_bounds_are_one_line(tmp_path, monkeypatch):
    from edgekit.core import venv_cache
    from edgekit.core.errors import UsageError

    for name, value in ((venv_cache.MAX_VENVS_ENV, "many"), (venv_cache.MAX_VENVS_ENV, "0"), (venv_cache.MAX_GB_ENV, "nan")):
        monkeypatch.setenv(name, value)
        with pytest.raises(UsageError, match="EDGEKIT_EMULATE_MAX_VENVS"):
            venv_cache.limits()
        monkeypatch.delenv(name)


# -- through the CLI, on the cached arm64 rootfs (root) ----------------------------------------------


@pytest.fixture(scope="module")
def rootfs_ready():
    from edgekit.emulate.rootfs import default_cache_dir, find_rootfs

    if os.geteuid() != 0:
        pytest.skip("edgekit verify --emulate needs root")
    missing = [tool for tool in ("qemu-aarch64-static", "unshare") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed; apt-get install qemu-user-static")
    found = find_rootfs(default_cache_dir(), "bookworm")
    if found is None:
        pytest.skip(f"no cached bookworm arm64 rootfs in {default_cache_dir()}; run bash benchmarks/emulated_verify.sh")
    return found


@pytest.fixture(scope="module")
def torchscript_bundle(digits_static, tmp_path_factory) -> Path:
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    base = tmp_path_factory.mktemp("emulate-errors")
    export(digits_static, base / "export", formats=("torchscript", "onnx"), target="rpi4")
    return build_bundle(base / "export", "rpi4", base / "rpi4-ts", fmt="torchscript")


def venv_folders(rootfs) -> set[str]:
    from edgekit.core.venv_cache import venvs_dir

    folder = venvs_dir(rootfs.path)
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def test_torchscript_bundle_with_its_index_out_of_reach(rootfs_ready, torchscript_bundle):
    from edgekit.emulate.index_check import unreachable

    problem = unreachable(TORCH_CPU)
    if problem is None:
        pytest.skip(f"{TORCH_CPU} is reachable here: this checks the machine that cannot reach it (and would install torch)")
    before = venv_folders(rootfs_ready)
    started = time.monotonic()
    result = runner.invoke(app, ["verify", str(torchscript_bundle), "--emulate", "--timeout", "300"])
    line = one_error_line(result, 1)
    assert line.startswith(f"Error: the package index {TORCH_CPU} named by the bundle's requirements.txt is not "
                           f"reachable from this machine ({problem})")
    assert "--index-url" in line and "--wheels" in line and "numpy" not in line
    assert time.monotonic() - started < 120  # said before minutes of emulated pip
    assert {p for p in venv_folders(rootfs_ready) - before if not p.startswith(".")} == set()  # nothing installed


def test_a_fallback_index_with_only_a_cuda_torch_is_refused(rootfs_ready, torchscript_bundle):
    need_pypi()
    before = venv_folders(rootfs_ready)
    result = runner.invoke(app, ["verify", str(torchscript_bundle), "--emulate", "--timeout", "300", "--index-url", PYPI])
    line = one_error_line(result, 1)
    assert line.startswith(f"Error: {PYPI} (--index-url) has torch ") and "only as a CUDA build" in line
    assert "not installed" in line and TORCH_CPU in line
    new = {p for p in venv_folders(rootfs_ready) - before if not p.startswith(".")}
    assert new == set()  # no venv folder, no torch: nothing was installed


def test_a_bad_cache_bound_is_a_usage_error(rootfs_ready, torchscript_bundle):
    result = runner.invoke(app, ["verify", str(torchscript_bundle), "--emulate"],
                           env={"EDGEKIT_EMULATE_MAX_VENVS": "lots"})
    assert "EDGEKIT_EMULATE_MAX_VENVS must be" in one_error_line(result, 2)


@pytest.mark.slow
def test_the_bound_evicts_on_a_real_run_and_edgekit_cache_shows_the_venvs(rootfs_ready, digits_static, tmp_path):
    """A cached ONNX bundle's run on a hard-linked copy of the rootfs, keeping one venv: the others go,
    the run says so, and ``edgekit cache`` lists what is left with its size."""
    from edgekit.bundle.build import build_bundle
    from edgekit.core.cache import TAG_NAME
    from edgekit.emulate.venv import requirements_key
    from edgekit.core.venv_cache import MARKER, list_venvs, tree_bytes, venvs_dir
    from edgekit.export.api import export

    export(digits_static, tmp_path / "export", formats=("onnx",), target="rpi4")
    bundle = build_bundle(tmp_path / "export", "rpi4", tmp_path / "rpi4")
    key = requirements_key((bundle / "requirements.txt").read_text(encoding="utf-8"), [], rootfs_ready.python)
    real = venvs_dir(rootfs_ready.path)
    if not (real / key / MARKER).is_file():
        pytest.skip("this bundle's venv is not cached; run bash benchmarks/emulated_verify.sh first (downloads nothing here)")
    others = {v.key for v in list_venvs(rootfs_ready.path) if v.key != key}
    if not others:
        pytest.skip("the cached rootfs holds no other venv to evict")
    cache = tmp_path / "cache"
    (cache / "rootfs").mkdir(parents=True)
    shutil.copy2(rootfs_ready.path.parent / TAG_NAME, cache / "rootfs" / TAG_NAME)
    copy = cache / "rootfs" / rootfs_ready.path.name
    subprocess.run(["cp", "-al", str(rootfs_ready.path), str(copy)], check=True, timeout=600)  # links, not bytes
    # a hard-linked lock file is the same inode: a run elsewhere holding a real venv in use (another
    # test worker) would hold the copy's too, and rightly stop its eviction. The copy gets its own.
    for lock in [*venvs_dir(copy).glob(".*.lock"), *venvs_dir(copy).glob(".*.use")]:
        lock.unlink()
        lock.touch()
    try:
        env = {"EDGEKIT_CACHE_DIR": str(cache), "EDGEKIT_EMULATE_MAX_VENVS": "1"}
        out = tmp_path / "verify.json"
        result = runner.invoke(app, ["verify", str(bundle), "--emulate", "--no-serve", "--no-bench", "--timeout", "600",
                                     "--json", str(out)], env=env)
        assert result.exit_code == 0, result.output
        left = {v.key for v in list_venvs(copy)}
        assert left == {key}
        notes = json.loads(out.read_text())["notes"]
        for gone in others:
            assert any(f"removed the venv {gone}" in note and "to keep at most 1 venvs" in note for note in notes), notes
            assert f"emulation cache: removed the venv {gone}" in result.stderr
            assert (real / gone / MARKER).is_file()  # the real cache keeps its own
        listed = runner.invoke(app, ["cache", "rootfs", "--json"], env={"EDGEKIT_CACHE_DIR": str(cache)})
        assert listed.exit_code == 0, listed.output
        venvs = json.loads(listed.stdout)["rootfs_venvs"]
        assert [(v["key"], v["rootfs"], v["complete"]) for v in venvs] == [(key, copy.name, True)]
        assert abs(venvs[0]["bytes"] - tree_bytes(venvs_dir(copy) / key)) < 1 << 20  # what the folder holds
        shown = runner.invoke(app, ["cache", "rootfs"], env={"EDGEKIT_CACHE_DIR": str(cache), "COLUMNS": "200"})
        assert f"{copy.name}/{key}" in shown.stdout and "onnxruntime" in shown.stdout
    finally:
        shutil.rmtree(copy, ignore_errors=True)
