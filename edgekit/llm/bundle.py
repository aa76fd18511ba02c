"""A language model's bundle: its ``.pte`` run by ``edgekit-run generate`` on the board, no Python.

The tokenizer stays on the host: the bundle carries one check prompt as token ids (rendered through
the model's chat template here) and the first ``CHECK_TOKENS`` greedy ids this host's ExecuTorch
runtime gives for it. ``run.sh check`` on the board (and ``verify --emulate`` under QEMU) must
produce the same ids. Beside the layout of every native bundle (``edgekit.bundle.native``):

    reference.npz   prompt_ids and expected_ids (int64), the check's data for tools
    bundle.json     "llm": the prompt, its ids, the expected ids, the context, the host's run
"""

from __future__ import annotations

import json
from pathlib import Path

from edgekit.core.errors import EdgekitError, UsageError, InputFileError
from edgekit.bundle.native import entry_script, run_on_host
from edgekit.core.fileio import atomic_path
from edgekit.llm.cached import program_cached
from edgekit.llm.generation import encode_prompt, generate_cached
from edgekit.llm.lm_runtime import load_llm_text
from edgekit.llm.program import DEFAULT_KERNELS
from edgekit.native.build import build_runner
from edgekit.native.toolchain import host_arch

CHECK_PROMPT = "What is the capital of France?"
CHECK_TOKENS = 16
BENCH_TOKENS = 128


def check_program(folder: Path, entry) -> None:
    """A one-line UsageError unless the artifact's program runs on the native runner."""
    kernels = (entry.details or {}).get("kernels", "llm")  # programs from before the choice used the fused kernels
    if kernels != DEFAULT_KERNELS:
        raise UsageError(f"{folder}'s program uses ExecuTorch's fused LLM kernels (--kernels {kernels}), which only "
                         f"its Python package has; quantize or export it again with --kernels {DEFAULT_KERNELS} "
                         "for a board")


def check_data(folder: Path, manifest, entry, progress) -> dict:
    """The check prompt's ids and the first greedy ids of the program on this host's runtime."""
    text = load_llm_text(folder, manifest)
    prompt_ids = encode_prompt(text, CHECK_PROMPT, None, None, str(folder))
    details = entry.details or {}
    context = int(details["context"])
    if len(prompt_ids) + CHECK_TOKENS > context:
        raise UsageError(f"the check prompt ({len(prompt_ids)} tokens) and {CHECK_TOKENS} new tokens do not fit the "
                         f"program's context of {context} tokens")
    progress(f"greedy-decoding {CHECK_TOKENS} tokens of the check prompt on this host")
    lm = program_cached(folder / entry.path, details, threads=1)
    expected = list(generate_cached(lm, prompt_ids, CHECK_TOKENS, stop_ids=()))
    return {"prompt": CHECK_PROMPT, "chat_template": text.template is not None, "prompt_ids": prompt_ids,
            "expected_ids": expected, "expected_text": text.tokenizer.decode(expected, skip_special_tokens=True),
            "max_new_tokens": CHECK_TOKENS, "context": context, "stop_ids": list(text.stop_ids),
            "by": "this host's ExecuTorch Python runtime, greedy, no stop ids"}


def write_reference(path: Path, llm: dict) -> None:
    import numpy as np


    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, prompt_ids=np.asarray(llm["prompt_ids"], dtype=np.int64),
                     expected_ids=np.asarray(llm["expected_ids"], dtype=np.int64))


def generate_argv(model: str, llm: dict, threads: int | str, max_new: int | None = None,
                  expect: bool = True) -> list[str]:
    """``edgekit-run generate``'s arguments for the check (without the runner itself); ``max_new``
    other than the check's, or ``expect`` False: no expected ids."""
    argv = ["generate", model, "--prompt-ids", ",".join(str(i) for i in llm["prompt_ids"]),
            "--context", str(llm["context"]), "--threads", str(threads),
            "--max-new-tokens", str(max_new or llm["max_new_tokens"])]
    if max_new is None and expect:
        argv += ["--expect-ids", ",".join(str(i) for i in llm["expected_ids"])]
    return argv


def run_script(model_name: str, target, llm: dict) -> str:
    def args(argv):
        return " ".join(f'"$here/{a}"' if a == model_name else a for a in argv)

    bench_tokens = min(BENCH_TOKENS, llm["context"] - len(llm["prompt_ids"]))
    return entry_script(
        f"the language model {model_name} run by edgekit-run (no Python)", target.name,
        [f"./run.sh              check: the first {llm['max_new_tokens']} greedy tokens of the check prompt are the host's",
         "                      (JSON, then PASS: or FAIL:, exit 0 or 1)",
         f"./run.sh bench        decode {bench_tokens} tokens: prefill and decode tokens/s, time to first token, "
         "peak RSS (JSON)",
         f"./run.sh generate --prompt-ids IDS --context {llm['context']} [--max-new-tokens N] [--stop-ids IDS]",
         "                      greedy token ids for your own prompt (tokenize it on the host)",
         "./run.sh info         the program's inputs, outputs, backends and planned memory",
         "./run.sh verify       sha256sum -c SHA256SUMS, then check"],
        {"check": args(generate_argv(model_name, llm, target.threads)),
         "bench": args(generate_argv(model_name, llm, target.threads, bench_tokens)),
         "generate": f'generate "$here/{model_name}"',
         "info": f'info "$here/{model_name}"'})


