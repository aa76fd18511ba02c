"""Measure a model's task metric on held-out data, whatever runtime holds it."""

from __future__ import annotations

from typing import Callable

import numpy as np

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


def onnx_predictor(path, threads: int = 1) -> Predict:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def predict(batch) -> np.ndarray:
        return session.run(None, dict(zip(names, as_arrays(batch))))[0]

    return predict


def torchscript_predictor(path, engine: str | None = None) -> Predict:
    from edgekit.formats.torchscript_backend import load_torchscript

    return torch_predictor(load_torchscript(path, engine))


def task_accuracy(task: dict, predict: Predict, split: str = "test") -> float | None:
    """Accuracy on the task's held-out split, or None when the task has no labelled dataset."""
    from edgekit.data.datasets import load_split

    if task.get("type") != "classification" or not task.get("dataset"):
        return None
    data = load_split(task["dataset"], split)
    return accuracy(predict, data.inputs, data.labels)
