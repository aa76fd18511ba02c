"""``verify --emulate``'s serving check: the bundle's ``serve.py`` started on the emulated board.

Its own venv (``requirements-serve.txt``: numpy, onnxruntime, FastAPI, uvicorn, pinned; from the bundle's
``wheels/`` when it has them, which ``bundle --wheels`` fills for both, else the package index) is built once
per requirements hash like the runner's. ``serve.py`` runs under QEMU on 127.0.0.1 and a free
port (the emulated process shares this host's network), gets one ``/v1/predict`` request with
the reference inputs at each batch size, and must answer what the emulated probe computed; then
SIGTERM must stop it with exit status 0.
"""

from __future__ import annotations

from dataclasses import replace

import io
import shutil
import time
from pathlib import Path
from edgekit.board.inputs import read_reference
from edgekit.emulate import EmulationError
from edgekit.emulate.report import check_batch
from edgekit.emulate.venv import ensure_venv
from edgekit.core import process

SERVE_REQUIREMENTS = "requirements-serve.txt"
SERVE_SCRIPT = "serve.py"
SERVE_PACKAGE = "edgekit_serve"


def has_server(bundle) -> bool:
    return all((bundle.path / name).exists() for name in (SERVE_SCRIPT, SERVE_PACKAGE, SERVE_REQUIREMENTS))


def serve_check(run_in, bundle, python: str, work: Path, inside: str, emulated: dict, tolerance,
                timeout_s: float, progress) -> tuple[dict, float]:
    """({"ok", "error", "url", "batches", "exit_code", "venv"}, seconds) of serving under emulation."""
    import numpy as np


    started = time.monotonic()
    report: dict = {"ok": False, "error": "", "url": None, "batches": [], "exit_code": None, "venv": None}

    requirements = (bundle.path / SERVE_REQUIREMENTS).read_text(encoding="utf-8")
    try:  # a bundle made with --wheels carries the serving stack's wheels too: offline then
        venv = ensure_venv(run_in, requirements, list(bundle.wheels), python, timeout_s=timeout_s, progress=progress)
    except EmulationError as exc:
        report["error"] = f"cannot install {SERVE_REQUIREMENTS} under emulation: {exc} (--no-serve skips this check)"
        return report, time.monotonic() - started
    report["venv"] = {"path": venv.path, "key": venv.key, "built": venv.built, "seconds": round(venv.seconds, 1)}
    shutil.copyfile(bundle.path / SERVE_SCRIPT, work / SERVE_SCRIPT)
    shutil.copytree(bundle.path / SERVE_PACKAGE, work / SERVE_PACKAGE, dirs_exist_ok=True)
    shutil.copyfile(bundle.path / "bundle.json", work / "bundle.json")
    # the bundle's serve.py as user 65534 (it cannot change the cached rootfs); on this host's network, which
    # the check must reach it through
    fenced = replace(run_in, fenced=True, host_network=True)
    argv = fenced.argv([venv.python, "-I", f"{inside}/{SERVE_SCRIPT}", "--port", "0", "--threads", "1"], cwd=inside)
    progress("starting the bundle's serve.py under emulation")
    proc = process.spawn(argv, run_in.env())
    try:
        url = process.wait_ready(proc, timeout_s)
        report["url"] = url
        import httpx

        for batch, (inputs, _) in read_reference(bundle.reference).items():
            buffer = io.BytesIO()
            np.savez(buffer, **inputs)
            answer = httpx.post(f"{url}/v1/predict", content=buffer.getvalue(), timeout=timeout_s,
                                headers={"Content-Type": "application/x-npz", "Accept": "application/x-npz"})
            if answer.status_code != 200:
                report["error"] = f"/v1/predict at batch {batch} answered {answer.status_code}: {answer.text[:200]}"
                return report, time.monotonic() - started
            with np.load(io.BytesIO(answer.content), allow_pickle=False) as data:
                served = data[data.files[0]]
            probed = emulated[f"b{batch}/output"]
            check = check_batch(batch, served, probed, probed, tolerance)
            report["batches"].append({"batch": batch, "passed": check.passed, "vs_probe": check.emulated_vs_host})
            if not check.passed:
                report["error"] = f"served outputs differ from the emulated probe's at batch {batch}: {check.reason}"
                return report, time.monotonic() - started
    except Exception as exc:  # a failed start, a timeout: the report says why
        report["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return report, time.monotonic() - started
    finally:
        report["exit_code"] = process.stop(proc, 60)
    if report["exit_code"] != 0:
        report["error"] = f"serve.py exited with {report['exit_code']} after SIGTERM (expected 0)"
        return report, time.monotonic() - started
    report["ok"] = True
    return report, time.monotonic() - started
