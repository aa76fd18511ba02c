"""Train the same tiny model eagerly and with TorchInductor, in a fresh interpreter (as a user's
``edgekit train --compile`` runs): earlier tests in one pytest process can leave distutils or
setuptools half-imported, which Inductor's C++ build then trips over. Prints one JSON line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

from edgekit.core.input_spec import InputSpec
from edgekit.models.registry import ModelSpec, register_model
from edgekit.train.checkpoint import load_train_state
from edgekit.train.config import TrainConfig
from edgekit.train.loop import train


class _Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(x.flatten(1))


def main(out: Path) -> None:
    register_model(ModelSpec(
        name="test-linear", factory=_Linear, default_config={},
        input_spec=lambda cfg: (InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"}),),
        outputs=("logits",), task={"type": "classification", "dataset": "digits", "metric": "accuracy"},
    ))
    losses, steps, weights = {}, {}, {}
    for name, compile_ in (("eager", False), ("inductor", True)):
        records: list[dict] = []
        config = TrainConfig(model="test-linear", batch_size=32, max_steps=3, compile=compile_, device="cpu",
                             log_every=1, seed=0)
        _, manifest = train(config, out / name, records.append)
        steps[name] = manifest.metrics["steps"]
        losses[name] = [r["loss"] for r in records if r["event"] == "step"]
        weights[name] = load_train_state(out / name / "last.pt")["model"]
    diffs = {key: float((weights["inductor"][key] - weights["eager"][key]).abs().max()) for key in weights["eager"]}
    print(json.dumps({"steps": steps, "losses": losses, "keys": sorted(weights["inductor"]), "max_diff": diffs,
                      "scale": {k: float(v.abs().max()) for k, v in weights["eager"].items()},
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
