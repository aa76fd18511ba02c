"""Measure a model's task metric on held-out data, whatever runtime holds it."""

from __future__ import annotations

from typing import Callable

import numpy as np

from edgekit.core.errors import first_line, InputFileError, UsageError
from edgekit import formats
from edgekit.board.errors import BoardError, BoardUsageError
from edgekit.board.runtimes import open_model
from edgekit.data.datasets import load_split

# A batch of inputs (one array, or arrays by input name) -> a batch of outputs (e.g. logits).
Predict = Callable[[np.ndarray | dict[str, np.ndarray]], np.ndarray]


def as_arrays(batch) -> list[np.ndarray]:
    values = batch.values() if isinstance(batch, dict) else [batch]
    return [np.ascontiguousarray(v) for v in values]


def accuracy(predict: Predict, inputs: np.ndarray, labels: np.ndarray, batch_size: int = 128) -> float:
    correct = 0
    for start in range(0, len(labels), batch_size):
        logits = predict(inputs[start : start + batch_size])
        correct += int((np.asarray(logits).argmax(axis=1) == labels[start : start + batch_size]).sum())
    return correct / max(len(labels), 1)


def torch_predictor(module) -> Predict:
    import torch

    def predict(batch: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = module(*(torch.from_numpy(a) for a in as_arrays(batch)))
        return (out[0] if isinstance(out, (tuple, list)) else out).float().numpy()

    return predict


def board_predictor(fmt: str, path, threads: int | None = 1, engine: str | None = None) -> Predict:
    """The model file at ``path`` run by the board's runtime for ``fmt`` (the code a board runs);
    ``threads`` None leaves the runtime's thread settings as this process has them."""
    try:
        runtime = open_model(fmt, path, threads, engine)
    except BoardError as exc:
        raise InputFileError(f"{path} is not a loadable {fmt} model ({first_line(exc)})") from None

    def predict(batch) -> np.ndarray:
        try:
            with runtime.context():
                return runtime.run(as_arrays(batch))[0]
        except BoardUsageError as exc:
            raise UsageError(f"{path}: {first_line(exc)}") from None

    predict.runtime = runtime  # keeps a loaded program alive with its method
    return predict


def onnx_predictor(path, threads: int = 1) -> Predict:
    return board_predictor(formats.by_suffix(".onnx").name, path, threads)


def task_accuracy(task: dict, predict: Predict, split: str = "test") -> float | None:
    """Accuracy on the task's held-out split, or None when the task has no labelled dataset."""
    if task.get("type") != "classification" or not task.get("dataset"):
        return None
    data = load_split(task["dataset"], split)
    return accuracy(predict, data.inputs, data.labels)
