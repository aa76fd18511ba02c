"""A bundle's standalone server: ``serve.py``, the ``edgekit_serve/`` package it runs, and
``requirements-serve.txt`` pinned to this host's versions (ONNX bundles only).

The package is ``edgekit/serve``'s standalone modules copied byte for byte (they import nothing
from edgekit; ``edgekit.serve.handlers`` names them); on the board ``python3 serve.py`` needs numpy,
onnxruntime, FastAPI and uvicorn.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from edgekit.bundle.requirements import Pins, host_version
from edgekit.core import handlers

SERVE_SCRIPT = "serve.py"
SERVE_PACKAGE = "edgekit_serve"
SERVE_REQUIREMENTS = "requirements-serve.txt"
# FastAPI, uvicorn and what they pull in, pinned so the board runs what was tested here.
SERVE_DISTS = ("fastapi", "starlette", "pydantic", "pydantic-core", "typing-inspection", "annotated-types",
               "typing-extensions", "anyio", "idna", "uvicorn", "h11", "click")


def serve_pins(pins: Pins) -> Pins:
    """The bundle's runtime pins plus the serving stack's, for the same platform and python."""
    extra = tuple(f"{dist}=={host_version(dist)}" for dist in SERVE_DISTS)
    return replace(pins, requirements=pins.requirements + extra)


def add_serving(work: Path, pins: Pins) -> dict:
    """Copy serve.py and edgekit_serve/ into the bundle being built; what bundle.json records."""
    script, modules = handlers.handler(handlers.SERVER_FILES)()
    shutil.copyfile(script, work / SERVE_SCRIPT)
    os.chmod(work / SERVE_SCRIPT, 0o755)
    (work / SERVE_PACKAGE).mkdir()
    for module in modules:
        shutil.copyfile(module, work / SERVE_PACKAGE / module.name)
    serving = serve_pins(pins)
    text = serving.text().replace("bundle requirements", "bundle serving requirements (serve.py)", 1)
    (work / SERVE_REQUIREMENTS).write_text(text.replace("-r requirements.txt", f"-r {SERVE_REQUIREMENTS}"))
    return {"script": SERVE_SCRIPT, "requirements": SERVE_REQUIREMENTS, "pins": list(serving.requirements)}
