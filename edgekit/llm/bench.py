"""``edgekit bench`` on a language model's artifact: prefill and decode tokens/s, time to first
token, peak memory, file size.

Each measurement is a fresh worker process (``python -m edgekit.llm.bench``): it loads the
model, runs one cold request (the first of the process), resets the cache and runs the timed
request: a ``prompt_tokens``-token prompt fed at once (its time is the time to first token, the
prompt's logits and the first greedy pick included), then ``new_tokens - 1`` one-token decode
steps, each a forward pass and a greedy pick. Peak RSS is the worker's VmHWM at the end (the
mapped model file counts). Workers of the benchmarked models take turns (A B A B), so machine
drift hits all alike; each figure is the median over the processes, with min and max.

The prompt is the first ``prompt_tokens`` ids of the held-out text (``edgekit.llm.quality``):
the same ids for every model sharing a tokenizer. benchmarks/LLM_PROTOCOL.md is the same protocol.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import EdgekitError, UsageError
from edgekit.records.result import BenchResult, Memory, ModelInfo, Timing
from edgekit.records.stats import spread_of
from edgekit.board.facts import host_facts
from edgekit.formats.artifacts import load_manifest, is_cached_family
from edgekit.core.children import popen_kwargs
from edgekit.llm.cached import is_llm_artifact, program_format, open_cached
from edgekit.llm.lm_runtime import load_llm_text
from edgekit.llm.quality import heldout_text

PROMPT_TOKENS = 128
NEW_TOKENS = 128
PROCESSES = 3
MAX_TOKENS = 8192
WORKER_TIMEOUT_S = 1800


@dataclass(frozen=True)
class LLMModel:
    folder: Path
    manifest: object
    format: str  # checkpoint | executorch

    @property
    def entry(self):
        return self.manifest.file(self.format)

    @property
    def label(self) -> str:
        return self.entry.details.get("variant") or f"{self.entry.precision}-{self.format}"


def check_settings(prompt_tokens: int, new_tokens: int, processes: int) -> None:
    for flag, value, low in (("--prompt-tokens", prompt_tokens, 1), ("--new-tokens", new_tokens, 2),
                             ("--processes", processes, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_TOKENS:
            raise UsageError(f"{flag} must be an integer from {low} to {MAX_TOKENS}, got {value!r}")


def llm_models(paths, fmt: str | None = None) -> list[LLMModel]:
    """The language-model artifacts among ``paths`` (folders or their model files); [] when none is one."""

    found = []
    for path in paths:
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        if not is_llm_artifact(folder):  # other models keep the runner's own path, checks and messages
            return []
        folder, manifest = load_manifest(folder)
        if not is_cached_family(manifest):
            return []
        if path.is_file():
            chosen = next((e.format for e in manifest.files if (folder / e.path).resolve() == path.resolve()), None)
        else:
            program = program_format()
            chosen = fmt or (program if program in manifest.formats() else "checkpoint")
        if chosen not in manifest.formats():
            raise UsageError(f"{folder} has no {chosen} file (it has: {', '.join(manifest.formats())})")
        found.append(LLMModel(folder, manifest, chosen))
    return found


def bench_llms(models: list[LLMModel], threads: int, prompt_tokens: int = PROMPT_TOKENS, new_tokens: int = NEW_TOKENS,
               processes: int = PROCESSES, progress=None, target: str | None = None) -> list:
    """One ``BenchResult`` per model, figures in ``settings["llm"]``."""
    check_settings(prompt_tokens, new_tokens, processes)
    for model in models:
        if prompt_tokens + new_tokens > int(model.entry.details.get("context") or model.manifest.model["config"]["max_len"]):
            raise UsageError(f"--prompt-tokens {prompt_tokens} + --new-tokens {new_tokens} do not fit {model.folder}'s "
                             f"context of {model.entry.details.get('context') or model.manifest.model['config']['max_len']}")
    runs: dict[int, list[dict]] = {i: [] for i in range(len(models))}
    for round_ in range(processes):
        for i, model in enumerate(models):
            if progress:
                progress(f"{model.label}: process {round_ + 1} of {processes}")
            runs[i].append(_run_worker(model, threads, prompt_tokens, new_tokens))
    return [_result(model, runs[i], threads, prompt_tokens, new_tokens, target) for i, model in enumerate(models)]


def _run_worker(model: LLMModel, threads: int, prompt_tokens: int, new_tokens: int) -> dict:
    request = {"folder": str(model.folder), "format": model.format, "threads": threads,
               "prompt_tokens": prompt_tokens, "new_tokens": new_tokens}
    try:
        done = subprocess.run([sys.executable, "-m", "edgekit.llm.bench", json.dumps(request)], capture_output=True,
                              text=True, timeout=WORKER_TIMEOUT_S, **popen_kwargs())
    except subprocess.TimeoutExpired:
        raise EdgekitError(f"the benchmark of {model.label} took over {WORKER_TIMEOUT_S} s") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        error = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no output")
        raise EdgekitError(f"the benchmark worker of {model.label} failed: {error[:300]}")
    return json.loads(lines[-1])


def _result(model: LLMModel, runs: list[dict], threads: int, prompt_tokens: int, new_tokens: int, target):
    import datetime as dt


    def med(key):
        return statistics.median(run[key] for run in runs)

    def span(key):
        values = [run[key] for run in runs]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    middle = sorted(runs, key=lambda run: run["decode_tps"])[len(runs) // 2]
    steps = sorted(middle["step_ms"])

    def pct(q):
        return steps[min(len(steps) - 1, int(round(q * (len(steps) - 1))))]

    figures = {
        "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "processes": len(runs),
        "prefill_tps": span("prefill_tps"), "decode_tps": span("decode_tps"), "ttft_ms": span("ttft_ms"),
        "cold_ttft_ms": span("cold_ttft_ms"), "load_s": span("load_s"), "peak_rss_mb": span("peak_rss_mb"),
        "context": middle["context"],
    }
    entry = model.entry
    quality = entry.details.get("quality") or {}
    timing = Timing(load=med("load_s") * 1000, first_run=med("cold_ttft_ms"), p50=pct(0.5), p90=pct(0.9), p95=pct(0.95),
                    p99=pct(0.99), mean=statistics.fmean(steps), std=statistics.pstdev(steps), min=steps[0],
                    max=steps[-1], runs=len(steps), total_s=sum(steps) / 1000)
    notes = ("llm: p50/p99 are one decode step (a forward pass of one token and a greedy pick) of the median "
             "process; prefill = prompt tokens / time to first token; decode = (new tokens - 1) / decode time",)
    if quality:
        notes += (f"perplexity {quality['perplexity']} vs float {quality['float_perplexity']} on "
                  f"{quality['scored_tokens']} held-out tokens ({quality['text']})",)
    return BenchResult(
        model=ModelInfo(str(model.folder / entry.path), model.format, entry.bytes, entry.sha256, entry.precision,
                        model.label),
        runtime={"name": "torch" if model.format == "checkpoint" else model.format, "threads": threads},
        input_shapes={"tokens": [1, prompt_tokens]},
        settings={"llm": figures, "processes": len(runs)},
        timing=timing,
        throughput_per_s=figures["decode_tps"]["median"],
        memory=Memory(peak_rss=med("peak_rss_mb"), rss_before_load=med("rss_before_mb"),
                      load_growth=med("peak_rss_mb") - med("rss_before_mb")),
        host=host_facts(),
        target=target,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        notes=notes,
        tokens_per_s=figures["decode_tps"]["median"],
        spread=spread_of([1000.0 / run["decode_tps"] for run in runs]) if len(runs) >= 2 else None,
    )


def _vm(field: str) -> float:
    """This process's /proc/self/status ``field`` in MiB (-1 where /proc has none)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return -1.0


