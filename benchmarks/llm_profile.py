"""Where a language model's ``.pte`` spends its time: a per-operator profile of prefill and decode.

Runs the program of an edgekit LLM artifact under ExecuTorch's runtime with its event tracer
(ETDump) on, one thread: one prompt of ``--prompt-tokens`` ids (the held-out text's first ids,
through the artifact's tokenizer) in one call, then ``--new-tokens`` greedy decode steps. Reads
the trace back with ExecuTorch's Inspector and prints, per operator (XNNPACK's own events inside
each delegate call, and the portable kernels outside), the prefill milliseconds and the mean
decode milliseconds per token, with each one's share of the whole step, and the same grouped
(int4 linears, int8 linears, attention products, softmax, data movement, cache update, other).

    .venv/bin/python benchmarks/llm_profile.py runs/smollm2-int4 [--new-tokens 32] [--top 25] [--json out.json]

The tracer adds a little time per event: compare shares, and take speeds from llm_edgekit.py.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

WRAPPERS = {"Method::execute", "DELEGATE_CALL", "OPERATOR_CALL"}  # events that hold the others
GROUPS = (  # (group, substrings of the event name), first match wins
    ("int4 linears", ("QB4W",)),
    ("int8 linears", ("QC8W",)),
    ("attention products", ("Batch Matrix Multiply",)),
    ("softmax", ("Softmax",)),
    ("data movement", ("Reshape", "Copy", "Transpose", "_copy", "expand", "cat.", "stack")),
    ("cache update", ("index_put", "update_cache")),
)


def group_of(name: str) -> str:
    return next((group for group, keys in GROUPS if any(key in name for key in keys)), "other")


def _prompt(folder: Path, n: int) -> list[int]:
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.quality import heldout_text
    from edgekit.llm.lm_runtime import load_llm_text

    folder, manifest = load_manifest(folder)
    return load_llm_text(folder, manifest).tokenizer.encode(heldout_text()[0], add_special_tokens=False).ids[:n]


def trace(program: Path, prompt: list[int], new_tokens: int, out: Path, threads: int) -> dict:
    """Run prompt + decode with the event tracer on; the ETDump goes to ``out``."""
    import torch

    from edgekit.formats.executorch import native
    from edgekit.llm.program import load_runtime_kernels

    torch.set_num_threads(threads)
    load_runtime_kernels()
    module = native()._load_for_executorch(str(program), enable_etdump=True)
    t0 = time.perf_counter()
    logits = module.forward((torch.tensor([prompt]), torch.arange(len(prompt))))[0]
    token = int(logits[0, -1].argmax())
    t1 = time.perf_counter()
    for step in range(new_tokens):
        position = len(prompt) + step
        logits = module.forward((torch.tensor([[token]]), torch.arange(position, position + 1)))[0]
        token = int(logits[0, -1].argmax())
    t2 = time.perf_counter()
    module.write_etdump_result_to_file(str(out))
    return {"ttft_ms": 1000 * (t1 - t0), "decode_tps": new_tokens / (t2 - t1)}


def per_operator(etdump: Path) -> tuple[float, float, dict]:
    """(prefill ms, decode ms per token, {operator: [events per step, prefill ms, decode ms/token]})."""
    import warnings

    from executorch.devtools import Inspector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Output Buffer not found": no tensor data was asked for
        inspector = Inspector(etdump_path=str(etdump))
    rows: dict = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for block in inspector.event_blocks:
        for event in block.events:
            if event.perf_data is None or len(event.perf_data.raw) < 2:
                continue
            raw = event.perf_data.raw  # one duration (ms) per execution: the prompt's, then each token's
            row = rows[event.name]
            row[0] += 1
            row[1] += raw[0]
            row[2] += sum(raw[1:]) / (len(raw) - 1)
    total = rows.pop("Method::execute", [0, 0.0, 0.0])
    return total[1], total[2], dict(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", type=Path, help="an edgekit LLM artifact folder with a .pte (or the .pte)")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=25, help="operators to list (all groups are always listed)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    folder = args.artifact if args.artifact.is_dir() else args.artifact.parent
    program = args.artifact if args.artifact.is_file() else folder / "model.pte"
    prompt = _prompt(folder, args.prompt_tokens)
    with tempfile.TemporaryDirectory() as scratch:
        speed = trace(program, prompt, args.new_tokens, Path(scratch) / "trace.etdp", args.threads)
        prefill, decode, rows = per_operator(Path(scratch) / "trace.etdp")
    leaves = {name: row for name, row in rows.items() if name not in WRAPPERS}
    groups: dict = collections.defaultdict(lambda: [0.0, 0.0])
    for name, (_, pre, dec) in leaves.items():
        groups[group_of(name)][0] += pre
        groups[group_of(name)][1] += dec
    groups["runtime (outside any operator)"] = [prefill - sum(g[0] for g in groups.values()),
                                                decode - sum(g[1] for g in groups.values())]
    print(f"{program}: prompt {len(prompt)} ids, {args.new_tokens} decode steps, {args.threads} thread(s); "
          f"traced TTFT {speed['ttft_ms']:.0f} ms, decode {speed['decode_tps']:.1f} tokens/s")
    print(f"step totals: prefill {prefill:.1f} ms, decode {decode:.2f} ms/token")
    print(f"\n{'group':34s} {'prefill ms':>10s} {'share':>6s} {'decode ms/tok':>13s} {'share':>6s}")
    for name, (pre, dec) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:34s} {pre:10.2f} {100 * pre / prefill:5.1f}% {dec:13.3f} {100 * dec / decode:5.1f}%")
    print(f"\n{'operator':52s} {'per step':>8s} {'prefill ms':>10s} {'decode ms/tok':>13s} {'share':>6s}")
    for name, (count, pre, dec) in sorted(leaves.items(), key=lambda kv: -kv[1][2])[:args.top]:
        print(f"{name[:52]:52s} {count:8d} {pre:10.2f} {dec:13.3f} {100 * dec / decode:5.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "program": str(program), "prompt_tokens": len(prompt), "new_tokens": args.new_tokens,
            "threads": args.threads, **speed, "prefill_ms": prefill, "decode_ms_per_token": decode,
            "groups": {name: {"prefill_ms": pre, "decode_ms_per_token": dec} for name, (pre, dec) in groups.items()},
            "operators": {name: {"events_per_step": c, "prefill_ms": pre, "decode_ms_per_token": dec}
                          for name, (c, pre, dec) in leaves.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
