"""Executed aarch64 instructions per prompt token and per decoded token of a language model's native
bundle, on a core under QEMU: ``edgekit-run generate`` with the counting plugin, one process.

The runner marks its prompt (the prefill marks) and its decode steps (the timed marks; see
``native/runner/timing.h``), so from one run of ``steps + 1`` new tokens (the first comes from the
prompt's logits):

    per_prompt_token  = prefill window / prompt tokens
    per_decoded_token = decode window / steps

As ``icount.count_bundle``: in the bundle sandbox, 1 thread, the cross toolchain's C library.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from edgekit.core.errors import UsageError
from edgekit.emulate import EmulationError
from edgekit.bundle import native
from edgekit.bundle.layout import BUNDLE_JSON
from edgekit.emulate.host import checked_cpu
from edgekit.emulate.icount import CLASSES, INSIDE, LOG_BYTES, Progress, TIMEOUT_S, counting_tools, parse_log
from edgekit.emulate.icount_root import add_host_program
from edgekit.emulate.process import last_error, run_fenced
from edgekit.emulate.sandbox import BUNDLE, bundle_sandbox
from edgekit.llm import bundle as llm

MAX_STEPS = 4096


def count_generate(bundle, cpu: str, *, steps: int = 8, prompt_ids: list[int] | None = None,
                   progress: Progress | None = None, timeout_s: float = TIMEOUT_S) -> dict:
    """Counts for a language model's native bundle (``emulate.bundle.open_bundle``) on ``cpu``; the
    prompt is the bundle's check prompt unless ``prompt_ids`` are given."""
    if not native.is_native(bundle.info) or not (bundle.path / native.RUNNER).is_file():
        raise UsageError(f"{bundle.path} is not a native bundle (edgekit-run beside the model)")
    check = llm.read_check(bundle.info, str(bundle.path / BUNDLE_JSON))
    prompt = list(prompt_ids) if prompt_ids is not None else list(check["prompt_ids"])
    if not prompt or not 1 <= steps <= MAX_STEPS or len(prompt) + steps + 1 > check["context"]:
        raise UsageError(f"a prompt of {len(prompt)} ids and {steps} decode steps (1..{MAX_STEPS}) must fit the "
                         f"program's context of {check['context']} tokens")
    progress = progress or (lambda message: None)
    qemu, version, library, sysroot = counting_tools(cpu, progress)
    model = Path(bundle.model).resolve().relative_to(bundle.path.resolve()).as_posix()
    tag = secrets.token_hex(8)  # the program cannot know it, so it cannot forge the plugin's line
    log = f"/work/icount-{tag}.log"
    argv = llm.generate_argv(f"{BUNDLE}/{model}", {**check, "prompt_ids": prompt}, 1, max_new=steps + 1, expect=False)
    command = [f"{INSIDE}/qemu-aarch64", "-cpu", checked_cpu(cpu), "-L", "/", "-plugin",
               f"{INSIDE}/{library.name},tag={tag}", "-d", "plugin", "-D", log, f"{BUNDLE}/{native.RUNNER}", *argv,
               "--timeout", str(max(1, int(timeout_s)))]
    with bundle_sandbox(bundle.path, [native.RUNNER], arch="aarch64", libraries_from=sysroot) as box:
        add_host_program(box.root, qemu, f"{INSIDE}/qemu-aarch64")
        add_host_program(box.root, library, f"{INSIDE}/{library.name}")
        progress(f"counting instructions of {len(prompt)} prompt ids and {steps} decode steps on {cpu} under emulation")
        done = run_fenced(box.argv(command), what="edgekit-run generate under emulation with the counting plugin",
                          timeout_s=timeout_s, env=box.env, preexec=box.preexec)
        if done.returncode != 0:
            raise EmulationError(f"the model failed under emulation: {last_error(done.tail) or f'exit {done.returncode}'}")
        counts = parse_log(box.output(log, LOG_BYTES).read_text(encoding="utf-8", errors="replace"), tag)
    prefill, decode = counts["prefill"], counts["window"]
    if (prefill["windows"], prefill["bad_marks"], counts["windows"], counts["bad_marks"]) != (1, 0, 1, 0):
        raise EmulationError(f"{native.RUNNER} did not mark its prompt and its decode steps once each: a runner from "
                             "an older edgekit? make the bundle again")
    try:
        tokens = [int(i) for i in json.loads(done.stdout.splitlines()[0])["tokens"]]
    except (ValueError, KeyError, IndexError, TypeError):
        raise EmulationError(f"{native.RUNNER} generate printed no result under emulation") from None
    return {
        "cpu": cpu, "prompt_tokens": len(prompt), "steps": steps, "tokens": tokens,
        "per_prompt_token": prefill["total"] / len(prompt), "per_decoded_token": decode["total"] / steps,
        "prefill": {name: prefill[name] for name in ("total", *CLASSES)},
        "decode": {name: decode[name] for name in ("total", *CLASSES)},
        "qemu": version, "plugin": library.parent.name,
        "libc": str(sysroot),
    }
