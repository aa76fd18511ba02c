"""``edgekit train``: train a zoo model and write a checkpoint artifact."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekit.cli.common import console, handles_errors


@handles_errors
def train_command(
    model: str = typer.Option("digits-cnn", "--model", "-m", help="Zoo model name (see `edgekit models`)."),
    out: Path = typer.Option(Path("runs/digits"), "--out", "-o", help="Output artifact folder."),
    epochs: int = typer.Option(20, help="Training epochs."),
    batch_size: int = typer.Option(64, "--batch-size", help="Samples per step."),
    lr: float = typer.Option(3e-3, help="Peak learning rate (one-cycle schedule)."),
    weight_decay: float = typer.Option(1e-4, "--weight-decay", help="AdamW weight decay."),
    seed: int = typer.Option(0, help="Random seed (runs are reproducible)."),
    device: str = typer.Option("auto", help="auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N, mps."),
) -> None:
    """Train a model on its dataset; keep the best checkpoint by validation accuracy."""
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    config = TrainConfig(
        model=model, epochs=epochs, batch_size=batch_size, lr=lr, weight_decay=weight_decay, seed=seed, device=device
    )
    err = console(stderr=True)

    def progress(record: dict) -> None:
        err.print(
            f"epoch {record['epoch']}/{record['epochs']}  loss {record['train_loss']:.4f}  "
            f"val acc {record['val_accuracy']:.4f}  ({record['elapsed_s']:.1f}s)"
        )

    folder, manifest = train(config, out, progress=progress)
    console().print(
        f"Trained {model}: test accuracy {manifest.metrics['accuracy']:.4f} "
        f"(best epoch {manifest.metrics['best_epoch']}) -> {folder}"
    )


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
