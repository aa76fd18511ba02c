"""The board-runtime layer: one class per runtime, and every script that runs a model goes through it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from edgekit import formats
from edgekit.board.runtimes import RUNTIMES, open_model, runtime_class

ROOT = Path(__file__).resolve().parents[2] / "edgekit"
RUNTIME_MODULES = ("onnxruntime", "executorch.extension", "executorch.runtime")
# Where a model may be loaded by a runtime's own API: the board's runtime classes, plus the
# export-time tools that inspect or write programs (never the scripts that run a model).
ALLOWED = {"edgekit/board/runtimes", "edgekit/formats/executorch.py", "edgekit/formats/onnx_export.py",
           "edgekit/formats/torchscript_backend.py", "edgekit/quantize", "edgekit/core/onnx_files.py",
           "edgekit/bench/reference.py", "edgekit/models", "edgekit/train",
           "edgekit/llm/program.py"}  # writes LLM programs: imports the LLM ops' export-time (meta) kernels


def _loads_a_runtime(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith(RUNTIME_MODULES)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(RUNTIME_MODULES):
            found.append(node.module)
        elif isinstance(node, ast.Attribute) and node.attr in ("InferenceSession", "_load_program"):
            found.append(node.attr)
        elif (isinstance(node, ast.Attribute) and node.attr == "load" and isinstance(node.value, ast.Attribute)
              and node.value.attr == "jit"):
            found.append("torch.jit.load")
    return found


def test_no_script_loads_a_runtime_itself():
    """The bench runner, output check, probe, serving, evaluation and emulation use edgekit.board."""
    offenders = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        if any(rel == allowed or rel.startswith(allowed + "/") for allowed in ALLOWED):
            continue
        found = _loads_a_runtime(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            offenders[rel] = sorted(set(found))
    assert not offenders, f"load models through edgekit.board.runtimes instead: {offenders}"


def test_the_check_notices_a_script_that_does():
    tree = ast.parse("import onnxruntime as ort\nsession = ort.InferenceSession('m.onnx')\n")
    assert _loads_a_runtime(tree) == ["onnxruntime", "InferenceSession"]
    assert _loads_a_runtime(ast.parse("import torch\nm = torch.jit.load('m.pt')\n")) == ["torch.jit.load"]


def test_every_format_has_one_runtime_class():
    assert set(RUNTIMES) == set(formats.names())
    for name in RUNTIMES:
        cls = runtime_class(name)
        assert cls.format == name and set(cls.suffixes) == set(formats.get(name).files.suffixes)
        assert cls.spec_match in ("names", "at_most", "count")


def test_a_copied_board_package_finds_the_same_runtimes(tmp_path):
    """Runtimes are found by file name (``<format>_runtime.py`` naming a ``RUNTIME``): the package a
    bundle carries, on a Python with no edgekit, finds exactly the host's built-in ones."""
    import json
    import subprocess
    import sys

    from edgekit.board import BUNDLED_NAME
    from edgekit.board.entries import install

    install(tmp_path, entries=(), formats=())
    code = (f"import json, sys; sys.path.insert(0, {str(tmp_path)!r}); "
            f"from {BUNDLED_NAME}.runtimes import RUNTIMES, runtime_class; "
            "print(json.dumps({f: runtime_class(f).format for f in RUNTIMES}))")
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(json.loads(done.stdout).items()) == [(name, name) for name in RUNTIMES]  # same formats, same order
    assert "native" not in RUNTIMES  # native_runtime.py is the native runner's class, not a format's


@pytest.fixture(scope="module")
def every_format(digits_checkpoint, tmp_path_factory) -> Path:
    from edgekit.export.api import export

    names = tuple(n for n in formats.names() if formats.get(n).available())
    out = tmp_path_factory.mktemp("board-layer") / "fp32"
    export(digits_checkpoint, out, formats=names, target="rpi4")
    return out


@pytest.mark.parametrize("fmt", formats.names())
def test_each_runtime_reproduces_the_float_model(every_format, fmt):
    """Each class loads its format and computes the float model's outputs (reference.npz, written by torch)."""
    from edgekit.board.inputs import read_reference

    if not formats.get(fmt).available():
        pytest.skip(f"the {formats.get(fmt).host.extra} extra is not installed")
    model = open_model(fmt, every_format / formats.get(fmt).files.file_name, 1)
    assert model.info["name"] and model.info["version"]
    for batch, (inputs, want) in read_reference(every_format / "reference.npz").items():
        got = model.predict(inputs, ["input"])
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)
    specs = model.input_specs()
    assert len(specs) == 1 and specs[0]["dtype"] == "float32"
