"""A plain training loop you can read top to bottom: train, validate, keep the best weights."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Callable

from edgekit.artifacts import Manifest, describe_file, finalize
from edgekit.errors import UsageError
from edgekit.fileio import atomic_dir
from edgekit.train.checkpoint import CHECKPOINT_FILE, save_checkpoint
from edgekit.train.config import TrainConfig

Progress = Callable[[dict], None]


def select_device(requested: str = "auto"):
    import torch

    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"device {requested!r} requested but CUDA is not available")
    if requested == "mps" and not torch.backends.mps.is_available():
        raise UsageError("device 'mps' requested but Apple MPS is not available")
    return torch.device(requested)


def _evaluate(model, inputs, labels, device, batch_size: int = 256) -> tuple[float, float]:
    import torch
    import torch.nn.functional as F

    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(labels), batch_size):
            x = inputs[start : start + batch_size].to(device)
            y = labels[start : start + batch_size].to(device)
            logits = model(x)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
    return loss_sum / len(labels), correct / len(labels)


def train(config: TrainConfig, out: str | Path, progress: Progress | None = None) -> tuple[Path, Manifest]:
    """Train ``config.model`` on its dataset and write a checkpoint artifact to ``out``."""
    import torch
    import torch.nn.functional as F

    from edgekit.data.datasets import load_split
    from edgekit.models import build_model, get_spec

    spec = get_spec(config.model)
    model_config = spec.config(config.model_config)
    device = select_device(config.device)
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)

    dataset = spec.task["dataset"]
    splits = {name: load_split(dataset, name) for name in ("train", "val", "test")}
    tensors = {
        name: (torch.from_numpy(s.inputs), torch.from_numpy(s.labels)) for name, s in splits.items()
    }
    x_train, y_train = tensors["train"]

    model = build_model(config.model, model_config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    steps_per_epoch = -(-len(y_train) // config.batch_size)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.lr, total_steps=config.epochs * steps_per_epoch, pct_start=0.15
    )

    best = {"val_accuracy": -1.0}
    best_state = None
    history = []
    started = time.perf_counter()
    for epoch in range(1, config.epochs + 1):
        model.train()
        order = torch.randperm(len(y_train), generator=generator)
        train_loss = 0.0
        for start in range(0, len(order), config.batch_size):
            idx = order[start : start + config.batch_size]
            x, y = x_train[idx].to(device), y_train[idx].to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            train_loss += loss.item() * len(idx)
        val_loss, val_acc = _evaluate(model, *tensors["val"], device)
        record = {
            "epoch": epoch,
            "train_loss": train_loss / len(order),
            "val_loss": val_loss,
            "val_accuracy": val_acc,
            "elapsed_s": round(time.perf_counter() - started, 3),
        }
        history.append(record)
        if val_acc > best["val_accuracy"]:
            best = {"epoch": epoch, "val_accuracy": val_acc}
            best_state = copy.deepcopy(model.state_dict())
        if progress:
            progress({**record, "epochs": config.epochs, "best_val_accuracy": best["val_accuracy"]})

    model.load_state_dict(best_state)
    _, test_acc = _evaluate(model, *tensors["test"], device)
    meta = {"model": config.model, "model_config": model_config, "train_config": config.to_dict()}
    with atomic_dir(out) as tmp:
        save_checkpoint(tmp / CHECKPOINT_FILE, model.state_dict(), meta)
        (tmp / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
        manifest = Manifest(
            kind="checkpoint",
            model={"name": config.model, "config": model_config},
            inputs=spec.input_spec(model_config),
            outputs=spec.outputs,
            files=(describe_file(tmp, CHECKPOINT_FILE, "checkpoint", metrics={"accuracy": test_acc}),),
            task=dict(spec.task),
            metrics={
                "accuracy": test_acc,
                "best_epoch": best["epoch"],
                "val_accuracy": best["val_accuracy"],
                "train_seconds": round(time.perf_counter() - started, 3),
            },
            quantization=None,
            parent=None,
        )
        manifest = finalize(manifest, tmp)
        _ = manifest.to_dict()  # fail before the swap if anything is not serialisable
    return Path(out), manifest
