"""Held-out real models through the CLI, as a new user runs them: edgekit's verdict must agree with
the fidelity measured here, independently (ONNX Runtime sessions straight, the rec keys to read the
lines), on representative data made at run time (``real_model_data``).

* silero-vad (recurrent, state in/out, ``If`` branches, one probability a call): dynamic int8 is
  refused on streams with the state carried; an int8 file made with ONNX Runtime's own quantizer
  correlates as badly over the same calls.
* PP-OCRv4's text-line recognizer (CTC): dynamic int8 is refused; ONNX Runtime's own int8 file
  reads almost none of the lines as the float model reads them.
* PP-OCR's orientation classifier: dynamic int8 passes, and its reported arg-max agreement is the
  one counted here on the file it wrote.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import real_model_data as data
from edgekit.cli.app import app

pytestmark = pytest.mark.slow
runner = CliRunner()


def _ort_dynamic_int8(model, out, subgraphs: bool = False):
    """ONNX Runtime's quantize_dynamic with edgekit's rpi4 recipe (U8S8, per channel), edgekit not
    involved. ORT quantizes only weights held as initializers: Constant weights (the If branches'
    too) are made initializers first. ``subgraphs``: quantize inside the If branches."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = data.lifted(model, out.with_name("lifted.onnx"))
    quantize_dynamic(str(source), str(out), per_channel=True, weight_type=QuantType.QInt8,
                     extra_options={"EnableSubgraph": subgraphs})
    return out


def _refusal(result) -> str:
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.stderr.strip().splitlines() if not line.startswith("Warning:")]
    assert line.startswith("Error: ") and "Traceback" not in result.output
    return line


def test_silero_vad_dynamic_int8_is_refused_on_audio_streams_as_its_probabilities_diverge(tmp_path):
    streams = data.write_vad_streams(tmp_path / "streams", 2, 4.0, seed=200)  # 2 x 125 calls of 32 ms
    model = data.model_file("vad")
    result = runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--eval-data", str(streams),
                                 "--out", str(tmp_path / "q")])  # the state's batch axis found, not declared
    line = _refusal(result)
    match = re.search(r"output 'output' \(scalar\) diverges from the float model: correlation ([0-9.]+) < 0\.95 "
                      r"\(measured on --eval-data .* \(2 streams, 250 steps\)\)", line)
    assert match, line
    assert not (tmp_path / "q").exists()
    # independently: ONNX Runtime's own int8 file over the same calls, the state carried
    int8 = _ort_dynamic_int8(model, tmp_path / "ort_int8.onnx", subgraphs=True)
    reference, candidate = data.vad_probabilities(model, streams), data.vad_probabilities(int8, streams)
    assert len(reference) == 250 and reference.max() > 0.5  # the audio makes the detector fire
    assert np.corrcoef(reference, candidate)[0, 1] < 0.95 and float(match.group(1)) < 0.95
    assert np.abs(reference - candidate).max() > 0.1 * (reference.max() - reference.min())


def test_ppocr_recognizer_dynamic_int8_is_refused_as_it_reads_other_text(tmp_path):
    lines = tmp_path / "lines"
    texts = data.write_lines(lines, 16, seed=2)
    model = data.model_file("rec")
    result = runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--eval-data", str(lines),
                                 "--calib-preprocess", f"resize=48x320,{data.PREPROCESS}", "--out", str(tmp_path / "q")])
    line = _refusal(result)
    # the metric that binds for a CTC output, not the cosine of the logits
    assert re.search(r"int8 dynamic onnx: output '.+' \(sequence\) diverges from the float model: "
                     r"(timestep|symbol)_agreement [0-9.]+ < 0\.9 \(measured on --eval-data .* \(16 samples\)\)", line), line
    assert not (tmp_path / "q").exists()
    keys, batch = data.rec_keys(model), data.image_batch(lines)
    read_float = data.decode(data.run(model, batch), keys)
    assert sum(a.strip() == b for a, b in zip(read_float, texts)) >= len(texts) // 2  # the float model reads them
    read_int8 = data.decode(data.run(_ort_dynamic_int8(model, tmp_path / "ort_int8.onnx"), batch), keys)
    assert sum(a == b for a, b in zip(read_float, read_int8)) <= len(texts) // 4


def test_ppocr_orientation_classifier_dynamic_int8_passes_with_the_agreement_counted_here(tmp_path):
    lines = tmp_path / "lines"
    data.write_lines(lines, 32, seed=4, hw=data.CLS_HW, flips=True)
    model = data.model_file("cls")
    out = tmp_path / "q"
    result = runner.invoke(app, ["quantize", str(model), "--method", "dynamic", "--eval-data", str(lines),
                                 "--calib-preprocess", f"resize=48x192,{data.PREPROCESS}", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads((out / "manifest.json").read_text())["files"]
    fidelity = entry["metrics"]["fidelity"]
    assert (fidelity["evidence"], fidelity["verdict"], fidelity["samples"]) == ("eval-data", "pass", 32)
    (output,) = fidelity["outputs"]
    batch = data.image_batch(lines)
    # one image a call, as edgekit judges and a board runs it (dynamic int8 scales by the batch it sees)
    reference = data.run(model, batch, rows=1).argmax(1)
    candidate = data.run(out / "model.onnx", batch, rows=1).argmax(1)
    assert output["kind"] == "classes"
    assert output["metrics"]["top1_agreement"] == pytest.approx((reference == candidate).mean())
    assert (reference == candidate).mean() >= 0.8
