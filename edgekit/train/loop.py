"""The training loop, readable top to bottom (after nanoGPT).

Setup: process group and device, data, model, optimizer, schedule, scaler, resume. Then for each
optimizer step: ``grad_accum`` micro-batches under autocast (gradient all-reduce only on the
last), a non-finite check, unscale + clip, step, schedule. Every ``log_every`` steps a progress
record; every ``eval_every`` steps validation and, when it improves, ``checkpoint.pt``; every
``save_every`` steps ``last.pt``, from which ``resume`` continues exactly. At the end the best
weights are measured on the test split and ``manifest.json`` is written.

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

from edgekit.artifacts import Manifest
from edgekit.errors import EdgekitError, InputFileError, UsageError
from edgekit.fileio import prune_empty, write_json
from edgekit.outputs import check_not_inputs, normalise_out, output_lock
from edgekit.train import distributed, precision
from edgekit.train import artifact
from edgekit.train.artifact import finish
from edgekit.train.batches import eval_batches, to_device, train_loader
from edgekit.train.checkpoint import CHECKPOINT_FILE, STATE_FILE, load_train_state, save_checkpoint, save_train_state
from edgekit.train.config import RESUME_LOCKED, TrainConfig
from edgekit.train.distributed import select_device  # noqa: F401  (kept importable from here)
from edgekit.train.reporting import Meter, Progress, RunLog
from edgekit.train.schedule import WarmupCosine, default_warmup
from edgekit.train.tasks import evaluate

PROFILE_SCHEDULE = {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}


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
    from edgekit.models import get_spec
    from edgekit.train.tasks import task_for

    from edgekit.models.registry import check_model_memory

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

    from edgekit.models import build_model

    final, out = folders.out, folders.work  # the run writes in ``out``; ``final`` is the artifact
    log = RunLog(out, progress, enabled=rt.is_main)

    # ---- data, and the model settings it decides (vocabulary size, classes)
    requested = spec.config(config.model_config)
    with rt.main_first():
        data = task.prepare(config, requested)
    for key, value in data.model_config.items():
        if key in config.model_config and config.model_config[key] != value:
            raise UsageError(f"model config {key}={config.model_config[key]!r} does not match the data ({value!r})")
    model_config = spec.config({**config.model_config, **data.model_config})
    task_info = {**spec.task, **data.task}
    if rt.is_main and "tokenizer" in data.meta:
        write_json(out / "tokenizer.json", data.meta["tokenizer"])

    # ---- model, precision, optimizer
    torch.manual_seed(config.seed)  # same initial weights on every rank
    device = rt.device
    amp_dtype = precision.resolve_precision(config.precision, device, spec.recurrent)
    raw = build_model(config.model, model_config).to(device)
    if config.threads is None and torch.device(device).type == "cpu" and rt.world_size == 1:
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
    task.bind(raw)
    torch.manual_seed(config.seed + rt.rank)  # per-rank randomness (dropout) from here on
    model, state_model = distributed.wrap(raw, rt, config)
    optimizer = _optimizer(raw, config, device, rt)
    scaler = precision.make_scaler(device, amp_dtype)
    scale_watch = precision.LossScaleWatch()
    autocast = precision.autocast(device, amp_dtype)

    # ---- batches: every rank sees its own slice of the same shuffled order
    loader, batches = train_loader(data.train, config, rt)
    micro_per_epoch = len(batches.batch_sampler())
    accum = config.grad_accum
    steps_per_epoch = math.ceil(micro_per_epoch / accum)
    total_steps = config.epochs * steps_per_epoch
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    warmup = config.warmup_steps if config.warmup_steps is not None else default_warmup(total_steps)
    schedule = WarmupCosine(config.lr, total_steps, min(warmup, total_steps), config.min_lr)
    eval_every = config.eval_every or steps_per_epoch
    save_every = config.save_every or eval_every
    val_batches = eval_batches(data.val, max(config.batch_size, 64))

    step, best = 0, {"value": -math.inf, "step": None, "metrics": None}
    nonfinite_streak = 0
    if config.resume:
        try:
            saved = load_train_state(out / STATE_FILE)
            step, best, nonfinite_streak = _restore(saved, config, rt, state_model, optimizer, scaler, scale_watch, log)
        except (UsageError, InputFileError):
            if rt.is_main:
                artifact.discard_seeded(folders)  # the unchanged copy of a finished run: not worth keeping
            raise
        distributed.restore_rng(saved["rng"], rt)
        del saved
    base_meta = {"model": config.model, "model_config": model_config, "train_config": config.to_dict(), **data.meta}

    def save_best(metrics: dict) -> None:
        state = distributed.model_state(state_model, rt)
        if rt.is_main:
            save_checkpoint(out / CHECKPOINT_FILE, state, {**base_meta, "step": step, "val": metrics})
            log.emit("checkpoint", kind="best", step=step, path=str(out / CHECKPOINT_FILE))

    def save_state() -> None:
        model_sd = distributed.model_state(state_model, rt)
        optim_sd = distributed.optimizer_state(state_model, optimizer, rt)
        rng = distributed.rng_states(rt)
        if rt.is_main:
            meta = {
                **base_meta,
                "step": step,
                "world_size": rt.world_size,
                "best": {**best, "value": best["value"] if math.isfinite(best["value"]) else None},
                "nonfinite_streak": nonfinite_streak,
                "schedule": schedule.state_dict(),
                "scaler": scaler.state_dict(),
                "loss_scale_watch": scale_watch.state_dict(),
            }
            save_train_state(out / STATE_FILE, model_sd, optim_sd, rng, meta)
            log.emit("checkpoint", kind="last", step=step, path=str(out / STATE_FILE))

    unit = task.unit
    global_batch = config.batch_size * accum * rt.world_size
    log.emit(
        "start",
        step=step,
        model=config.model,
        device=str(device),
        precision=amp_dtype,
        strategy=rt.strategy,
        world_size=rt.world_size,
        total_steps=total_steps,
        steps_per_epoch=steps_per_epoch,
        epochs=config.epochs,
        global_batch=global_batch,
        parameters=sum(p.numel() for p in raw.parameters()),
        threads=torch.get_num_threads(),
        unit=unit,
        resumed=config.resume,
    )
    meter = Meter(total_steps, step)
    started = time.perf_counter()
    window = [0.0, 0, 0]  # since the last progress record: loss sum, optimizer steps, samples/tokens
    eval_loss = [0.0, 0]
    grad_norm = None
    profiler = _profiler(out, device) if config.profile and rt.is_main else contextlib.nullcontext()

    def evaluate_and_checkpoint() -> None:
        nonlocal best
        paused = time.perf_counter()
        metrics = evaluate(task, state_model if rt.strategy == "fsdp" else raw, val_batches, device, autocast)
        improved = rt.broadcast_flag(metrics[task.metric] > best["value"])
        if improved:
            best = {"value": metrics[task.metric], "step": step, "metrics": metrics}
            save_best(metrics)
        log.emit(
            "eval",
            step=step,
            epoch=math.ceil(step / steps_per_epoch),
            epochs=config.epochs,
            train_loss=eval_loss[0] / max(eval_loss[1], 1),
            **{f"val_{k}": v for k, v in metrics.items()},
            **{f"best_val_{task.metric}": best["value"] if math.isfinite(best["value"]) else None},
            improved=improved,
            elapsed_s=round(time.perf_counter() - started, 3),
        )
        eval_loss[:] = [0.0, 0]
        meter.exclude(time.perf_counter() - paused)

    try:
        with profiler as prof:
            while step < total_steps:
                epoch = step // steps_per_epoch
                first_micro = (step % steps_per_epoch) * accum
                batches.set_epoch(epoch, skip=first_micro)
                model.train()
                group = []  # this optimizer step's micro-batch losses (detached, on the device)
                for micro, batch in enumerate(loader, start=first_micro):
                    group_start = micro - micro % accum
                    group_size = min(accum, micro_per_epoch - group_start)
                    last = micro - group_start == group_size - 1
                    window[2] += task.units(batch)
                    batch = to_device(batch, device)
                    with distributed.grad_sync(model, rt, sync=last):
                        with autocast:
                            loss = task.loss(model, batch)
                        scaler.scale(loss / group_size if group_size > 1 else loss).backward()
                    group.append(loss.detach())
                    if not last:
                        continue

                    # ---- one optimizer step; one host sync reads the loss and checks it is finite
                    group_loss = (torch.stack(group).float().mean() if len(group) > 1 else group[0]).item()
                    group = []
                    lr = schedule.apply(optimizer, step)
                    if rt.any_true(not math.isfinite(group_loss)):
                        optimizer.zero_grad(set_to_none=True)
                        nonfinite_streak += 1
                        log.warn(
                            f"non-finite loss at step {step + 1}: step skipped "
                            f"({nonfinite_streak}/{config.max_nonfinite} in a row)",
                            step=step + 1,
                        )
                        if nonfinite_streak >= config.max_nonfinite:
                            raise EdgekitError(
                                f"loss was non-finite for {nonfinite_streak} steps in a row (last at step {step + 1}); "
                                "lower --lr, set --clip-grad-norm, or train in --precision bf16/fp32"
                            )
                    else:
                        nonfinite_streak = 0
                        if config.clip_grad_norm is not None:
                            scaler.unscale_(optimizer)
                            grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), config.clip_grad_norm)
                        scaler.step(optimizer)
                        scaler.update()
                        optimizer.zero_grad(set_to_none=True)
                        window[0] += group_loss
                        window[1] += 1
                    step += 1
                    if amp_dtype == "fp16":
                        warning = scale_watch.update(scaler.get_scale())
                        if warning:
                            log.warn(warning, step=step)
                    if prof is not None:
                        prof.step()

                    if step % config.log_every == 0 or step == total_steps:
                        loss_sum, groups, units_all = rt.sum(window)
                        window = [0.0, 0, 0]
                        mean = loss_sum / groups if groups else float("nan")
                        eval_loss[0] += loss_sum
                        eval_loss[1] += groups
                        record = {
                            "step": step,
                            "total_steps": total_steps,
                            "epoch": round(step / steps_per_epoch, 3),
                            "loss": mean,
                            "lr": lr,
                            "unit": unit,
                            **meter.snapshot(step, units_all),
                        }
                        if amp_dtype == "fp16":
                            record["loss_scale"] = scaler.get_scale()
                        if grad_norm is not None:
                            record["grad_norm"] = float(_full(grad_norm))
                        log.emit("step", **record)
                    if step % eval_every == 0 or step == total_steps:
                        evaluate_and_checkpoint()
                    if step % save_every == 0 or step == total_steps:
                        paused = time.perf_counter()
                        save_state()
                        meter.exclude(time.perf_counter() - paused)
                    if step >= total_steps:
                        break
    except torch.cuda.OutOfMemoryError:  # torch.OutOfMemoryError in torch >= 2.5
        raise EdgekitError(_oom_message(device, config, step)) from None

    train_seconds = round(time.perf_counter() - started, 3)
    if best["step"] is None:  # validation never produced a finite metric: keep the final weights
        save_best({})
    rt.barrier()
    manifest = None
    if rt.is_main:
        manifest = finish(
            out, spec, model_config, task, task_info, data, device, best, step, steps_per_epoch, train_seconds
        )
        log.emit("end", step=step, elapsed_s=train_seconds, **manifest.metrics)
        artifact.complete(folders)  # a run in <out>.partial/ becomes <out> only now, in one swap
    rt.barrier()
    if manifest is None:
        from edgekit.artifacts import load_manifest

        _, manifest = load_manifest(final, verify=False)
    return final, manifest


# --------------------------------------------------------------------------- setup helpers


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


def _profiler(out: Path, device):
    from torch.profiler import ProfilerActivity, profile, schedule

    folder = out / "profile"
    folder.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])

    def write(prof) -> None:
        prof.export_chrome_trace(str(folder / f"trace_step{prof.step_num}.json"))

    return profile(activities=activities, schedule=schedule(**PROFILE_SCHEDULE), on_trace_ready=write)


def _restore(saved, config: TrainConfig, rt, state_model, optimizer, scaler, scale_watch, log):
    """Load a ``last.pt`` into the live objects; refuse one from a different run."""
    meta = saved["meta"]
    previous = meta.get("train_config", {})
    changed = [k for k in RESUME_LOCKED if k in previous and previous[k] != getattr(config, k)]
    if changed:
        detail = ", ".join(f"{k}: {previous[k]!r} -> {getattr(config, k)!r}" for k in changed)
        raise UsageError(f"cannot resume with different settings ({detail}); use the original ones")
    if meta.get("world_size") != rt.world_size:
        raise UsageError(
            f"the run was saved with {meta.get('world_size')} process(es), this one has {rt.world_size}; "
            "resume with the same number so every rank continues its own data order"
        )
    if any(previous.get(k) != getattr(config, k) for k in ("epochs", "max_steps")):
        log.warn("epochs/max_steps changed on resume: the learning-rate schedule follows the new length")
    distributed.load_model_state(state_model, saved["model"], rt)
    distributed.load_optimizer_state(state_model, optimizer, saved["optimizer"], rt)
    if meta.get("scaler"):
        scaler.load_state_dict(meta["scaler"])
    scale_watch.load_state_dict(meta["loss_scale_watch"])
    log.truncate_after(meta["step"])
    best = dict(meta["best"])
    if best.get("value") is None:
        best["value"] = -math.inf
    return meta["step"], best, meta["nonfinite_streak"]


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
