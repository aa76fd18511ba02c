"""A pipeline run resolves each format and loads the target once, at its front (the plan), and hands
the objects down to export, quantize, bench and the native bundle (issue 36: before, one run with one
format looked the format up by name 18 times)."""

from __future__ import annotations

import json
from collections import Counter

from edgekit import formats
from edgekit.core import targets
from edgekit.pipeline.run import PipelineConfig, run_pipeline


def test_one_pipeline_run_looks_each_format_up_once_and_loads_the_target_once(tmp_path, monkeypatch):
    lookups, loads = Counter(), []
    real_get, real_parse = formats.get, targets.parse_target

    def counting_get(name):
        lookups[name] += 1
        return real_get(name)

    def counting_parse(*args, **kwargs):
        loads.append(args)
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(formats, "get", counting_get)
    # every load_target ends here, also for a module that imported load_target by name
    monkeypatch.setattr(targets, "parse_target", counting_parse)
    config = PipelineConfig(source="tiny_models:tiny_net", source_options={"input_shapes": ["Nx3x6x6"]},
                            methods=("dynamic",), formats=("onnx",), out=tmp_path / "run", processes=1, warmup=0,
                            min_runs=3, min_time_s=0, emulate=False, reference=False,
                            budget_overrides={"max_p99_ms": "60s", "max_peak_rss_mb": "8GiB"})
    result = run_pipeline(config)

    assert lookups == {"onnx": 1}
    assert len(loads) == 1
    # the run did every stage: both files exported, checked and timed
    summary = json.loads((tmp_path / "run" / "pipeline.json").read_text())
    assert {row["variant"] for row in summary["variants"]} == {"fp32-onnx", "int8-dynamic-onnx"}
    assert [row.variant for row in result.rows] == ["fp32-onnx", "int8-dynamic-onnx"]
    assert all(row.p50_ms > 0 for row in result.rows)
