"""Fitting a core's cost model (``costmodel``) to the published figures of that core (``figures``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from edgekit.estimate.costmodel import CoreModel, fit_cycles, fit_serial_fraction, log_sigma
from edgekit.estimate.figures import Figure

# Instruction classes priced together: the published figures (a handful per core, all CNNs) cannot
# price six classes apart. Vector/FP arithmetic, memory traffic, and the rest.
GROUPS = {"simd_fp": ("simd_fp",), "memory": ("load", "store"), "scalar": ("integer", "branch", "other")}
RIDGE = 0.05  # how hard the prior pulls: a little, against groups the figures cannot tell apart
# Instructions of each group a core can start per cycle at best (Arm's Software Optimization Guides:
# A53 dual-issues in order with one 128-bit NEON op and one load/store a cycle; A72 has two
# FP/ASIMD pipes, one load and one store pipe, two simple ALUs; A76 two ASIMD pipes, two load/store
# pipes, three ALUs). 1 / width is each group's price before any figure is seen (the prior); it is
# not a floor: the model adds the groups' prices, and a wide out-of-order core runs them side by
# side, so a group's fitted price may fall below it.
ISSUE_WIDTH = {
    "cortex-a53": {"simd_fp": 1, "memory": 1, "scalar": 2},
    "cortex-a72": {"simd_fp": 2, "memory": 2, "scalar": 2},
    "cortex-a76": {"simd_fp": 2, "memory": 2, "scalar": 3},
}
DEFAULT_WIDTH = {"simd_fp": 1, "memory": 1, "scalar": 2}


@dataclass(frozen=True)
class Prediction:
    figure: Figure
    ms: float

    @property
    def error(self) -> float:
        """Relative error of the prediction against the published figure (+0.10: 10 % too slow)."""
        return self.ms / self.figure.ms - 1.0


def fit_core(core: str, figures: Sequence[Figure], counts: Mapping[str, Mapping[str, float]],
             groups=GROUPS, prior: Mapping[str, float] | None = None, ridge: float = RIDGE) -> CoreModel:
    """The cost model of ``core`` fitted to its ``role == "fit"`` figures; ``counts`` maps a model
    name to its per-inference instruction classes counted on ``core`` (one thread)."""
    mine = [f for f in figures if f.core == core and f.role == "fit" and f.model in counts]
    single = [f for f in mine if f.threads == 1]
    if not single:
        raise ValueError(f"no one-thread figure to fit {core} to")
    prior = prior or {g: 1.0 / width for g, width in ISSUE_WIDTH.get(core, DEFAULT_WIDTH).items()}
    cycles = fit_cycles([(counts[f.model], f.mhz, f.ms) for f in single], groups, prior, ridge)
    by_key = {(f.source.name, f.board, f.model): f for f in single}
    pairs = [(by_key[key].ms, f.ms, f.threads) for f in mine if f.threads > 1
             and (key := (f.source.name, f.board, f.model)) in by_key]
    serial = fit_serial_fraction(pairs) if pairs else 1.0  # no pair: threads are not assumed to help
    model = CoreModel(core, dict(groups), cycles, serial, 0.0)
    sigma = log_sigma([(p.ms, p.figure.ms) for p in predict(model, mine, counts)])
    return CoreModel(core, dict(groups), cycles, serial, sigma)


def predict(model: CoreModel, figures: Sequence[Figure], counts: Mapping[str, Mapping[str, float]]) -> list[Prediction]:
    """The model's latency for each figure of its core that has counts, at the figure's clock and threads."""
    return [Prediction(f, model.estimate(counts[f.model], f.mhz, f.threads).ms)
            for f in figures if f.core == model.core and f.model in counts]
