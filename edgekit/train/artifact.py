"""The run folder: cleared for a fresh run, finished with the test metrics and the manifest."""

from __future__ import annotations

import contextlib
import math
import shutil
from pathlib import Path

from edgekit.artifacts import MANIFEST_NAME, Manifest, describe_file, finalize
from edgekit.errors import EdgekitError, UsageError
from edgekit.fileio import ensure_writable_dir
from edgekit.train.batches import eval_batches
from edgekit.train.checkpoint import CHECKPOINT_FILE, STATE_FILE
from edgekit.train.tasks import evaluate

OWNED_FILES = (MANIFEST_NAME, CHECKPOINT_FILE, STATE_FILE, "metrics.jsonl", "tokenizer.json", "profile")


def prepare_folder(out: Path, resume: bool) -> None:
    """A fresh run clears what an earlier run left here; a resumed one needs its ``last.pt``."""
    if out.exists() and not out.is_dir():
        raise EdgekitError(f"output path {out} exists and is not a folder")
    ensure_writable_dir(out)
    if resume and not (out / STATE_FILE).is_file():
        raise UsageError(f"nothing to resume in {out}: no {STATE_FILE} (train without --resume first)")
    for name in OWNED_FILES if not resume else (MANIFEST_NAME,):
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def finish(out, spec, model_config, task, task_info, data, device, best, step, steps_per_epoch, train_seconds):
    """Measure the best weights on the test split (fp32, one process) and write the manifest."""
    from edgekit.models import build_model
    from edgekit.train.checkpoint import load_checkpoint

    state, _ = load_checkpoint(out / CHECKPOINT_FILE)
    model = build_model(spec.name, model_config)
    model.load_state_dict(state)
    model.to(device)
    task.bind(model)
    test = evaluate(task, model, eval_batches(data.test, 256), device, contextlib.nullcontext())
    best_step = best["step"] if best["step"] is not None else step
    metrics = {
        task.metric: test[task.metric],
        **{k: v for k, v in test.items() if k != task.metric},
        f"val_{task.metric}": best["value"] if math.isfinite(best["value"]) else None,
        "best_step": best_step,
        "best_epoch": math.ceil(best_step / steps_per_epoch),
        "steps": step,
        "train_seconds": train_seconds,
    }
    manifest = Manifest(
        kind="checkpoint",
        model={"name": spec.name, "config": model_config},
        inputs=spec.input_spec(model_config),
        outputs=spec.outputs,
        files=(describe_file(out, CHECKPOINT_FILE, "checkpoint", metrics={task.metric: test[task.metric]}),),
        task=task_info,
        metrics=metrics,
        quantization=None,
        parent=None,
    )
    _ = manifest.to_dict()  # fail before writing if anything is not serialisable
    return finalize(manifest, out)
