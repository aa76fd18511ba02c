"""What the loop needs to know about a task: its data, its loss, its metrics, its unit of work.

One handler per ``ModelSpec.task["type"]``, chosen by a registry. Datasets are indexed by a
*list* of sample ids and return a whole batch (a dict of tensors), so the DataLoader does no
per-sample collation: ``inputs`` and ``targets`` go to the device, anything else (``lengths``)
stays on the CPU.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any

from edgekit.core.errors import UsageError, unknown_name
from edgekit.data.datasets import load_split


@dataclass
class TaskData:
    train: Any
    val: Any
    test: Any
    model_config: dict[str, Any] = field(default_factory=dict)  # values the data decides (vocab size...)
    meta: dict[str, Any] = field(default_factory=dict)  # stored in the checkpoint (tokenizer...)
    task: dict[str, Any] = field(default_factory=dict)  # updates to the manifest's task entry


class IndexedTensors:
    """``inputs``/``targets`` tensors indexed a batch at a time."""

    def __init__(self, inputs, targets):
        self.inputs, self.targets = inputs, targets

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, ids) -> dict:
        import torch

        idx = torch.as_tensor(ids, dtype=torch.long)
        return {"inputs": self.inputs[idx], "targets": self.targets[idx]}


def to_device(batch: dict, device, non_blocking: bool = False) -> dict:
    return {
        key: value.to(device, non_blocking=non_blocking) if key in ("inputs", "targets") else value
        for key, value in batch.items()
    }


def _topics_extras() -> tuple[dict, dict]:
    from edgekit.data.text import TOPICS, topic_tokenizer

    tokenizer = topic_tokenizer()
    return {"vocab_size": len(tokenizer), "num_classes": len(TOPICS)}, {"tokenizer": tokenizer.to_dict()}


# Datasets whose model settings follow from the data.
_DATASET_EXTRAS = {"pydoc-topics": _topics_extras}


class ClassificationTask:
    type = "classification"
    unit = "samples"
    metric = "accuracy"

    def __init__(self, spec):
        self.spec = spec
        self.dataset = spec.task["dataset"]

    def prepare(self, config, model_config: dict) -> TaskData:
        import torch


        if config.data is not None:
            raise UsageError(
                f"--data takes a text file for language models; {self.spec.name} trains on the "
                f"{self.dataset!r} dataset"
            )
        sets = {}
        for name in ("train", "val", "test"):
            split = load_split(self.dataset, name)
            sets[name] = IndexedTensors(torch.from_numpy(split.inputs), torch.from_numpy(split.labels))
        width = sets["train"].inputs.shape[-1]
        if sets["train"].inputs.dim() == 2 and model_config.get("max_len", width) < width:
            raise UsageError(
                f"the {self.dataset!r} samples are {width} tokens long but max_len is {model_config['max_len']}; "
                f"pass --set max_len={width} or more"
            )
        overrides, meta = _DATASET_EXTRAS[self.dataset]() if self.dataset in _DATASET_EXTRAS else ({}, {})
        return TaskData(sets["train"], sets["val"], sets["test"], overrides, meta)

    def bind(self, model) -> None:
        pass

    def units(self, batch: dict) -> int:
        return int(batch["targets"].shape[0])

    def loss(self, model, batch: dict):
        import torch.nn.functional as F

        return F.cross_entropy(model(batch["inputs"]), batch["targets"])

    def evaluate(self, model, batches, device) -> dict[str, float]:
        import torch
        import torch.nn.functional as F

        loss_sum = torch.zeros((), device=device, dtype=torch.float64)
        correct = torch.zeros((), device=device, dtype=torch.int64)
        count = 0
        for batch in batches:
            batch = to_device(batch, device)
            logits = model(batch["inputs"])
            loss_sum += F.cross_entropy(logits.float(), batch["targets"], reduction="sum")
            correct += (logits.argmax(1) == batch["targets"]).sum()
            count += len(batch["targets"])
        count = max(count, 1)
        return {"loss": loss_sum.item() / count, "accuracy": correct.item() / count}


class LanguageModelingTask:
    type = "language-modeling"
    unit = "tokens"
    metric = "next_token_accuracy"

    def __init__(self, spec):
        self.spec = spec
        self.pass_lengths = False

    def prepare(self, config, model_config: dict) -> TaskData:
        from edgekit.data.text import DEFAULT_CORPUS, LanguageModelingDataset, load_text_corpus
        from edgekit.data.tokenizer import TokenizerSettings

        max_len = int(model_config.get("max_len", 0)) or None
        seq_len = config.seq_len or max_len
        if seq_len is None:
            raise UsageError(f"model {self.spec.name!r} has no max_len; pass --seq-len")
        if max_len is not None and seq_len > max_len:
            raise UsageError(
                f"--seq-len {seq_len} exceeds the model's max_len {max_len}; pass --set max_len={seq_len} "
                "or a shorter --seq-len"
            )
        corpus = load_text_corpus(config.data, TokenizerSettings(config.tokenizer))
        sets = [LanguageModelingDataset(corpus.splits[name], seq_len) for name in ("train", "val", "test")]
        for name, data in zip(("train", "val", "test"), sets):
            if len(data) == 0:
                raise UsageError(f"the {name} split of {corpus.source} holds no text to train on")
        is_default = config.data is None and config.tokenizer == "char"
        task = {
            "dataset": DEFAULT_CORPUS if is_default else None,
            "data": corpus.source,
            "data_sha256": corpus.sha256,
            "tokenizer": config.tokenizer,
            "seq_len": seq_len,
        }
        meta = {"tokenizer": corpus.tokenizer.to_dict(), "seq_len": seq_len}
        return TaskData(*sets, {"vocab_size": len(corpus.tokenizer)}, meta, task)

    def bind(self, model) -> None:
        """Pass real lengths to models that take them (packed sequences in the LSTM)."""
        self.pass_lengths = "lengths" in inspect.signature(model.forward).parameters

    def units(self, batch: dict) -> int:
        return int(batch["lengths"].sum())

    def _logits(self, model, batch: dict):
        if self.pass_lengths:
            return model(batch["inputs"], lengths=batch["lengths"])
        return model(batch["inputs"])

    def loss(self, model, batch: dict):
        import torch.nn.functional as F

        from edgekit.data.text import IGNORE_INDEX

        logits = self._logits(model, batch)
        return F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=IGNORE_INDEX)

    def evaluate(self, model, batches, device) -> dict[str, float]:
        import torch
        import torch.nn.functional as F

        from edgekit.data.text import IGNORE_INDEX

        loss_sum = torch.zeros((), device=device, dtype=torch.float64)
        correct = torch.zeros((), device=device, dtype=torch.int64)
        count = 0
        for batch in batches:
            count += self.units(batch)
            batch = to_device(batch, device)
            logits = self._logits(model, batch).flatten(0, 1).float()
            targets = batch["targets"].flatten()
            loss_sum += F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
            correct += ((logits.argmax(-1) == targets) & (targets != IGNORE_INDEX)).sum()
        count = max(count, 1)
        loss = loss_sum.item() / count
        return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "next_token_accuracy": correct.item() / count}


def evaluate(task, model, batches, device, autocast) -> dict:
    """``task.evaluate`` in eval mode, without gradients, under ``autocast``; restores the mode."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), autocast:
            return task.evaluate(model, batches, device)
    finally:
        model.train(was_training)


_TASKS = {ClassificationTask.type: ClassificationTask, LanguageModelingTask.type: LanguageModelingTask}


def task_for(spec):
    kind = spec.task.get("type", "classification")
    if kind not in _TASKS:
        raise unknown_name("task type", kind, _TASKS)
    return _TASKS[kind](spec)
