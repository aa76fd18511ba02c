"""The run folder: where a run writes while it trains, how it becomes the artifact, and the
test metrics + manifest that finish it.

A run never destroys a finished artifact before a new one is complete. When ``out`` already
holds a finished run (it has ``manifest.json``), a fresh run trains in the sibling work folder
``<out>.partial/`` (``last.pt``, ``checkpoint.pt``, ``metrics.jsonl``: everything resumable) and
swaps it in as ``out`` atomically once its manifest is written; killed on the way, ``out`` is
untouched and ``--resume`` continues from ``<out>.partial/``. A run into a new (or unfinished)
folder has nothing to protect and trains in ``out`` itself. ``--resume`` continues from
``<out>.partial/`` when an interrupted run left one, else from ``out`` (an interrupted first run
in place, or a finished run to train further, which is copied to ``<out>.partial/`` first).
"""

from __future__ import annotations

import contextlib
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from edgekit.formats.artifacts import MANIFEST_NAME, Manifest, describe_file, finalize
from edgekit.core.errors import EdgekitError, UsageError
from edgekit.core.fileio import atomic_dir, clean_stale_temps, make_dirs, swap_in_dir, temp_sibling
from edgekit.core.outputs import safe_text, foreign_entries, read_proof
from edgekit.train.batches import eval_batches
from edgekit.sources.checkpoint import CHECKPOINT_FILE, load_checkpoint
from edgekit.train.checkpoint import STATE_FILE
from edgekit.train.tasks import evaluate
from edgekit.models import build_model

OWNED_FILES = (MANIFEST_NAME, CHECKPOINT_FILE, STATE_FILE, "metrics.jsonl", "tokenizer.json", "profile")
PARTIAL_SUFFIX = ".partial"


@dataclass(frozen=True)
class RunFolders:
    """Where a run writes (``work``) and the artifact folder it becomes (``out``)."""

    out: Path
    work: Path
    seed: Path | None = None  # resume: the finished artifact copied into ``work`` to train further

    @property
    def swaps(self) -> bool:
        return self.work != self.out


def partial_dir(out: Path) -> Path:
    return out.with_name(out.name + PARTIAL_SUFFIX)


def _finished(folder: Path) -> bool:
    return (folder / MANIFEST_NAME).is_file()


def _foreign(folder: Path) -> list[str]:
    """What in a run folder edgekit train did not write, at every depth (``profile/`` holds only
    its traces), its temporaries aside: ``edgekit.core.outputs`` decides, as for every output."""
    return foreign_entries(folder, "run") if folder.is_dir() and not folder.is_symlink() else []


def plan_folders(out: Path, resume: bool) -> RunFolders:
    """Decide where this run writes, touching nothing (every rank of a distributed run calls it)."""
    out = Path(out)
    partial = partial_dir(out)
    for path in (out, partial):
        if path.exists() and not path.is_dir():
            raise EdgekitError(f"output path {path} exists and is not a folder")
    for path in (out, partial):  # either may be replaced or removed below, resumed or not
        foreign = _foreign(path)
        if foreign:  # edgekit replaces only what it wrote
            held = "a trained model and files" if _finished(path) else "files"
            where = f"--out {safe_text(out)}" if path == out else f"the work folder {safe_text(path)} of --out {safe_text(out)}"
            raise UsageError(f"{where} holds {held} edgekit train did not write ({safe_text(', '.join(foreign[:3]))}); "
                             "move them, or train into another --out")
    interrupted = partial.is_dir() and (partial / STATE_FILE).is_file() and not _finished(partial)
    if resume:
        if interrupted:
            return RunFolders(out, partial)
        if (out / STATE_FILE).is_file():
            return RunFolders(out, partial, seed=out) if _finished(out) else RunFolders(out, out)
        raise UsageError(
            f"nothing to resume in {out}: no {STATE_FILE} there or in {partial} (train without --resume first)"
        )
    if _finished(out):
        if _manifest_kind(out) != "checkpoint":
            raise UsageError(f"--out {safe_text(out)} holds an edgekit {_manifest_kind(out)} artifact, not a checkpoint; "
                             "train into another --out")
        return RunFolders(out, partial)
    return RunFolders(out, out)


def _manifest_kind(folder: Path) -> str:
    doc = read_proof(folder / MANIFEST_NAME) or {}
    return doc.get("kind") if isinstance(doc.get("kind"), str) else "unknown"


def prepare_folders(folders: RunFolders, resume: bool) -> list[Path]:
    """Make ``folders.work`` ready (rank 0 only): leftovers of killed runs go, a fresh run starts
    empty, a resumed finished run is copied over (atomically: a killed copy leaves nothing).
    Returns the folders it created (for ``fileio.prune_empty`` when the run fails early)."""
    out, work = folders.out, folders.work
    created = make_dirs(out.parent)
    for final in (out, partial_dir(out)):
        clean_stale_temps(final)
    if folders.swaps:
        if work.exists() and (not resume or folders.seed is not None or _finished(work)):
            shutil.rmtree(work)
        if folders.seed is not None:
            with atomic_dir(work) as tmp:
                for name in OWNED_FILES:
                    source = folders.seed / name
                    if name == MANIFEST_NAME or not source.exists():
                        continue
                    if source.is_dir():
                        shutil.copytree(source, tmp / name)
                    else:
                        shutil.copy2(source, tmp / name)
    created += make_dirs(work)
    for name in OWNED_FILES:
        clean_stale_temps(work / name)
    # A fresh run clears what an earlier run left here; a resumed one keeps all but the manifest.
    for name in OWNED_FILES if not resume else (MANIFEST_NAME,):
        path = work / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    return created


def discard_seeded(folders: RunFolders) -> None:
    """A resume of a finished run that failed before training: drop its unchanged copy."""
    if folders.seed is not None and folders.work.is_dir():
        shutil.rmtree(folders.work, ignore_errors=True)


def complete(folders: RunFolders) -> None:
    """Swap the finished work folder in as the artifact (nothing to do when it trained in place)."""
    if not folders.swaps:
        return
    staged = temp_sibling(folders.out)  # off the .partial name first: a kill now leaves only a temp
    folders.work.rename(staged)
    swap_in_dir(staged, folders.out)


def finish(out, spec, model_config, task, task_info, data, device, best, step, steps_per_epoch, train_seconds,
           limits=()):
    """Measure the best weights on the test split (fp32, one process) and write the manifest;
    ``limits``: the settings the run did not reach as written (``edgekit.train.limits``)."""
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
        **({"limits": list(limits)} if limits else {}),
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
