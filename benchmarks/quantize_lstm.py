"""Attention-LSTM LM: dynamic int8 on the ONNX path at <= 0.5x fp32 latency, next-token agreement >= 99%.

Trains the zoo ``lstm-lm`` briefly on its text corpus, quantizes it with ``--method dynamic``
(the float ONNX comes from the TorchScript-based exporter, whose LSTM weights are initializers
ONNX Runtime's quantizer can reach; the torch.export route leaves them unquantizable), then times
fp32 and int8 ONNX in one interleaved ``edgekit.bench`` session (batch 1, 128 tokens, 1 thread)
and measures next-token agreement with the float model on held-out text windows.

    .venv/bin/python benchmarks/quantize_lstm.py [--steps 300] [--min-time 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--min-time", type=float, default=3.0)
    parser.add_argument("--target", default="x86-64")
    parser.add_argument("--model", default="lstm-lm")
    parser.add_argument("--checkpoint", type=Path, help="reuse this trained checkpoint (else train one)")
    args = parser.parse_args()

    import onnxruntime as ort

    from edgekit.bench.api import bench
    from edgekit.data.datasets import load_split
    from edgekit.export.api import export
    from edgekit.quantize.api import quantize
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    with tempfile.TemporaryDirectory(prefix="bench-lstm-") as tmp:
        tmp = Path(tmp)
        if args.checkpoint:
            ckpt = args.checkpoint
        else:
            ckpt, _ = train(TrainConfig(model=args.model, max_steps=args.steps, seed=0), tmp / "ckpt")
        fp32_dir, _ = export(ckpt, tmp / "fp32", ("onnx",), target=args.target, onnx_route="torchscript")
        q_dir, q = quantize(ckpt, "dynamic", tmp / "int8", args.target, formats=("onnx",))
        ops = sorted({n.op_type for n in __import__("onnx").load(str(q_dir / "model.onnx")).graph.node})
        print(f"{args.model}: {'given checkpoint' if args.checkpoint else f'{args.steps} training steps'}, "
              f"target {args.target}; int8 ops: {', '.join(ops)}")
        # The same recipe with the vocabulary projection (the arg-max that picks the next token) in float.
        from edgekit.quantize.toolkits.onnx_graphs import prepared_onnx
        from edgekit.quantize.toolkits.ort_backend import weighted_nodes
        from edgekit.quantize.steps import new_job, resolve
        from edgekit.core.targets import load_target

        job = new_job(resolve(ckpt, {}), load_target(args.target), tmp / "probe", "dynamic")
        (tmp / "probe").mkdir()
        head = [name for name, op in weighted_nodes(prepared_onnx(job)) if "head" in name]
        h_dir, _ = quantize(ckpt, "dynamic", tmp / "int8-head", args.target, formats=("onnx",), exclude=tuple(head))

        windows = load_split("pydoc-text", "test").inputs[:64].astype(np.int64)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        runs = {}
        variants = (("fp32", fp32_dir / "model.onnx"), ("int8", q_dir / "model.onnx"),
                    ("int8, head float", h_dir / "model.onnx"))
        for name, path in variants:
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            feed_name = session.get_inputs()[0].name
            runs[name] = np.concatenate([session.run(None, {feed_name: windows[i : i + 8]})[0] for i in range(0, len(windows), 8)])
        np.savez(tmp / "one.npz", **{feed_name: windows[:1]})
        results = bench([path for _, path in variants], threads=1, batch=1,
                        input_file=tmp / "one.npz", warmup=10, min_runs=50, min_time_s=args.min_time)
        base = results[0].timing.p50
        print(f"batch 1 x {windows.shape[1]} tokens, 1 thread, p50 interleaved; next-token agreement with fp32 "
              f"on {windows.size} held-out positions")
        for (name, path), result in zip(variants, results):
            agree = float((runs["fp32"].argmax(-1) == runs[name].argmax(-1)).mean())
            ratio = result.timing.p50 / base
            verdict = "" if name == "fp32" else ("  PASS" if ratio <= 0.5 and agree >= 0.99 else "  FAIL") + \
                " (<= 0.5x, >= 99%)"
            print(f"  {name:<18} {result.timing.p50:7.3f} ms  {ratio:5.2f}x  agreement {100 * agree:6.2f}%  "
                  f"{path.stat().st_size / 2**20:5.2f} MB{verdict}")


if __name__ == "__main__":
    main()
