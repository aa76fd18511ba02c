"""``edgekit train``: train a zoo model and write a checkpoint artifact.

Also the entry for distributed runs: ``torchrun --nproc_per_node N -m edgekit train ...``
(only rank 0 prints).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, echo_json, handles_errors, progress_enabled
from edgekit.cli.options import JsonFlag, ModelOpt, SeedOpt
from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.fileio import NotJSONError, loads_json
from edgekit.train.artifact import partial_dir
from edgekit.train.checkpoint import STATE_FILE
from edgekit.train.config import TrainConfig
from edgekit.train.distributed import is_main_process


def parse_settings(items: list[str]) -> dict:
    """``key=value`` pairs; values are read as JSON when they parse (numbers, true/false), else text."""
    settings = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set takes KEY=VALUE, got {item!r}")
        try:
            value = loads_json(raw, f"--set {key.strip()}")
        except NotJSONError:
            value = raw
        except InputFileError as exc:  # a number past 64 bits, deep nesting: a typo or an attack
            raise UsageError(str(exc)) from None
        settings[key.strip()] = value
    return settings


class PlainProgress:
    """One line per record on stderr: for logs, CI and pipes."""

    def __init__(self, err):
        self.err = err

    def __call__(self, r: dict) -> None:
        event = r["event"]
        if event == "start":
            world = "1 process" if r["strategy"] == "none" else f"{r['world_size']} processes, {r['strategy']}"
            self.err.print(
                f"training {r['model']} on {r['device']} ({r['precision']}, {world}): "
                f"{r['total_steps']} steps, global batch {r['global_batch']}, "
                f"{r['parameters']:,} parameters" + (f", resumed at step {r['step']}" if r["resumed"] else "")
            )
        elif event == "step":
            extra = f"  scale {r['loss_scale']:g}" if "loss_scale" in r else ""
            extra += f"  |g| {r['grad_norm']:.3f}" if "grad_norm" in r else ""
            self.err.print(
                f"step {r['step']}/{r['total_steps']}  loss {r['loss']:.4f}  lr {r['lr']:.2e}  "
                f"{r['throughput']:,.0f} {r['unit']}/s  eta {_duration(r['eta_s'])}{extra}"
            )
        elif event == "eval":
            metrics = "  ".join(
                f"{k[4:]} {v:.4f}" for k, v in r.items() if k.startswith("val_") and isinstance(v, float)
            )
            mark = "  (best so far)" if r["improved"] else ""
            self.err.print(f"eval at step {r['step']} (epoch {r['epoch']}/{r['epochs']}): {metrics}{mark}")
        elif event == "warning":
            self.err.print(f"warning: {r['message']}")

    def close(self) -> None:
        pass


class RichProgress(PlainProgress):
    """A live progress bar on a terminal; evaluations and warnings print above it."""

    def __init__(self, err):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        super().__init__(err)
        self.bar = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeRemainingColumn(),
            console=err,
            transient=False,
        )
        self.task = None

    def __call__(self, r: dict) -> None:
        event = r["event"]
        if event == "start":
            super().__call__(r)
            self.bar.start()
            self.task = self.bar.add_task("train", total=r["total_steps"], completed=r["step"], stats="")
        elif event == "step" and self.task is not None:
            stats = f"loss {r['loss']:.4f}  {r['throughput']:,.0f} {r['unit']}/s"
            if "loss_scale" in r:
                stats += f"  scale {r['loss_scale']:g}"
            self.bar.update(self.task, completed=r["step"], stats=stats)
        elif event in ("eval", "warning"):
            super().__call__(r)

    def close(self) -> None:
        self.bar.stop()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{seconds // 60}:{seconds % 60:02d}"


@handles_errors
def train_command(
    model: ModelOpt = "digits-cnn",
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run / artifact folder (default: runs/MODEL)."),
    data: Optional[Path] = typer.Option(None, "--data", help="UTF-8 text file for language models (default: the Python docs)."),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Model setting KEY=VALUE, repeatable (e.g. --set attention=local)."),
    tokenizer: str = typer.Option("char", help="Text tokenizer: char or word."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Text sequence length (default: the model's max_len)."),
    epochs: Optional[int] = typer.Option(None, help="Training epochs (default: 20; with --max-steps alone, as many as its steps take)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Optimizer steps to train: alone, the run's length (the data repeats as needed); with --epochs, whichever ends first, said when it is the epochs."),
    batch_size: int = typer.Option(64, "--batch-size", help="Samples per process per micro-step."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-steps per optimizer step (gradient accumulation)."),
    lr: float = typer.Option(3e-3, help="Peak learning rate (linear warm-up, then cosine decay)."),
    min_lr: float = typer.Option(0.0, "--min-lr", help="Learning rate at the end of the cosine decay."),
    weight_decay: float = typer.Option(1e-4, "--weight-decay", help="AdamW weight decay (weights and embeddings; not biases or norms)."),
    warmup_steps: Optional[int] = typer.Option(None, "--warmup-steps", help="Warm-up steps (default: 5% of the steps)."),
    clip_grad_norm: Optional[float] = typer.Option(None, "--clip-grad-norm", help="Clip the gradient norm to this value."),
    seed: SeedOpt = 0,
    device: str = typer.Option("auto", help="auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N, mps."),
    precision: str = typer.Option("auto", help="auto, fp32, bf16 or fp16 (auto: bf16/fp16 on CUDA, fp32 on CPU and for recurrent models)."),
    grad_checkpoint: bool = typer.Option(False, "--grad-checkpoint", help="Recompute transformer blocks in backward to save memory."),
    compile_: bool = typer.Option(False, "--compile", help="torch.compile the model."),
    max_nonfinite: int = typer.Option(5, "--max-nonfinite", help="Stop after this many non-finite losses in a row."),
    save_every: Optional[int] = typer.Option(None, "--save-every", help="Save the resumable state every N steps (default: at each eval)."),
    eval_every: Optional[int] = typer.Option(None, "--eval-every", help="Validate every N steps (default: each epoch)."),
    log_every: int = typer.Option(10, "--log-every", help="Report progress every N steps."),
    resume: bool = typer.Option(False, "--resume", help="Continue from last.pt: an interrupted run (in OUT.partial/, else OUT), or a finished one to train further."),
    profile: bool = typer.Option(False, "--profile", help="Write a torch.profiler trace of steps 3-5 to OUT/profile/."),
    workers: Optional[int] = typer.Option(None, "--workers", help="DataLoader workers (default: 0 on CPU, up to 4 on CUDA)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: measured per model size: 1 for small models, else all cores but one)."),
    strategy: str = typer.Option("auto", help="Under torchrun: auto (DDP), ddp or fsdp (FSDP2 fully_shard)."),
    cpu_offload: bool = typer.Option(False, "--cpu-offload", help="FSDP: keep parameters and optimizer state in host memory."),
    as_json: JsonFlag = False,
) -> None:
    """Train a model on its dataset; keep the best checkpoint by validation metric."""
    from edgekit.train.loop import train

    config = TrainConfig(
        model=model,
        model_config=parse_settings(set_),
        data=str(data) if data is not None else None,
        tokenizer=tokenizer,
        seq_len=seq_len,
        epochs=epochs,
        max_steps=max_steps,
        batch_size=batch_size,
        grad_accum=grad_accum,
        lr=lr,
        min_lr=min_lr,
        weight_decay=weight_decay,
        warmup_steps=warmup_steps,
        clip_grad_norm=clip_grad_norm,
        seed=seed,
        device=device,
        precision=precision,
        grad_checkpoint=grad_checkpoint,
        compile=compile_,
        max_nonfinite=max_nonfinite,
        save_every=save_every,
        eval_every=eval_every,
        log_every=log_every,
        resume=resume,
        profile=profile,
        workers=workers,
        threads=threads,
        strategy=strategy,
        cpu_offload=cpu_offload,
    )
    if out is None:
        out = Path("runs") / model
    main = is_main_process()
    err = console(stderr=True)
    renderer = (RichProgress(err) if progress_enabled() else PlainProgress(err)) if main else None
    try:
        folder, manifest = train(config, out, progress=renderer)
    except KeyboardInterrupt:
        if renderer is not None:
            renderer.close()
            renderer = None
        if main:
            typer.echo(f"Error: {interrupted_hint(model, out)}", err=True)
        raise typer.Exit(130) from None
    finally:
        if renderer is not None:
            renderer.close()
    if not main:
        return
    if as_json:
        from edgekit.cli.describe import manifest_summary

        echo_json(manifest_summary(folder, manifest))
        return
    metric = manifest.task.get("metric", "accuracy")
    m = manifest.metrics
    line = f"Trained {model}: test {metric.replace('_', ' ')} {m[metric]:.4f}"
    if "perplexity" in m:
        line += f", perplexity {m['perplexity']:.2f}"
    console().print(f"{line} (best step {m['best_step']} of {m['steps']}) -> {folder}")


def interrupted_hint(model: str, out: Path) -> str:
    """What an interrupted run left, and the command that continues it."""
    out = Path(out)
    for folder in (partial_dir(out), out):
        if (folder / STATE_FILE).is_file():
            return (f"interrupted; the last saved state is in {folder / STATE_FILE}: continue with the same "
                    f"command plus --resume (edgekit train -m {model} -o {out} ... --resume)")
    return "interrupted before the first saved state; nothing to resume (--save-every N saves more often)"


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
