"""Every format decision comes from the table in ``edgekit.formats``.

A format's name may appear as a literal only in ``edgekit/formats/`` and the CLI (help texts),
plus the files below, each for a stated reason. A new literal elsewhere fails this test: ask
the table (``formats.get(name).<field>``) instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from edgekit import formats

ROOT = Path(__file__).resolve().parents[2] / "edgekit"

# Scripts that run on the board or under emulation with no edgekit installed: they cannot read
# the table, so a test below holds their format lists to it.
BOARD_PACKAGE = "edgekit/board/"  # the runtimes and scripts bundles carry (no edgekit on a board)
BOARD_SCRIPTS = {
    "edgekit/serve/standalone.py": "serve.py shipped in bundles (ONNX Runtime only)",
}
# The same word with another meaning.
OTHER_MEANING = {
    "edgekit/formats/artifacts.py": "distribution names whose versions a manifest records",
    "edgekit/quantize/layers.py": "how --exclude names layers: torch modules or ONNX nodes",
    "edgekit/quantize/routes/onnx.py": "the layer-name kind, and torch.onnx's exporter route",
    "edgekit/quantize/api.py": "model source kinds (an .onnx file, hf: configs)",
    "edgekit/sources/model_source.py": "model source kinds (an .onnx file)",
    "edgekit/quantize/search/auto.py": "model source kinds (an .onnx file, hf: configs)",
    "edgekit/models/registry.py": "torch.onnx's exporter route",
    "edgekit/core/venv_cache.py": "distribution names a cached venv holds",
    "edgekit/native/wheel.py": "the executorch distribution whose wheel the native runner builds against",
    "edgekit/native/build.py": "the executorch folder of that wheel's include/ tree",
    "edgekit/bench/workers.py": "the bench's reference workload is an ONNX file edgekit writes itself",
    "edgekit/sources/torchscript_source.py": "model source kinds (a TorchScript file as the float model)",
    "edgekit/quantize/routes/torchscript.py": "model source kinds (a TorchScript file as the float model)",
    "edgekit/emulate/icount.py": "the native edgekit-run builds (one backend per binary), as native/build.py names them",
    "edgekit/estimate/on_target.py": "the .pte default of the native runner build a file is counted with",
    "edgekit/native/ncnn_source.py": "the ncnn distribution whose source distribution the native library is built from",
    "edgekit/native/ncnn_build.py": "the ncnn backend of edgekit-run (one backend per binary), as native/build.py names them",
    "edgekit/bundle/native.py": "board runtimes by distribution (Board.runtime) whose library edgekit-run runs; ncnn's "
                                "distribution has its format's name",
}
ALLOWED = {**BOARD_SCRIPTS, **OTHER_MEANING}


def _literals(path: Path, names: set[str]) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                  and id(node) not in docstrings)


def test_no_format_name_outside_the_table():
    names = set(formats.names())
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        if rel.startswith(("edgekit/formats/", "edgekit/cli/", BOARD_PACKAGE)) or rel in ALLOWED:
            continue
        lines = _literals(path, names)
        if lines:
            found[rel] = lines
    assert not found, f"format names decided outside edgekit/formats (ask the table instead): {found}"


def test_the_allow_list_is_not_stale():
    names = set(formats.names())
    stale = [rel for rel in ALLOWED if (ROOT.parent / rel).exists() and not _literals(ROOT.parent / rel, names)]
    assert not stale, f"no format literal left in {stale}: remove them from the allow-list"


def test_the_board_package_knows_every_format():
    from edgekit.board.manifest import FORMATS
    from edgekit.board.runtimes import RUNTIMES, runtime_class

    assert set(FORMATS) == set(RUNTIMES) == set(formats.names())
    for name in formats.names():  # the board tells a file's format as the table does
        assert set(runtime_class(name).suffixes) == set(formats.get(name).files.suffixes), name


def test_table_entries_are_complete_and_consistent():
    seen_files = set()
    for name in formats.names():
        entry = formats.get(name)
        assert entry.name == name and entry.files.file_name not in seen_files
        seen_files.add(entry.files.file_name)
        assert formats.by_file_name(entry.files.file_name) is entry
        assert all(formats.by_suffix(suffix) is entry for suffix in entry.files.suffixes)
        assert entry.board.footprint_mb > 0 and entry.board.runtime
        if entry.available():
            ops = entry.ops()
            functions = ("export_float", "copy_quantized", "predictor", "check_file",
                         *(("data_files",) if entry.files.external_data else ()))
            for function in functions:
                assert callable(getattr(ops, function)), (name, function)
        from edgekit.board.runtimes import runtime_class

        assert runtime_class(name).format == name  # what serve, bench, check and probe run it with


def test_methods_and_formats_declare_what_they_take_consistently():
    """Consistency, not completeness: a format takes the methods its routes serve (none is required
    to take every method), every route names a format of the table, every method of routes writes
    at least one format, and every method names its precision."""
    import re

    from edgekit.quantize import registry

    names = set(formats.names())
    registry.method_names()
    assert {fmt for (_, fmt) in registry._ROUTES} <= names
    for method in registry.method_names():
        entry = registry.get_method(method)
        assert re.fullmatch(r"[a-z][a-z0-9]*", entry.config_type.precision) and entry.config_type.precision != "fp32"
        if entry.handler is None:
            written = registry.formats_for(entry.config_type)
            assert written, method
            for fmt in written:
                assert callable(registry.route_for(entry.config_type, fmt))
                assert method in registry.methods_for(fmt)
    for fmt in names:
        for method in registry.methods_for(fmt):
            assert fmt in registry.formats_for(registry.get_method(method).config_type)


def test_unknown_format_is_one_line_naming_the_table():
    from edgekit.core.errors import UsageError

    with pytest.raises(UsageError, match=f"unknown format 'no-such-format'; choose from: {', '.join(formats.names())}$"):
        formats.get("no-such-format")


def test_missing_extra_names_it(monkeypatch):
    from dataclasses import replace

    from edgekit.core.errors import UsageError

    entry = formats.get("executorch")
    entry = replace(entry, host=replace(entry.host, modules=("no_such_module_for_edgekit",)))
    with pytest.raises(UsageError, match=r"pip install 'edgekit-ml\[executorch\]'"):
        entry.require()


def test_import_edgekit_and_the_table_stay_light():
    import subprocess
    import sys

    code = ("import sys, edgekit, edgekit.formats as f; f.names(); "
            "heavy = [m for m in ('torch', 'onnxruntime', 'executorch', 'torchao', 'numpy') if m in sys.modules]; "
            "print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_whole_table_loads_whichever_format_module_is_imported_first():
    import subprocess
    import sys

    listed = []
    for first in ("edgekit.formats", *(f"edgekit.formats.{name}" for name in ("executorch", "onnx"))):
        code = f"import {first}, edgekit.formats as f; print(','.join(f.names()))"
        listed.append(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert len(set(listed)) == 1 and listed[0].strip() == ",".join(formats.names())
    orders = [formats.get(name).host.table_order for name in formats.names()]
    assert orders == sorted(orders)  # the built-in formats, in their declared order
