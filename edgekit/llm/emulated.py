"""``verify --emulate`` for a language model's native bundle: ``edgekit-run generate`` under QEMU.

The board's first greedy ids for the bundle's check prompt must be this host's (bundle.json's
``llm.expected_ids``, from the host's ExecuTorch runtime when the bundle was built). As for any
native bundle: ``qemu-aarch64 -cpu <the target's core>``, the libraries from an arm64 userland,
and, as root with the cached rootfs, the bundle's own ``run.sh check`` in a root without Python.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from edgekit.emulate.report import BatchCheck, EmulationReport, Tolerance, bundle_fields
from edgekit.core.errors import EdgekitError
from edgekit.bundle import native
from edgekit.bundle.layout import BUNDLE_JSON
from edgekit.emulate import host
from edgekit.emulate.native import _entry_point, _last, emulated_runner, fenced_runner
from edgekit.llm import bundle as llm

Progress = Callable[[str], None]
RULE = ("the emulated board's greedy ids equal the host's; where they part, the host's ids fed one by one: every "
        "pick equal to the host's or beating it by at most the near-tie bound (logits)")


def verify_llm(bundle, *, cache_dir: Path, release: str, timeout_s: float, progress: Progress,
               notes: list[str]) -> EmulationReport:
    started = time.monotonic()
    check = llm.read_check(bundle.info, str(bundle.path / BUNDLE_JSON))
    runner, qemu, cpu, cached, sysroot, prefix, env = emulated_runner(bundle, cache_dir, release)

    progress(f"decoding {check['max_new_tokens']} tokens with {native.RUNNER} under emulation ({cpu}; sandboxed: "
             "no host files, no network)")
    with fenced_runner(bundle, qemu, cpu, sysroot) as fenced:
        done = fenced.run(llm.generate_argv(fenced.inside(bundle.model), check, 1),
                          what=f"{native.RUNNER} generate under emulation", timeout_s=timeout_s)
    if done.returncode not in (0, 1):
        raise EdgekitError(f"running {bundle.model.name} under emulation failed: {_last(done)}")
    try:
        doc = llm.read_generate(done.stdout)
    except EdgekitError:
        raise EdgekitError(f"running {bundle.model.name} under emulation failed: {_last(done)}") from None
    got, want = [int(i) for i in doc["tokens"]], check["expected_ids"]
    verdict_line = done.stdout.rstrip("\n").rpartition("\n")[2]
    passed = done.returncode == 0 and verdict_line.startswith("PASS")
    same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    forced = doc.get("teacher_forced") if isinstance(doc.get("teacher_forced"), dict) else {}
    verdict = BatchCheck(
        batch=1, emulated_vs_host={"matching_tokens": float(same), "tokens": float(len(want)),
                                   **({"teacher_forced_agree": float(forced.get("agree", 0)),
                                       "max_logit_gap": float(forced.get("max_logit_gap", 0))} if forced else {})},
        emulated_vs_float={}, host_vs_float={}, bound=float(forced.get("near_tie", 0.0)) if forced else 0.0,
        passed=passed, reason="" if passed else verdict_line.removeprefix("FAIL: ") or _last(done))
    if passed and same < len(want):
        notes.append(verdict_line.removeprefix("PASS: "))
    entry = _entry_point(bundle, cached, cpu, timeout_s, progress, notes) if cached is not None else None
    if cached is None:
        notes.append(f"no cached Debian rootfs in {cache_dir}: run.sh was not run in a Python-free root "
                     "(benchmarks/emulated_verify.sh builds one)")
    host_check = bundle.info.get("host_check") if isinstance(bundle.info.get("host_check"), dict) else {}
    return EmulationReport(
        **bundle_fields(bundle),
        emulation={
            "launcher": "qemu-user", "qemu": host.qemu_version(qemu), "qemu_cpu": cpu, "runtime": doc.get("runtime"),
            "machine": doc.get("machine"), "python": None, "numpy": None, "threads": 1, "sysroot": str(sysroot),
            "debian_release": release if cached is not None else None,
            "rootfs": str(cached.path) if cached is not None else None, "venv": None, "bit_identical": same == len(want),
            "entry_point": entry, "tokens": got, "expected_tokens": want,
            "generate": {key: doc.get(key) for key in ("ttft_ms", "decode_tokens_per_s", "peak_rss_mb")},
        },
        host={"machine": host_check.get("machine"), "python": None, "numpy": None,
              "runtime": {"name": bundle.spec.board.runtime, "version": bundle.info["native"].get("executorch_version")},
              "threads": 1},
        tolerance=Tolerance(bundle.precision, 0.0, 1.0, None, RULE),
        batches=(verdict,),
        bench=None,
        seconds={"emulated_run": round(done.seconds, 2), "total": round(time.monotonic() - started, 2)},
        notes=tuple(notes),
    )
