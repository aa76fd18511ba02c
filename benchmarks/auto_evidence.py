"""``quantize --auto`` judged on what it is given, side by side in one run: per candidate, the binding
metric on synthetic inputs, on the held-out fifth of --calib and on --eval-data; the recipe chosen each
time; the wall time of each --auto run (ratio to the synthetic run: dynamic only, static needs --calib)
and the share of it the candidates' judging took (refused candidates' judging is not counted).

    .venv/bin/python benchmarks/auto_evidence.py

Models: ``tests/fidelity/fidelity_models.wide_score`` (one probability per sample; --calib holds a
60x louder row in every ten, --eval-data only typical rows) and ``wide_vad`` (a GRU whose state is an
input and an output, declared with --state; one stream of 120 calls as --calib). ONNX, target x86-64."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fidelity"))
import fidelity_models as fm  # noqa: E402


def run_auto(model: Path, out: Path, **options) -> dict:
    from edgekit.quantize.search.auto import NoCandidateError, quantize_auto

    start = time.monotonic()
    try:
        _, manifest, candidates = quantize_auto(model, out, "x86-64", formats=("onnx",), force=True, **options)
        judged = manifest.files[0].metrics["fidelity"]
        verdict = f"{judged['verdict']} ({judged['evidence']})"
    except NoCandidateError as exc:
        candidates, verdict = exc.candidates, "none chosen"
    seconds = time.monotonic() - start
    rows, judging = {}, 0.0
    for c in candidates:
        if c.method == "fp32":
            continue
        judging += (c.fidelity or {}).get("seconds") or 0.0
        rows[c.name] = (f"refused: {c.refused.split('float model: ')[-1].split(' (')[0]}" if c.refused
                        else c.skipped and "skipped" or f"{c.metric} {c.value:.4f}" + (" *" if c.chosen else ""))
    return {"seconds": round(seconds, 2), "judging_s": round(judging, 2), "judging_share": round(judging / seconds, 3),
            "verdict": verdict, "candidates": rows}


def main() -> None:
    os.environ.setdefault("EDGEKIT_NO_PROGRESS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        score = fm.wide_score(work / "score.onnx")
        calib, typical = fm.loud_calibration()
        np.save(work / "calib.npy", calib)
        np.save(work / "eval.npy", typical)
        vad = fm.wide_vad(work / "vad.onnx")
        np.savez(work / "stream.npz", x=fm.wide_stream(120))
        cases = [
            ("one probability: synthetic", score, {}),
            ("one probability: --calib (held-out fifth)", score, {"calib": work / "calib.npy"}),
            ("one probability: --calib + --eval-data", score, {"calib": work / "calib.npy",
                                                               "eval_data": work / "eval.npy"}),
            ("GRU state: synthetic streams", vad, {"state_pairs": ["carry=carry2"]}),
            ("GRU state: --calib stream (held-out fifth)", vad, {"calib": work / "stream.npz",
                                                                 "state_pairs": ["carry=carry2"]}),
        ]
        baseline = {}
        for index, (name, model, options) in enumerate(cases):
            os.environ["EDGEKIT_CACHE_DIR"] = str(work / f"cache{index}")  # every run calibrates
            row = run_auto(model, work / f"q{index}", **options)
            base = baseline.setdefault(model, row["seconds"])
            print(json.dumps({"case": name, **row, "time_vs_synthetic": round(row["seconds"] / base, 2)}))


if __name__ == "__main__":
    main()
