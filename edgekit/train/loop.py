"""The training loop, readable top to bottom (after nanoGPT).

Setup: process group and device, data, model, optimizer, schedule, scaler, resume. Then for each
optimizer step: ``grad_accum`` micro-batches under autocast (gradient all-reduce only on the
last), a non-finite check, unscale + clip, step, schedule. Every ``log_every`` steps a progress
record; every ``eval_every`` steps validation and, when it improves, ``checkpoint.pt``; every
``save_every`` steps ``last.pt``, from which ``resume`` continues exactly. At the end the best
weights are measured on the test split and ``manifest.json`` is written. ``_run`` calls these
steps in that order, each a small function below; ``RunState`` (``state.py``) is what they share.

Files in the run folder (rank 0 writes them, each atomically):
``checkpoint.pt`` best weights + config · ``last.pt`` resumable state · ``metrics.jsonl`` ·
``tokenizer.json`` (text models) · ``profile/`` (``profile=True``) · ``manifest.json`` last.
The run folder is ``out`` itself, or ``<out>.partial/`` when ``out`` holds a finished run that
must survive until the new one is complete (see ``edgekit.train.artifact``).
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

from edgekit.formats.artifacts import Manifest
from edgekit.core.errors import EdgekitError, InputFileError, UsageError
from edgekit.core.fileio import prune_empty, write_json
from edgekit.core.outputs import check_not_inputs, normalise_out, output_lock
from edgekit.train import distributed, precision, artifact, limits
from edgekit.train.artifact import finish
from edgekit.train.batches import eval_batches, to_device, train_loader
from edgekit.train.checkpoint import STATE_FILE, load_train_state
from edgekit.train.config import TrainConfig
from edgekit.train.reporting import Meter, Progress, RunLog, profiler
from edgekit.train.schedule import WarmupCosine, default_warmup
from edgekit.train.state import RunState, restore, save_best, save_last
from edgekit.train.tasks import evaluate, task_for
from edgekit.models import build_model, get_spec
from edgekit.models.registry import check_model_memory

def train(config: TrainConfig, out: str | Path, progress: Progress | None = None) -> tuple[Path, Manifest]:
    """Train ``config.model`` on its task's data and leave a checkpoint artifact in ``out``.

    Under torchrun every process calls this; rank 0 reports and writes. Returns the folder and
    its manifest (read back from disk on the other ranks).
    """
    import torch

    runtime = distributed.setup(config)
    threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    clean = False
    try:
        result = _train(config, Path(out), progress, runtime)
        clean = True
        return result
    finally:
        torch.set_num_threads(threads)
        distributed.teardown(runtime, clean=clean)


def _train(config: TrainConfig, out: Path, progress: Progress | None, rt) -> tuple[Path, Manifest]:

    spec = get_spec(config.model)
    task = task_for(spec)
    settings = spec.config(config.model_config)  # bad or oversized settings: refused before any folder exists
    check_model_memory(spec.name, lambda: spec.factory(**settings))
    out = normalise_out(out)
    check_not_inputs(out, [config.data])
    with output_lock(out) if rt.is_main else contextlib.nullcontext():  # one run per folder at a time
        folders = artifact.plan_folders(out, config.resume)  # every rank, before rank 0 changes anything
        rt.barrier()
        created = artifact.prepare_folders(folders, config.resume) if rt.is_main else []
        rt.barrier()
        try:
            return _run(config, folders, progress, rt, spec, task)
        except BaseException:
            prune_empty(created)  # a run that failed before writing anything leaves no empty folder
            raise


def _run(config: TrainConfig, folders, progress: Progress | None, rt, spec, task) -> tuple[Path, Manifest]:
    import torch

    run = RunState(config, rt, spec, task, folders.work, RunLog(folders.work, progress, enabled=rt.is_main))
    _prepare_data(run)
    _build_model(run)
    _plan_steps(run)
    if config.resume:
        _resume(run, folders)
    _announce(run)
    try:
        _train_steps(run)
    except torch.cuda.OutOfMemoryError:  # torch.OutOfMemoryError in torch >= 2.5
        raise EdgekitError(_oom_message(run.device, config, run.step)) from None
    return _finish(run, folders)


# --------------------------------------------------------------------------- set-up


def _prepare_data(run: RunState) -> None:
    """The data, and the model settings it decides (vocabulary size, classes)."""
    config, spec = run.config, run.spec
    requested = spec.config(config.model_config)
    with run.rt.main_first():
        run.data = run.task.prepare(config, requested)
    for key, value in run.data.model_config.items():
        if key in config.model_config and config.model_config[key] != value:
            raise UsageError(f"model config {key}={config.model_config[key]!r} does not match the data ({value!r})")
    run.model_config = spec.config({**config.model_config, **run.data.model_config})
    if run.rt.is_main and "tokenizer" in run.data.meta:
        write_json(run.out / "tokenizer.json", run.data.meta["tokenizer"])
    run.base_meta = {"model": config.model, "model_config": run.model_config, "train_config": config.to_dict(),
                     **run.data.meta}


def _build_model(run: RunState) -> None:
    """Model (same initial weights on every rank), precision, distributed wrapper, optimizer."""
    import torch


    config, rt = run.config, run.rt
    torch.manual_seed(config.seed)  # same initial weights on every rank
    run.device = rt.device
    run.amp_dtype = precision.resolve_precision(config.precision, run.device, run.spec.recurrent)
    raw = run.raw = build_model(config.model, run.model_config).to(run.device)
    if config.threads is None and torch.device(run.device).type == "cpu" and rt.world_size == 1:
        from edgekit.train.threads import default_threads

        chosen = default_threads(sum(p.numel() for p in raw.parameters()))  # measured: edgekit/train/threads.py
        if chosen is not None:
            torch.set_num_threads(chosen)  # train() puts the caller's setting back
    if config.grad_checkpoint:
        if not hasattr(raw, "set_grad_checkpointing"):
            raise UsageError(
                f"model {config.model!r} has no blocks to checkpoint; --grad-checkpoint suits transformer-*"
            )
        raw.set_grad_checkpointing(True)
    run.task.bind(raw)
    torch.manual_seed(config.seed + rt.rank)  # per-rank randomness (dropout) from here on
    run.model, run.state_model = distributed.wrap(raw, rt, config)
    run.optimizer = _optimizer(raw, config, run.device, rt)
    run.scaler = precision.make_scaler(run.device, run.amp_dtype)
    run.scale_watch = precision.LossScaleWatch()
    run.autocast = precision.autocast(run.device, run.amp_dtype)


def _plan_steps(run: RunState) -> None:
    """Batches (every rank sees its own slice of the same shuffled order) and the step schedule."""
    config = run.config
    run.loader, run.batches = train_loader(run.data.train, config, run.rt)
    run.micro_per_epoch = len(run.batches.batch_sampler())
    run.steps_per_epoch = math.ceil(run.micro_per_epoch / config.grad_accum)
    length = limits.plan(config, run.steps_per_epoch, run.micro_per_epoch, len(run.batches.sampler), run.rt.world_size)
    run.total_steps = total_steps = length.total_steps  # --max-steps alone is honoured: the data repeats
    run.epochs, run.limits, run.global_batch = length.epochs, list(length.limits), length.global_batch
    warmup = config.warmup_steps if config.warmup_steps is not None else default_warmup(total_steps)
    run.schedule = WarmupCosine(config.lr, total_steps, min(warmup, total_steps), config.min_lr)
    run.eval_every = config.eval_every or run.steps_per_epoch
    run.save_every = config.save_every or run.eval_every
    run.val_batches = eval_batches(run.data.val, max(config.batch_size, 64))


def _resume(run: RunState, folders) -> None:
    """Continue from ``last.pt``: weights, optimizer, scaler, progress and every rank's RNG."""
    rt = run.rt
    try:
        saved = load_train_state(run.out / STATE_FILE)
        restore(run, saved)
    except (UsageError, InputFileError):
        if rt.is_main:
            artifact.discard_seeded(folders)  # the unchanged copy of a finished run: not worth keeping
        raise
    distributed.restore_rng(saved["rng"], rt)