def host_run(work: Path, model_name: str, llm: dict, progress) -> dict:
    """The same program and check through ``edgekit-run`` built for this host: its ids and peak RSS."""
    runner = build_runner(host_arch(), None, progress)
    progress("running the check with edgekit-run on this host")
    argv = [str(runner.binary), *generate_argv(str(work / model_name), llm, 1, expect=False)]
    doc = read_generate(run_on_host(argv, "edgekit-run generate of the check prompt", "edgekit-run generate"))
    return {"by": f"edgekit-run built for {host_arch()}", "tokens": doc["tokens"],
            "tokens_equal": doc["tokens"] == llm["expected_ids"],
            **{key: doc.get(key) for key in ("machine", "runtime", "peak_rss_mb", "ttft_ms", "decode_tokens_per_s")}}


def read_generate(stdout: str) -> dict:
    """The JSON document ``edgekit-run generate`` printed (its first line)."""
    first = stdout.splitlines()[0] if stdout.strip() else ""
    try:
        doc = json.loads(first)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("tokens"), list):
        raise EdgekitError("edgekit-run generate printed no result")
    return doc


def memory_mismatch(target, peak_rss_mb: float | None) -> str | None:
    """Why the board's RAM cannot hold the decoding program ("" when it can, or the RSS is unknown)."""
    if peak_rss_mb is None or peak_rss_mb <= target.ram_mb:
        return None
    return (f"decoding peaks at {peak_rss_mb:.0f} MiB RSS on this host, more than {target.name}'s "
            f"{target.ram_mb} MB of RAM")


def readme_text(info: dict, bundle_name: str, description: str = "") -> str:
    model, target, llm, native = info["model"], info["target"], info["llm"], info["native"]
    title = f"edgekit native bundle: the language model {model} for {target}"
    return "\n".join([
        title, "=" * len(title), *([description] if description else []),
        f"model: {model} ({info['format']}, {info.get('precision')}), run by edgekit-run (ExecuTorch "
        f"{native['executorch_version']}, built for {native['arch']}{' / ' + native['cpu'] if native.get('cpu') else ''})",
        f"made by edgekit {info.get('edgekit_version', '?')} at {info.get('created', '?')}",
        "No Python, pip or network is needed on the board. The tokenizer stays on the host: edgekit-run",
        "takes and gives token ids.",
        "",
        "1. Check the files, then that the board decodes what the host decoded for the check prompt",
        f"   ({llm['prompt']!r}: {len(llm['prompt_ids'])} ids, the first {llm['max_new_tokens']} greedy ids compared):",
        f"     sh {native['entry']} verify",
        f"2. Tokens per second and peak memory: sh {native['entry']} bench",
        f"3. Your own prompt, as ids: sh {native['entry']} generate --prompt-ids 1,2,3 --context {llm['context']}",
        "",
        "Licences of the runtime in lib/ and of edgekit-run's libraries: THIRD_PARTY_NOTICES.txt.",
        "",
    ])


def read_check(info: dict, where: str) -> dict:
    """bundle.json's "llm" record, checked: token ids and counts are plain non-negative integers
    (they become edgekit-run's arguments)."""
    llm = info.get("llm")

    def ids(key, most):
        value = llm.get(key) if isinstance(llm, dict) else None
        if not isinstance(value, list) or not 1 <= len(value) <= most or \
                not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1 << 31 for i in value):
            raise InputFileError(f"{where} is malformed: llm.{key} must be a list of 1 to {most} token ids")
        return value

    def count(key, most):
        value = llm.get(key) if isinstance(llm, dict) else None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
            raise InputFileError(f"{where} is malformed: llm.{key} must be an integer from 1 to {most}")
        return value

    context = count("context", 1 << 20)
    checked = {"prompt_ids": ids("prompt_ids", context), "expected_ids": ids("expected_ids", context),
               "context": context, "max_new_tokens": count("max_new_tokens", context)}
    if len(checked["expected_ids"]) > checked["max_new_tokens"] or \
            len(checked["prompt_ids"]) + checked["max_new_tokens"] > context:
        raise InputFileError(f"{where} is malformed: the check's prompt and tokens do not fit its context")
    return checked
