"""``quantize``: float checkpoint artifact -> int8 artifact, with every file's accuracy measured."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from edgekit.artifacts import Manifest, describe_file, finalize, load_manifest, parent_ref
from edgekit.errors import UsageError
from edgekit.fileio import atomic_dir
from edgekit.targets import Target, load_target


def quantize(source: str | Path, method: str, out: str | Path, target: str | Target = "rpi4", **options) -> tuple[Path, Manifest]:
    """Quantize a checkpoint artifact with ``method`` for ``target``; write an artifact to ``out``.

    ``options`` are the method's config fields (e.g. ``calib=...``, ``formats=("onnx",)``).
    """
    from edgekit.export.reference import REFERENCE_FILE, write_reference
    from edgekit.export.verify import check_parity, predictor_for
    from edgekit.export.reference import read_reference
    from edgekit.evaluation import task_accuracy
    from edgekit.quantize.job import QuantJob
    from edgekit.quantize.methods import get_method, make_config

    method_spec = get_method(method)
    config = make_config(method, **options)
    target = target if isinstance(target, Target) else load_target(target)
    folder, manifest = load_manifest(source)
    if manifest.kind != "checkpoint":
        raise UsageError(f"{folder} is a {manifest.kind} artifact; quantize takes a float checkpoint")
    float_accuracy = manifest.metrics.get("accuracy")

    with atomic_dir(out) as work:
        provenance = {"edgekit_method": method, "target": target.name, "model": manifest.model["name"]}
        job = QuantJob(folder, manifest, target, work, provenance)
        produced = method_spec.handler(job, config)
        write_reference(work / REFERENCE_FILE, job.float_model(), manifest.inputs, manifest.task)
        cases = read_reference(work / REFERENCE_FILE)
        files = []
        for item in produced:
            predict = predictor_for(work / item.path, item.format, item.details)
            parity = check_parity(predict, cases, "int8", f"int8 {method} {item.format}")
            accuracy = task_accuracy(manifest.task, predict)
            metrics = {"accuracy": accuracy, "float_accuracy": float_accuracy, "parity": parity}
            details = {**item.details, "variant": f"int8-{method}-{item.format}"}
            files.append(describe_file(work, item.path, item.format, precision="int8", metrics=metrics, details=details))
        for leftover in work.glob(".float.onnx*"):
            leftover.unlink()
        result = Manifest(
            kind="quantized",
            model=manifest.model,
            inputs=manifest.inputs,
            outputs=manifest.outputs,
            files=tuple(files),
            task=manifest.task,
            quantization={
                "method": method,
                "config": _jsonable(config),
                "calibration": job.calibration_info or None,
            },
            metrics={"float_accuracy": float_accuracy},
            parent=parent_ref(folder, manifest),
            target=target.name,
        )
        result = finalize(result, work)
    return Path(out), replace(result)


def _jsonable(config) -> dict:
    import dataclasses

    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
    return out