def _announce(run: RunState) -> None:
    """The ``start`` record: what is about to run, and where."""
    import torch

    config, rt = run.config, run.rt
    run.log.emit(
        "start",
        step=run.step,
        model=config.model,
        device=str(run.device),
        precision=run.amp_dtype,
        strategy=rt.strategy,
        world_size=rt.world_size,
        total_steps=run.total_steps,
        steps_per_epoch=run.steps_per_epoch,
        epochs=run.epochs,
        global_batch=run.global_batch,
        parameters=sum(p.numel() for p in run.raw.parameters()),
        threads=torch.get_num_threads(),
        unit=run.task.unit,
        resumed=config.resume,
    )
    for limit in run.limits:  # said once, before the first step; recorded in the manifest too
        run.log.warn(limit.message, step=run.step, setting=limit.setting, asked=limit.asked, reached=limit.reached)


# --------------------------------------------------------------------------- the epoch loop


def _train_steps(run: RunState) -> None:
    """Epochs until ``total_steps`` optimizer steps; a resumed run starts mid-epoch."""
    run.meter = Meter(run.total_steps, run.step)
    run.started = time.perf_counter()
    profiling = profiler(run.out, run.device) if run.config.profile and run.rt.is_main else contextlib.nullcontext()
    with profiling as prof:
        while run.step < run.total_steps:
            _train_epoch(run, prof)


