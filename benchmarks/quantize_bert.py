"""BERT-style encoder (6 layers, hidden 384, seq 128, batch 1, 1 thread): int8 that is really faster.

Side by side on the same float ONNX export, timed in one interleaved ``edgekit.bench`` session:

* fp32 (ONNX Runtime)
* edgekit's pick for x86 (``quantize --auto``: the fastest candidate within a 1-point fidelity
  budget, i.e. cosine >= 0.99 vs float)
* ONNX Runtime's ``quantize_dynamic`` with its defaults
* ONNX Runtime's ``quantize_static`` with its defaults (QDQ, S8S8, per-tensor, MinMax) on the
  same padded calibration set

The encoder is transformers' ``BertModel`` built locally from a config (random weights, nothing
downloaded); calibration and evaluation inputs are random token ids with padded rows.

    .venv/bin/python benchmarks/quantize_bert.py [--layers 6] [--calib-samples 32] [--min-time 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
SEQ = 128


def _token_blocks(folder: Path, samples: int, seed: int, vocab: int, block: int = 8) -> None:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for i in range(0, samples, block):
        lens = rng.integers(SEQ // 4, SEQ + 1, size=block)
        mask = (np.arange(SEQ)[None, :] < lens[:, None]).astype(np.int64)
        ids = rng.integers(1000, vocab, size=(block, SEQ)) * mask
        np.savez(folder / f"block{i // block:04d}.npz", input_ids=ids, attention_mask=mask)


def _cosine(ref: np.ndarray, got: np.ndarray) -> float:
    ref, got = ref.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    return float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--calib-samples", type=int, default=32)
    parser.add_argument("--min-time", type=float, default=3.0)
    parser.add_argument("--target", default="x86-64")
    args = parser.parse_args()
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise SystemExit("needs transformers (pip install transformers)")
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, quantize_dynamic, quantize_static

    from edgekit.bench.api import bench
    from edgekit.quantize.auto import quantize_auto
    from edgekit.quantize.calibration import open_calibration

    vocab = 30522
    config = {"model_type": "bert", "vocab_size": vocab, "hidden_size": args.hidden, "num_hidden_layers": args.layers,
              "num_attention_heads": args.hidden // 64, "intermediate_size": 4 * args.hidden,
              "max_position_embeddings": 512}
    with tempfile.TemporaryDirectory(prefix="bench-bert-") as tmp:
        tmp = Path(tmp)
        (tmp / "config.json").write_text(json.dumps(config))
        _token_blocks(tmp / "calib", args.calib_samples, 0, vocab)
        _token_blocks(tmp / "eval", 8, 1, vocab)  # held out: never calibrated on

        one = {"input_ids": np.random.default_rng(2).integers(1000, vocab, size=(1, SEQ)),
               "attention_mask": np.ones((1, SEQ), np.int64)}  # batch 1, a full 128-token row
        np.savez(tmp / "one.npz", **one)
        folder, manifest, candidates = quantize_auto(
            f"hf:{tmp}", tmp / "int8", args.target, calib=tmp / "calib", formats=("onnx",), max_drop=1.0,
            bench_settings={"threads": 1, "min_time_s": 0.5, "input_file": tmp / "one.npz"},
        )
        picked = manifest.file("onnx")
        print(f"BERT-style encoder: {args.layers} layers, hidden {args.hidden}, seq {SEQ}, batch 1, 1 thread, "
              f"target {args.target}")
        print("edgekit --auto candidates (fidelity budget: cosine >= 0.99):")
        for c in candidates:
            print(f"  {c.name:<18} {c.format:<6} p50 {c.p50_ms if c.p50_ms is not None else float('nan'):8.2f} ms  "
                  f"cosine {c.value if c.value is not None else float('nan'):.4f}  {'chosen' if c.chosen else ''}"
                  f"{'error: ' + c.error if c.error else ''}")

        # The same float model, and ORT's defaults on it.
        float_dir = tmp / "fp32"
        float_dir.mkdir()
        from edgekit.quantize.sources import resolve_source
        from edgekit.quantize.api import new_job

        job = new_job(resolve_source(f"hf:{tmp}"), __import__("edgekit.targets", fromlist=["x"]).load_target(args.target),
                      tmp / "scratchjob", "bench")
        (tmp / "scratchjob").mkdir()
        shutil.copyfile(job.float_onnx(), float_dir / "model.onnx")
        prepared = job.prepared_onnx()
        ort_dir = tmp / "ort"
        ort_dir.mkdir()
        quantize_dynamic(str(prepared), str(ort_dir / "dynamic.onnx"))
        specs = job.source.inputs
        calib = open_calibration(tmp / "calib", specs, batch_size=8)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.feeds = calib.feeds()

            def get_next(self):
                return next(self.feeds, None)

        quantize_static(str(prepared), str(ort_dir / "static.onnx"), Reader())

        models = {
            "fp32": float_dir / "model.onnx",
            f"edgekit auto ({picked.details['auto_recipe']}, {picked.details.get('recipe', '')})": folder / "model.onnx",
            "ORT quantize_dynamic defaults": ort_dir / "dynamic.onnx",
            "ORT quantize_static defaults": ort_dir / "static.onnx",
        }
        # fidelity on held-out padded batches
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        evals = list(open_calibration(tmp / "eval", specs, batch_size=8).feeds())
        outputs = {}
        for name, path in models.items():
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            outputs[name] = [session.run(None, feed)[0] for feed in evals]
        ref = np.concatenate(outputs["fp32"])
        results = bench(list(models.values()), threads=1, batch=1, input_file=tmp / "one.npz", warmup=10,
                        min_runs=50, min_time_s=args.min_time)
        base = results[0].timing.p50
        print(f"\n{'model':<58} {'size MB':>8} {'p50 ms':>8} {'vs fp32':>8} {'cosine':>8}")
        for (name, path), result in zip(models.items(), results):
            cos = _cosine(ref, np.concatenate(outputs[name]))
            print(f"{name:<58} {path.stat().st_size / 2**20:8.1f} {result.timing.p50:8.2f} "
                  f"{result.timing.p50 / base:7.2f}x {cos:8.4f}")
        pick = results[1].timing.p50 / base
        pick_cos = _cosine(ref, np.concatenate(list(outputs.values())[1]))
        ok = pick <= 0.5 and pick_cos >= 0.99
        print(f"\nedgekit pick: {pick:.2f}x fp32 latency, cosine {pick_cos:.4f} "
              f"({'PASS' if ok else 'FAIL'} for <= 0.5x and >= 0.99)")


if __name__ == "__main__":
    main()
