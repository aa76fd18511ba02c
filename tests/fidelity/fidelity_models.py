"""Small models with the output shapes fidelity must judge, exported to ONNX as a user would, and
damaged twins of each (the same graph, some weights changed) whose damage a cosine cannot see.

* ``vad``: a GRU cell over audio-like frames with its state as an input and an output (``h`` ->
  ``hn``) and one probability per call (``prob``): a recurrent, scalar-output model;
* ``ctc``: per-timestep class log-probabilities (N, T, C), blank 0, dominated by a class prior;
* ``classifier``: (N, C) logits dominated by a class bias;
* ``score``: one sigmoid probability per sample (N, 1), near 0.5.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FRAME, HIDDEN = 8, 16
STEPS, CLASSES, FEATURES = 12, 6, 10


def _export(model, args, path: Path, inputs, outputs, dynamic=None) -> Path:
    import torch

    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, args, str(path), input_names=inputs, output_names=outputs, dynamic_axes=dynamic,
                          opset_version=17, dynamo=False)
    return path


def vad(path: Path, damage: str | None = None, names: tuple[str, ...] = ("x", "h", "prob", "hn")) -> Path:
    """``prob, hn = vad(x (1, FRAME), h (1, 1, HIDDEN))``. ``damage="state"``: the recurrent weights
    scaled by 1.5 (each single call is close, the state drifts over a stream)."""
    import torch

    class Vad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = torch.nn.GRU(FRAME, HIDDEN)
            self.head = torch.nn.Linear(HIDDEN, 1)

        def forward(self, x, h):
            out, hn = self.gru(x.unsqueeze(0), h)
            return torch.sigmoid(self.head(out[0])), hn

    torch.manual_seed(0)
    model = Vad()
    with torch.no_grad():
        model.head.weight.mul_(4.0)
        if damage == "state":
            model.gru.weight_hh_l0.mul_(1.5)
    return _export(model, (torch.zeros(1, FRAME), torch.zeros(1, 1, HIDDEN)), path, list(names[:2]), list(names[2:]))


def ctc(path: Path, damage: bool = False) -> Path:
    """(N, T, FEATURES) -> log-probabilities (N, T, CLASSES), close to uniform (about -log 6 each,
    the features move them a little and decide the arg-max); ``damage``: the feature weights' rows
    rolled, so the arg-max moves while the values, and the cosine, barely do."""
    import torch

    class Ctc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(FEATURES, CLASSES)

        def forward(self, x):
            return torch.log_softmax(self.proj(x), dim=-1)

    torch.manual_seed(1)
    model = Ctc()
    with torch.no_grad():
        model.proj.weight.mul_(0.6)
        model.proj.bias.copy_(torch.tensor([0.1, 0.0, 0.05, -0.05, 0.0, 0.02]))
        if damage:
            model.proj.weight.copy_(torch.roll(model.proj.weight, 1, dims=0))
    return _export(model, (torch.zeros(2, STEPS, FEATURES),), path, ["features"], ["logprobs"],
                   {"features": {0: "batch"}, "logprobs": {0: "batch"}})


def classifier(path: Path, damage: bool = False) -> Path:
    """(N, FEATURES) -> logits (N, CLASSES): a large +-40 bias (classes 0, 2, 4 tie on it, the features
    decide among them); ``damage``: the weights' rows rolled by 2, which the bias hides from a cosine."""
    import torch

    torch.manual_seed(2)
    model = torch.nn.Linear(FEATURES, CLASSES)
    with torch.no_grad():
        model.bias.copy_(torch.tensor([40.0, -40.0, 40.0, -40.0, 40.0, -40.0]))
        model.weight.mul_(3.0)
        if damage:
            model.weight.copy_(torch.roll(model.weight, 2, dims=0))
    wrapped = torch.nn.Sequential(model)
    return _export(wrapped, (torch.zeros(2, FEATURES),), path, ["input"], ["logits"],
                   {"input": {0: "batch"}, "logits": {0: "batch"}})


