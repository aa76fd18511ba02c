"""Held-out real models through `edgekit quantize`, as a new user runs them: the verdict and binding
figure edgekit prints beside the fidelity measured here independently on representative data, and
the time the judgement takes inside the quantize run, side by side in one run.

    .venv/bin/python benchmarks/fidelity_real_models.py [--quick] [--models=vad,rec,cls,det]

Models (from PyPI packages, nothing downloaded at run time; see tests/fidelity/real_model_data.py):
silero-vad (recurrent, state in/out, If branches, one probability a call), PP-OCRv4's text-line
recognizer (CTC), its text detector (dynamic H x W) and PP-OCR's orientation classifier. Data is made
here: audio streams (voiced bursts, chirps, noise, silence), text lines and pages rendered with
Pillow's font. Each model goes through --method dynamic (judged on --eval-data) and --method static
(--calib, judged on --eval-data).

Independent figures are computed with plain ONNX Runtime sessions on the file edgekit wrote; where
edgekit refused (nothing written), on ONNX Runtime's own int8 file made with the same recipe (U8S8,
per channel; its own quantize_dynamic / quantize_static, MinMax over the same calibration data), so
the refusal can be checked against what int8 does to that model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fidelity"))
import real_model_data as data  # noqa: E402

EDGEKIT = [sys.executable, "-m", "edgekit"]


def make_data(work: Path, quick: bool) -> dict:
    n = 2 if quick else 1
    sets = {
        "vad": (data.write_vad_streams(work / "vad_calib", 8 // n, 6.0, 100),
                data.write_vad_streams(work / "vad_eval", 4 // n, 8.0, 200)),
        "rec": (work / "rec_calib", work / "rec_eval"),
        "cls": (work / "cls_calib", work / "cls_eval"),
        "det": (data.write_pages(work / "det_calib", 16 // n, 5), data.write_pages(work / "det_eval", 8 // n, 6)),
    }
    data.write_lines(sets["rec"][0], 64 // n, 1)
    data.write_lines(sets["rec"][1], 32 // n, 2)
    data.write_lines(sets["cls"][0], 64 // n, 3, data.CLS_HW, flips=True)
    data.write_lines(sets["cls"][1], 32 // n, 4, data.CLS_HW, flips=True)
    return sets


OPTIONS = {
    "vad": [],  # streams: one .npz per stream (input, sr); the state (2, N, 128) is fed back by edgekit
    "rec": ["--calib-preprocess", f"resize=48x320,{data.PREPROCESS}"],
    "cls": ["--calib-preprocess", f"resize=48x192,{data.PREPROCESS}"],
    "det": ["--calib-preprocess", f"resize=480x640,{data.PREPROCESS}"],
}
NAMES = {"vad": "silero-vad (state, If, 1 prob)", "rec": "PP-OCRv4 rec (CTC)", "cls": "PP-OCR cls (0/180)",
         "det": "PP-OCRv4 det (H x W map)"}


def edgekit_quantize(model: str, method: str, calib: Path, evaluation: Path, out: Path) -> dict:
    args = [*EDGEKIT, "quantize", str(data.model_file(model)), "--method", method, "--eval-data", str(evaluation),
            *OPTIONS[model], "--out", str(out)]
    if method == "static":
        args += ["--calib", str(calib)]
    started = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        line = next((x for x in done.stderr.splitlines() if x.startswith("Error:")), done.stderr.strip()[-200:])
        line = line.replace(f"{out.parent}/", "").replace(f"{data.model_file(model).parent}/", "")
        return {"written": False, "wall": wall, "printed": line.split(": ", 1)[-1], "exit": done.returncode}
    (entry,) = json.loads((out / "manifest.json").read_text())["files"]
    fidelity = entry["metrics"]["fidelity"]
    head = fidelity["headline"]
    return {"written": True, "wall": wall, "exit": 0, "judge_s": fidelity["seconds"],
            "printed": f"{fidelity['verdict'].upper()} {head['metric']} {head['value']:.4g} (floor {head['floor']})",
            "path": out / "model.onnx"}


def _lifted(model: Path, work: Path) -> Path:
    """Constant weights (the If branches' too) as initializers, at opset 13 or above (per-channel QDQ needs it)."""
    return data.lifted(model, work / f"{model.stem}-lifted.onnx", opset=13)


def ort_int8(model: str, method: str, calib: Path, work: Path) -> Path | None:
    """ONNX Runtime's own int8 file (edgekit not involved); None where ORT's static QDQ cannot reach
    the model's layers (silero-vad's are all inside If branches)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

    source = _lifted(data.model_file(model), work)
    out = work / f"ort-{model}-{method}.onnx"
    if method == "dynamic":
        quantize_dynamic(str(source), str(out), per_channel=True, weight_type=QuantType.QInt8,
                         extra_options={"EnableSubgraph": True})
        return out
    if model == "vad":
        return None

    class Images(CalibrationDataReader):
        def __init__(self):
            batch = data.image_batch(calib)
            self.rows = iter([{"x": batch[i:i + 1]} for i in range(len(batch))])

        def get_next(self):
            return next(self.rows, None)

    quantize_static(str(source), str(out), Images(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


def independent(model: str, int8: Path | None, evaluation: Path) -> str:
    if int8 is None:
        return "ORT static reaches no layer (file = float)"
    if model == "vad":
        ref, got = data.vad_probabilities(data.model_file("vad"), evaluation), data.vad_probabilities(int8, evaluation)
        first = slice(0, 256)  # the calls edgekit judges on (EVAL_MAX_SAMPLES)
        return (f"correlation {np.corrcoef(ref[first], got[first])[0, 1]:.3f} (all {len(ref)} calls: "
                f"{np.corrcoef(ref, got)[0, 1]:.3f}), max abs {np.abs(ref - got).max():.3f}")
    batch = data.image_batch(evaluation)
    ref, got = data.run(data.model_file(model), batch, rows=1), data.run(int8, batch, rows=1)
    if model == "rec":
        keys = data.rec_keys(data.model_file("rec"))
        same = np.mean([a == b for a, b in zip(data.decode(ref, keys), data.decode(got, keys))])
        return f"lines read as float {same:.3f} ({len(batch)} lines)"
    if model == "cls":
        return f"argmax agreement {(ref.argmax(1) == got.argmax(1)).mean():.3f} ({len(batch)} lines)"
    return f"text-mask IoU {data.text_mask_iou(ref, got):.3f} ({len(batch)} pages)"


def main() -> None:
    quick = "--quick" in sys.argv
    models = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--models=")),
                  ["vad", "rec", "cls", "det"])
    with tempfile.TemporaryDirectory(prefix="fidelity-real-") as tmp:
        work = Path(tmp)
        sets = make_data(work, quick)
        rows = []
        for model in models:
            calib, evaluation = sets[model]
            for method in ("dynamic", "static"):
                got = edgekit_quantize(model, method, calib, evaluation, work / f"q-{model}-{method}")
                if got["written"]:
                    theirs, whose = independent(model, got["path"], evaluation), "edgekit's file"
                    share = f"{got['judge_s']:.1f} / {got['wall']:.1f} = {got['judge_s'] / got['wall']:.2f}"
                else:
                    int8 = ort_int8(model, method, calib, work)
                    theirs, whose = independent(model, int8, evaluation), "ORT's own int8"
                    share = f"refused after {got['wall']:.1f} s"
                rows.append((NAMES[model], method, got["printed"] if got["written"] else f"REFUSED: {got['printed']}",
                             f"{theirs} [{whose}]", share))
                print(" | ".join(rows[-1]), flush=True)
    print()
    print("| model | method | edgekit prints | measured here | judging s / quantize s |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
