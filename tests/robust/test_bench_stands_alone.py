"""A pipeline variant whose benchmark fails is a row with its reason; the other variants are still benched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.bench.api import bench
from edgekit.core.errors import BenchError
from edgekit.pipeline.run import _bench_each_standing_alone, _without_files

SETTINGS = dict(min_runs=5, min_time_s=0.0, warmup=1, processes=1, reference=False)


def _reshape_model(path: Path, length: int) -> Path:
    """Relu then Reshape to ``length``: a valid file ORT loads; with length != 4 its first inference fails."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([length], dtype=np.int64), "shape")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=[shape]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_variant_that_fails_its_bench_is_left_out_with_its_reason(tmp_path):
    good = _reshape_model(tmp_path / "good.onnx", 4)
    bad = _reshape_model(tmp_path / "bad.onnx", 7)
    said = []
    results, unbenched = _bench_each_standing_alone(bench, [good, bad], SETTINGS, said.append)
    assert [Path(r.model.path).name for r in results] == ["good.onnx"]
    assert results[0].timing.p50 > 0
    assert [path for path, _ in unbenched] == [bad]
    assert "bad.onnx" in unbenched[0][1] and "Reshape" in unbenched[0][1]
    assert any("benching each variant alone" in line for line in said)


def test_every_variant_failing_is_the_runs_error(tmp_path):
    bad = _reshape_model(tmp_path / "bad.onnx", 7)
    with pytest.raises(BenchError, match="bad.onnx"):
        _bench_each_standing_alone(bench, [bad], SETTINGS, lambda _: None)


def test_all_passing_is_one_interleaved_bench(tmp_path):
    files = [_reshape_model(tmp_path / f"m{i}.onnx", 4) for i in range(2)]
    said = []
    results, unbenched = _bench_each_standing_alone(bench, files, SETTINGS, said.append)
    assert len(results) == 2 and unbenched == [] and said == []


def test_the_failed_file_leaves_its_manifest():
    from edgekit.formats.artifacts import Manifest

    class Entry:
        def __init__(self, path):
            self.path = path

    folder = Path("/x")
    manifest = Manifest(kind="export", model={}, inputs=(), outputs=(), files=(Entry("a.onnx"), Entry("b.onnx")))
    kept = _without_files([(folder, manifest)], {folder / "b.onnx"})
    assert [e.path for e in kept[0][1].files] == ["a.onnx"]