def score(path: Path, damage: bool = False) -> Path:
    """(N, FEATURES) -> one probability per sample (N, 1) near 0.5; ``damage``: the weights zeroed,
    so every sample gets the same probability (cosine still near 1: all values are about 0.5)."""
    import torch

    torch.manual_seed(3)
    linear = torch.nn.Linear(FEATURES, 1)
    with torch.no_grad():
        linear.weight.mul_(0.5)
        linear.bias.zero_()
        if damage:
            linear.weight.zero_()
    model = torch.nn.Sequential(linear, torch.nn.Sigmoid())
    return _export(model, (torch.zeros(2, FEATURES),), path, ["input"], ["prob"],
                   {"input": {0: "batch"}, "prob": {0: "batch"}})


def ort_runner(path: Path):
    """``run(feed) -> every output`` with a plain ONNX Runtime session (independent of edgekit's runtimes)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda feed: session.run(None, feed)


def frames(streams: int, steps: int, seed: int = 0) -> list[np.ndarray]:
    """Audio-like frame streams: a slowly varying signal plus noise, (steps, FRAME) each."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(streams):
        t = np.arange(steps)[:, None]
        phase = rng.uniform(0, 2 * np.pi, size=(1, FRAME))
        out.append((np.sin(0.3 * t + phase) * rng.uniform(0.5, 2.0) + 0.3 * rng.standard_normal((steps, FRAME)))
                   .astype(np.float32))
    return out


WIDE = 1024  # two layers this wide: an int8 file several times faster than float on any host (--auto keeps no slower one)
WIDE_FEATURES, WIDE_HIDDEN = 64, 16


def _wide_front():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(WIDE_FEATURES, WIDE), torch.nn.ReLU(), torch.nn.Linear(WIDE, WIDE),
                               torch.nn.ReLU())


def wide_vad(path: Path) -> Path:
    """``prob, carry2 = model(x (1, WIDE_FEATURES), carry (1, 1, WIDE_HIDDEN))``: a GRU cell over wide features,
    one probability a call; its state's names do not pair it (h/hn would): it is declared with --state."""
    import torch

    class Vad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.front = torch.nn.Sequential(_wide_front(), torch.nn.Linear(WIDE, WIDE_HIDDEN))
            self.gru = torch.nn.GRU(WIDE_HIDDEN, WIDE_HIDDEN)
            self.head = torch.nn.Linear(WIDE_HIDDEN, 1)

        def forward(self, x, h):
            out, hn = self.gru(self.front(x).unsqueeze(0), h)
            return torch.sigmoid(self.head(out[0])), hn

    torch.manual_seed(0)
    return _export(Vad(), (torch.zeros(1, WIDE_FEATURES), torch.zeros(1, 1, WIDE_HIDDEN)), path, ["x", "carry"],
                   ["prob", "carry2"])


def wide_score(path: Path) -> Path:
    """(N, WIDE_FEATURES) -> one probability per sample over wide features, near 0.5 (small head weights)."""
    import torch

    torch.manual_seed(1)
    head = torch.nn.Linear(WIDE, 1)
    with torch.no_grad():
        head.weight.mul_(0.05)
        head.bias.zero_()
    model = torch.nn.Sequential(_wide_front(), head, torch.nn.Sigmoid())
    return _export(model, (torch.zeros(2, WIDE_FEATURES),), path, ["x"], ["prob"],
                   {"x": {0: "batch"}, "prob": {0: "batch"}})


def wide_stream(steps: int = 120, seed: int = 0) -> np.ndarray:
    """One stream of ``steps`` calls for ``wide_vad``: a slow sine per feature plus noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)[:, None]
    frames = np.sin(0.2 * t + rng.uniform(0, 6, (1, WIDE_FEATURES))) + 0.3 * rng.standard_normal((steps, WIDE_FEATURES))
    return frames.astype(np.float32)


def loud_calibration(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(calib, typical) for ``wide_score``: 50 calibration rows, every tenth 60x louder (the ranges static
    int8 keeps are set by those), and 40 typical rows like the user's real inputs."""
    rng = np.random.default_rng(seed)
    calib = rng.standard_normal((50, WIDE_FEATURES)).astype(np.float32)
    calib[::10] *= 60
    return calib, rng.standard_normal((40, WIDE_FEATURES)).astype(np.float32)
