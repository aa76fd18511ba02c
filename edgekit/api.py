"""The public Python API: every stage, and the configs they take, from one module.

    from edgekit.api import train, quantize, export, bench, gate, TrainConfig, StaticConfig

    ckpt, _ = train(TrainConfig(epochs=3), "runs/digits")
    int8, manifest = quantize(ckpt, StaticConfig(formats=("onnx",)), "runs/digits-int8", "rpi4")

Each stage reads and writes folders on disk, as the CLI does, and returns what the CLI renders:
``train``/``quantize``/``export`` return ``(folder, Manifest)``, ``bench`` a list of
``BenchResult``, ``gate`` a ``GateReport`` (``raise_for_status`` turns a failure into
``GateFailed``), ``run_pipeline`` a ``PipelineResult``. Errors are ``EdgekitError`` subclasses
(``UsageError`` for a bad argument).

Importing this module loads neither torch nor onnxruntime: the stage modules import them inside
the functions that need them (a test holds every name here to that).

Why not ``edgekit.quantize(...)``: ``edgekit.quantize``, ``edgekit.export``, ``edgekit.train`` and
``edgekit.bench`` are subpackages, so ``from edgekit import quantize`` is the subpackage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import functools
import os

from edgekit.formats.artifacts import Manifest, load_manifest as _load_manifest
from edgekit.bench.api import bench as _bench
from edgekit.records.result import BenchResult
from edgekit.core.bounds import check_call
from edgekit.core.errors import EdgekitError, GateFailed, UsageError
from edgekit.export.api import export as _export
from edgekit.gates.evaluate import gate_results as _gate_results, raise_for_status
from edgekit.pipeline.run import PipelineConfig, run_pipeline as _run_pipeline
from edgekit.quantize.methods import DynamicConfig, QatConfig, StaticConfig
from edgekit.quantize.produced import Produced
from edgekit.quantize.registry import Method, QuantConfig, layer_lister, method, method_names, register_method, route
from edgekit.core.targets import Target, load_target as _load_target
from edgekit.train.loop import train as _train
from edgekit.train.config import TrainConfig
from edgekit.llm.generation import generate_text
from edgekit.llm.gguf.importer import import_gguf as run
from edgekit.quantize import api as quantize_api


def _front_door(function, name: str | None = None):
    """``function`` with its arguments checked against its annotations first (edgekit.core.bounds.check_call):
    a wrong type is one UsageError naming the argument, before any file is written."""
    @functools.wraps(function)
    def checked(*args, **kwargs):
        check_call(function, args, kwargs, name, {"BenchResult": BenchResult, "Target": Target, "os": os})
        return function(*args, **kwargs)
    return checked


bench = _front_door(_bench)
export = _front_door(_export)
gate = _front_door(_gate_results, "gate")
load_manifest = _front_door(_load_manifest)
load_target = _front_door(_load_target)
run_pipeline = _front_door(_run_pipeline)
train = _front_door(_train)

__all__ = [
    "DynamicConfig",
    "EdgekitError",
    "GateFailed",
    "Manifest",
    "Method",
    "PipelineConfig",
    "Produced",
    "QatConfig",
    "QuantConfig",
    "StaticConfig",
    "Target",
    "TrainConfig",
    "UsageError",
    "bench",
    "export",
    "gate",
    "generate",
    "import_gguf",
    "layer_lister",
    "load_manifest",
    "load_target",
    "method",
    "method_names",
    "quantize",
    "raise_for_status",
    "register_method",
    "route",
    "run_pipeline",
    "train",
]


@_front_door
def quantize(
    source: str | Path,
    config: Any,
    out: str | Path,
    target: str | Target = "rpi4",
    *,
    max_drop: float | None = None,
    force: bool = False,
    progress: Callable | None = None,
    with_report: bool = False,
    **source_options: Any,
) -> tuple[Path, Manifest]:
    """Quantize ``source`` as ``config`` says, for ``target``; write an artifact folder to ``out``.

    ``config``: a method's config object (``DynamicConfig()``, ``StaticConfig(calib=...)``,
    ``QatConfig()``, or the config type of a method added with ``register_method``): its type
    picks the method, its fields are the settings, used as given (``StaticConfig(calib=None)``:
    the calibration set edgekit ships for the model's dataset). A method name (``"static"``) with
    the config's fields as keywords is accepted too, as ``edgekit quantize`` passes them.

    ``source``: a checkpoint or artifact folder, an ``.onnx`` file, ``package.module:factory`` or
    ``hf:CONFIG``; models from outside the zoo take ``source_options`` (``input_shapes``,
    ``input_dtypes``, ``dynamic_axes``, ``input_ranges``, ``state_dict``). ``max_drop`` (accuracy
    points): keep the most sensitive layers in float until the drop is within it, or raise
    ``AccuracyBudgetError``. ``out`` is replaced only when it is a quantized artifact edgekit
    wrote (else ``force``). Returns ``(out, manifest)``: every file in ``manifest.files`` carries
    its measured accuracy (or fidelity to the float model) and parity.
    """
    common = {"max_drop": max_drop, "progress": progress, "force": force, "with_report": with_report}
    if isinstance(config, str):
        return quantize_api.quantize(source, config, out, target, **common, **source_options)
    return quantize_api.quantize_config(source, config, out, target, **common, source_options=source_options)


def generate(artifact: str | Path, prompt: str, *, max_tokens: int = 100, temperature: float = 0.8, top_k: int = 20,
             top_p: float | None = None, seed: int | None = None, stop: tuple[str, ...] = (), chat: bool | None = None,
             system: str | None = None, fmt: str | None = None, threads: int | None = None, device: str = "cpu",
             on_text: Callable[[str], None] | None = None, context: int | None = None):
    """Continue ``prompt`` (a chat model: answer it) with the language model in ``artifact``, as
    ``edgekit generate`` does; returns ``edgekit.llm.generation.Generated``. ``on_text(piece)``
    receives the text as it is made (streaming); ``artifact`` may be ``gguf:PATH``/``gguf:NAME``."""
    return generate_text(artifact, prompt, max_tokens, temperature, top_k, seed, device, fmt, threads, top_p=top_p,
                         stop=tuple(stop), chat=chat, system=system, on_text=on_text, context=context)


def import_gguf(source: str | Path, out: str | Path, *, context: int | None = None,
                force: bool = False) -> tuple[Path, Manifest]:
    """``edgekit import gguf:...``: a Llama-family GGUF file as a checkpoint artifact at ``out``."""
    return run(source, out, context, force)