def _train_epoch(run: RunState, prof) -> None:
    """The rest of the current epoch: ``grad_accum`` micro-batches per optimizer step, then the
    records, evaluation and saves that step is due for."""
    accum = run.config.grad_accum
    first_micro = (run.step % run.steps_per_epoch) * accum
    run.batches.set_epoch(run.step // run.steps_per_epoch, skip=first_micro)
    run.model.train()
    group = []  # this optimizer step's micro-batch losses (detached, on the device)
    for micro, batch in enumerate(run.loader, start=first_micro):
        group_start = micro - micro % accum
        group_size = min(accum, run.micro_per_epoch - group_start)
        last = micro - group_start == group_size - 1
        run.window[2] += run.task.units(batch)
        group.append(_forward_backward(run, batch, group_size, sync=last))
        if not last:
            continue
        lr = _optimizer_step(run, group)
        group = []
        if prof is not None:
            prof.step()
        step = run.step
        if step % run.config.log_every == 0 or step == run.total_steps:
            _log_step(run, lr)
        if step % run.eval_every == 0 or step == run.total_steps:
            _evaluate_and_checkpoint(run)
        if step % run.save_every == 0 or step == run.total_steps:
            paused = time.perf_counter()
            save_last(run)
            run.meter.exclude(time.perf_counter() - paused)
        if step >= run.total_steps:
            break


def _forward_backward(run: RunState, batch, group_size: int, sync: bool):
    """One micro-batch under autocast; gradients all-reduced only on a step's last (``sync``)."""
    batch = to_device(batch, run.device)
    with distributed.grad_sync(run.model, run.rt, sync=sync):
        with run.autocast:
            loss = run.task.loss(run.model, batch)
        run.scaler.scale(loss / group_size if group_size > 1 else loss).backward()
    return loss.detach()


def _optimizer_step(run: RunState, group: list) -> float:
    """One optimizer step; one host sync reads the loss and checks it is finite (a non-finite
    step is skipped, too many in a row stop the run). Returns the step's learning rate."""
    import torch

    config, optimizer, scaler = run.config, run.optimizer, run.scaler
    group_loss = (torch.stack(group).float().mean() if len(group) > 1 else group[0]).item()
    lr = run.schedule.apply(optimizer, run.step)
    if run.rt.any_true(not math.isfinite(group_loss)):
        optimizer.zero_grad(set_to_none=True)
        run.nonfinite_streak += 1
        run.log.warn(
            f"non-finite loss at step {run.step + 1}: step skipped "
            f"({run.nonfinite_streak}/{config.max_nonfinite} in a row)",
            step=run.step + 1,
        )
        if run.nonfinite_streak >= config.max_nonfinite:
            raise EdgekitError(
                f"loss was non-finite for {run.nonfinite_streak} steps in a row (last at step {run.step + 1}); "
                "lower --lr, set --clip-grad-norm, or train in --precision bf16/fp32"
            )
    else:
        run.nonfinite_streak = 0
        if config.clip_grad_norm is not None:
            scaler.unscale_(optimizer)
            run.grad_norm = torch.nn.utils.clip_grad_norm_(run.raw.parameters(), config.clip_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        run.window[0] += group_loss
        run.window[1] += 1
    run.step += 1
    if run.amp_dtype == "fp16":
        warning = run.scale_watch.update(scaler.get_scale())
        if warning:
            run.log.warn(warning, step=run.step)
    return lr


def _log_step(run: RunState, lr: float) -> None:
    """A progress record: mean loss and throughput since the last one, summed over ranks."""
    loss_sum, groups, units_all = run.rt.sum(run.window)
    run.window = [0.0, 0, 0]
    mean = loss_sum / groups if groups else float("nan")
    run.eval_loss[0] += loss_sum
    run.eval_loss[1] += groups
    record = {
        "step": run.step,
        "total_steps": run.total_steps,
        "epoch": round(run.step / run.steps_per_epoch, 3),
        "loss": mean,
        "lr": lr,
        "unit": run.task.unit,
        **run.meter.snapshot(run.step, units_all),
    }
    if run.amp_dtype == "fp16":
        record["loss_scale"] = run.scaler.get_scale()
    if run.grad_norm is not None:
        record["grad_norm"] = float(_full(run.grad_norm))
    run.log.emit("step", **record)


# --------------------------------------------------------------------------- evaluation and checkpoints


def _evaluate_and_checkpoint(run: RunState) -> None:
    """Validation; ``checkpoint.pt`` when the metric improves. Its time is not training time."""
    task, best = run.task, run.best
    paused = time.perf_counter()
    model = run.state_model if run.rt.strategy == "fsdp" else run.raw
    metrics = evaluate(task, model, run.val_batches, run.device, run.autocast)
    improved = run.rt.broadcast_flag(metrics[task.metric] > best["value"])
    if improved:
        best = run.best = {"value": metrics[task.metric], "step": run.step, "metrics": metrics}
        save_best(run, metrics)
    run.log.emit(
        "eval",
        step=run.step,
        epoch=math.ceil(run.step / run.steps_per_epoch),
        epochs=run.epochs,
        train_loss=run.eval_loss[0] / max(run.eval_loss[1], 1),
        **{f"val_{k}": v for k, v in metrics.items()},
        **{f"best_val_{task.metric}": best["value"] if math.isfinite(best["value"]) else None},
        improved=improved,
        elapsed_s=round(time.perf_counter() - run.started, 3),
    )
    run.eval_loss[:] = [0.0, 0]
    run.meter.exclude(time.perf_counter() - paused)


# --------------------------------------------------------------------------- finish


def _finish(run: RunState, folders) -> tuple[Path, Manifest]:
    """Test-split metrics of the best weights and ``manifest.json`` (rank 0); every rank returns it."""
    train_seconds = round(time.perf_counter() - run.started, 3)
    if run.best["step"] is None:  # validation never produced a finite metric: keep the final weights
        save_best(run, {})
    rt, out = run.rt, run.out
    rt.barrier()
    manifest = None
    if rt.is_main:
        task_info = {**run.spec.task, **run.data.task}
        manifest = finish(
            out, run.spec, run.model_config, run.task, task_info, run.data, run.device, run.best, run.step,
            run.steps_per_epoch, train_seconds, limits=[limit.to_dict() for limit in run.limits]
        )
        run.log.emit("end", step=run.step, elapsed_s=train_seconds, **manifest.metrics)
        artifact.complete(folders)  # a run in <out>.partial/ becomes <out> only now, in one swap
    rt.barrier()
    if manifest is None:
        from edgekit.formats.artifacts import load_manifest

        _, manifest = load_manifest(folders.out, verify=False)
    return folders.out, manifest


# --------------------------------------------------------------------------- helpers


def _optimizer(model, config: TrainConfig, device, rt):
    """AdamW (fused on CUDA). Weight decay on tensors of 2+ dims (weights, embeddings), none on
    biases and norm scales (nanoGPT's rule)."""
    import torch

    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = device.type == "cuda" and rt.strategy != "fsdp"
    return torch.optim.AdamW(groups, lr=config.lr, fused=fused or None)


def _full(tensor):
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _oom_message(device, config: TrainConfig, step: int) -> str:
    import torch

    memory = ""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**30
        total = torch.cuda.get_device_properties(device).total_memory / 2**30
        memory = f" (peak allocated {peak:.2f} GiB of {total:.2f} GiB)"
    half = max(1, config.batch_size // 2)
    return (
        f"{device.type.upper()} out of memory at step {step + 1}{memory} with --batch-size {config.batch_size}; "
        f"keep the global batch with --batch-size {half} --grad-accum {config.grad_accum * 2}, "
        "or save memory with --grad-checkpoint / --precision bf16"
    )