def _request(lm, prompt: list[int], new_tokens: int) -> dict:
    import time

    lm.reset()
    start = time.perf_counter()
    token = int(lm.feed(prompt, 0).argmax())
    first = time.perf_counter()
    steps = []
    position = len(prompt)
    for _ in range(new_tokens - 1):
        began = time.perf_counter()
        token = int(lm.feed([token], position).argmax())
        steps.append((time.perf_counter() - began) * 1000)
        position += 1
    end = time.perf_counter()
    return {"ttft_ms": (first - start) * 1000, "prefill_tps": len(prompt) / (first - start),
            "decode_tps": (new_tokens - 1) / (end - first), "step_ms": steps}


def worker(request: dict) -> dict:
    import time


    before = _vm("VmRSS")
    folder, manifest = load_manifest(request["folder"])
    started = time.perf_counter()
    lm = open_cached(folder, manifest, request["format"], request["threads"])
    load_s = time.perf_counter() - started
    text = load_llm_text(folder, manifest)
    ids = text.tokenizer.encode(heldout_text()[0], add_special_tokens=False).ids[:request["prompt_tokens"]]
    cold = _request(lm, ids, 2)
    warm = _request(lm, ids, request["new_tokens"])
    return {**warm, "cold_ttft_ms": cold["ttft_ms"], "load_s": load_s, "peak_rss_mb": _vm("VmHWM"),
            "rss_before_mb": before, "context": lm.context}


if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.argv[1]))))
