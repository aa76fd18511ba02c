"""The formats an aarch64 edgekit-run counts (``edgekit.emulate.icount.COUNTED``) and the library
runtimes a native bundle ships (``edgekit.bundle.native``) are declared once each: every entry names a
build that exists, a model file name of its format, and a way into a bundle."""

from __future__ import annotations

import importlib
from pathlib import Path

from edgekit import formats
from edgekit.bundle import native
from edgekit.emulate.icount import COUNTED, RUNNERS, SOURCE_BUILT, companion_files


def test_every_counted_format_names_a_runner_build_that_exists_and_a_file_of_its_format():
    for fmt, counted in COUNTED.items():
        module, function = counted.build.split(":")
        assert callable(getattr(importlib.import_module(module), function)), counted.build
        assert fmt in formats.names()
        assert Path(counted.model_name).suffix in formats.get(fmt).files.suffixes
    assert set(RUNNERS) == set(COUNTED) and SOURCE_BUILT == ("ncnn",)


def test_a_models_companion_files_are_the_ones_its_runtime_reads_beside_it(tmp_path):
    graph, weights = tmp_path / "model.ncnn.param", tmp_path / "model.ncnn.bin"
    graph.write_text("7767517\n")
    assert companion_files(graph, "ncnn") == []  # the weights are not there
    weights.write_bytes(b"\0" * 8)
    assert companion_files(graph, "ncnn") == [weights]
    (tmp_path / "model.bin").write_bytes(b"\0")
    assert companion_files(tmp_path / "model.onnx", "onnx") == []  # ONNX names its external data itself


def test_every_library_runtime_has_a_way_into_a_bundle():
    assert set(native._LIBRARY_ADDERS) == set(native.LIBRARY_RUNTIMES)
    for name in formats.names():
        spec = formats.get(name)
        if native.runs_natively(spec) and not spec.board.native_runner:
            assert spec.board.runtime in native._LIBRARY_ADDERS
