"""edgekit's ExecuTorch programs of SmolLM2-135M-Instruct against llama.cpp on the same GGUF, side by side.

One invocation measures, alternating A B A B (one fresh process per measurement, the protocol of
benchmarks/LLM_PROTOCOL.md through benchmarks/llm_protocol.py: the same 128 prompt ids, 128 greedy
new ids, the same 4096 held-out ids and perplexity windows):

- llama.cpp on the packaged Q4_1 GGUF (and its Q8_0 re-quantization when --q8 is given), through
  the llama-cpp-python worker of benchmarks/llm_llamacpp.py;
- edgekit: the float checkpoint (torch, eager, with its KV cache) and each ``.pte`` artifact given.

Prints file size, prefill and decode tokens/s, time to first token, peak RSS (VmHWM) and
perplexity, and the ratios against llama.cpp Q4_1 from this same run.

Make the artifacts first (minutes each: the lowering of a 30-layer model is slow):

    edgekit import gguf:smollm2-135m --out smol --context 512
    edgekit quantize smol --method int4 --out smol-int4                 # portable kernels: runs on edgekit-run too
    edgekit quantize smol --method int4 --kernels llm --out smol-int4-llm   # the fused host-only kernels
    edgekit quantize smol --method int8 --out smol-int8
    edgekit export smol --out smol-fp32

then (llama.cpp's venv: see benchmarks/llm_llamacpp.py):

    .venv/bin/python benchmarks/llm_edgekit.py --llama-python /work/llamacpp-venv/bin/python \\
        --checkpoint smol smol-int4 smol-int8 smol-fp32 [--threads 1] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llm_protocol as P  # noqa: E402

WORKER_TIMEOUT_S = 1800


def _edgekit_worker(job: dict) -> dict:
    """One measurement of an edgekit artifact, in this (fresh) process."""
    base_hwm = P.vm_bytes("VmHWM")
    t0 = time.perf_counter()
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.cached import open_cached

    folder, manifest = load_manifest(job["artifact"])
    lm = open_cached(folder, manifest, job["format"], job["threads"])
    load_s = time.perf_counter() - t0
    ids = [int(i) for i in job["ids"]]
    out = {"context": lm.context}
    if job["kind"] == "ppl":  # windows of the protocol's size, or of a short-context program's (ppl_ctx, ppl_stride)
        nll, counted, t1 = 0.0, 0, time.perf_counter()
        for w in P.ppl_windows(len(ids), job.get("ppl_ctx", P.PPL_CTX), job.get("ppl_stride", P.PPL_STRIDE)):
            lm.reset()
            rows = lm.feed_all(ids[w.begin:w.end - 1], 0, keep_from=w.scored_rows.start).numpy()  # the scored rows
            part, n = P.window_nll(rows, ids, w)
            nll, counted = nll + part, counted + n
        out.update(tokens_counted=counted, nll_sum=nll, ppl=P.perplexity(nll, counted), eval_s=time.perf_counter() - t1)
    else:
        requests = []
        for _ in range(2):  # cold, then warm
            lm.reset()
            t_start = time.perf_counter()
            tok = P.greedy(lm.feed(ids, 0).numpy())
            t_first = time.perf_counter()
            generated = [tok]
            for step in range(1, P.NEW_TOKENS):
                tok = P.greedy(lm.feed([tok], len(ids) + step - 1).numpy())
                generated.append(tok)
            t_end = time.perf_counter()
            requests.append({**P.generation_figures(t_start, t_first, t_end), "generated": generated})
        cold, warm = requests
        out.update(load_s=load_s, cold_ttft_s=cold["ttft_s"], ttft_s=warm["ttft_s"], prefill_tps=warm["prefill_tps"],
                   decode_tps=warm["decode_tps"], generated=warm["generated"],
                   deterministic=cold["generated"] == warm["generated"])
    out.update(base_hwm=base_hwm, peak_rss=P.vm_bytes("VmHWM"))
    return out


def _run(argv: list[str], job: dict) -> dict:
    proc = subprocess.run(argv, input=json.dumps(job), capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
        raise SystemExit(f"Error: worker for {job.get('artifact') or job.get('model')} failed: {tail[0][:300]}")
    return json.loads(lines[-1])


def _spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifacts", nargs="+", help="edgekit artifact folders (.pte programs; --checkpoint ones too)")
    parser.add_argument("--checkpoint", action="append", default=[], help="an artifact whose float checkpoint to run")
    parser.add_argument("--llama-python", default=os.environ.get("EDGEKIT_LLAMACPP_PYTHON"),
                        help="python of the llama-cpp-python venv (or $EDGEKIT_LLAMACPP_PYTHON)")
    parser.add_argument("--q8", help="also run this Q8_0 GGUF under llama.cpp (benchmarks/llm_llamacpp.py writes it)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-ppl", action="store_true", help="skip perplexity (minutes per model)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not args.llama_python:
        parser.error("--llama-python is needed (the anchor runs in the same invocation)")

    gguf = P.smollm2_gguf()
    tokenizer = P.gguf_tokenizer(gguf)
    prompt, heldout = P.prompt_ids(gguf, tokenizer), P.heldout_ids(gguf, tokenizer)
    llama_script = str(Path(__file__).resolve().parent / "llm_llamacpp.py")
    models = [("llama.cpp Q4_1", "llama", str(gguf), gguf.stat().st_size)]
    if args.q8:
        models.append(("llama.cpp Q8_0", "llama", args.q8, Path(args.q8).stat().st_size))
    from edgekit.formats.artifacts import load_manifest

    for folder in args.checkpoint:
        _, manifest = load_manifest(folder)
        entry = manifest.file("checkpoint")
        models.append(("edgekit fp32 checkpoint (torch)", "checkpoint", folder, entry.bytes))
    for folder in args.artifacts:
        _, manifest = load_manifest(folder)
        entry = manifest.file("executorch")
        models.append((f"edgekit {entry.precision} .pte ({Path(folder).name})", "executorch", folder, entry.bytes))

    def job(kind, model, ids, n_ctx):
        name, runtime, where, _ = model
        if runtime == "llama":
            return [args.llama_python, llama_script, "--worker"], {"kind": kind, "model": where, "ids": ids,
                                                                    "threads": args.threads, "n_ctx": n_ctx}
        return [sys.executable, __file__, "--worker"], {"kind": kind, "artifact": where, "format": runtime,
                                                        "ids": ids, "threads": args.threads}

    load = [os.getloadavg()[0]]
    runs = {m[0]: [] for m in models}
    for round_ in range(args.repeats):
        for model in models:
            print(f"round {round_ + 1}/{args.repeats}: {model[0]}", file=sys.stderr, flush=True)
            runs[model[0]].append(_run(*job("gen", model, prompt, P.GEN_CTX)))
    ppl = {}
    if not args.no_ppl:
        for model in models:
            print(f"perplexity: {model[0]}", file=sys.stderr, flush=True)
            ppl[model[0]] = _run(*job("ppl", model, heldout, P.PPL_CTX))["ppl"]
    load.append(os.getloadavg()[0])

    table = {}
    for name, _, _, size in models:
        rs = runs[name]
        table[name] = {"bytes": size, **{k: _spread([r[k] for r in rs]) for k in
                                         ("prefill_tps", "decode_tps", "ttft_s", "cold_ttft_s", "peak_rss")},
                       "ppl": ppl.get(name), "generated": rs[-1]["generated"]}
    anchor = table["llama.cpp Q4_1"]
    print(f"\nSmolLM2-135M-Instruct, {args.threads} thread(s), {args.repeats} alternated rounds, "
          f"load average {load[0]:.1f} -> {load[1]:.1f}; medians [min-max]; ratios vs llama.cpp Q4_1 of this run\n")
    print(f"{'model':34} {'MB':>7} {'prefill tok/s':>22} {'decode tok/s':>22} {'TTFT ms':>8} "
          f"{'peak RSS MiB':>13} {'ppl':>8}  decode x  RSS x  ppl x  greedy=Q4_1")
    for name, row in table.items():
        d, p = row["decode_tps"], row["prefill_tps"]
        agree = sum(a == b for a, b in zip(row["generated"], anchor["generated"])) / len(anchor["generated"])
        print(f"{name:34} {row['bytes'] / 2**20:7.1f} {p['median']:8.1f} [{p['min']:5.1f}-{p['max']:5.1f}] "
              f"{d['median']:8.1f} [{d['min']:5.1f}-{d['max']:5.1f}] {row['ttft_s']['median'] * 1000:8.0f} "
              f"{row['peak_rss']['median'] / 2**20:13.0f} {row['ppl'] or float('nan'):8.3f}  "
              f"{d['median'] / anchor['decode_tps']['median']:8.2f} "
              f"{row['peak_rss']['median'] / anchor['peak_rss']['median']:6.2f} "
              f"{(row['ppl'] or float('nan')) / (anchor['ppl'] or float('nan')):6.3f}  {agree:6.0%}")
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "repeats": args.repeats, "load": load,
                                               "models": table}, indent=2))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        print(json.dumps(_edgekit_worker(json.loads(sys.stdin.read()))))
        sys.exit(0)
    sys.exit(main())
