"""Run the float model and a candidate on the same inputs and compare every output (``metrics``).

Two ways of running them:

* ``compare_batches``: independent batches (images, sentences, rows of an .npz);
* ``compare_streams``: a stateful model (an input fed back from an output, ``sources/state_pairs``)
  runs stream by stream, one call per step, each model feeding its *own* next state back, the way
  a device runs it, so error that accumulates in the state shows; the state outputs are compared
  like every other output.

A runner is ``run(feed) -> list of arrays``: every output, in the model's output order.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from edgekit.formats.metrics import OutputFidelity, output_kind

Run = Callable[[dict], list]


def real_positions(inputs: dict, shape: tuple) -> np.ndarray | None:
    """The (batch, position) cells of a sequence output that hold real tokens, from an integer
    ``*mask*`` input of the same two leading sizes; None when there is no such input. Outputs at
    padded positions are never read (pooling and heads skip them), so fidelity leaves them out."""
    for name, value in inputs.items():
        value = np.asarray(value)
        if ("mask" in name.lower() and value.dtype.kind in "iub" and value.ndim == 2 and len(shape) >= 2
                and value.shape == tuple(shape[:2]) and value.any()):
            return value.astype(bool)
    return None


def _batch_of(feed: Mapping[str, np.ndarray], skip: Sequence[str] = (), axes: Mapping[str, int] | None = None) -> int:
    """Samples in ``feed``, on the sample axis (``axes``, default 0) of its first input not in ``skip``."""
    for name, value in feed.items():
        if name not in skip:
            shape = np.shape(value)
            return int(shape[(axes or {}).get(name, 0)]) if shape else 1
    return 1


class Comparison:
    """The accumulators of every output, made at the first batch (the kind needs the float values)."""

    def __init__(self, names: Sequence[str], kinds: Mapping[str, str] | None = None, labelled: bool = False):
        self.names = list(names)
        self.kinds = dict(kinds or {})
        self.labelled = labelled
        self.outputs: list[OutputFidelity] | None = None
        self.notes: list[str] = []

    def add(self, reference: list, candidate: list, batch: int, feed: Mapping[str, np.ndarray] | None = None) -> None:
        """One batch of every output; ``feed`` (the inputs) lets a feature output leave out the padded
        positions an integer ``*mask*`` input marks (no head reads them)."""
        if len(reference) != len(candidate):
            # a file exported with fewer outputs than the module returns (an auxiliary head left
            # out): the outputs both have are compared, in order, and the difference said
            note = (f"the float model has {len(reference)} outputs, the file {len(candidate)}: the first "
                    f"{min(len(reference), len(candidate))} compared")
            if note not in self.notes:
                self.notes.append(note)
            reference, candidate = reference[:len(candidate)], candidate[:len(reference)]
        if self.outputs is None:
            names = _output_names(self.names, len(reference))
            self.outputs = [OutputFidelity(name, output_kind(name, np.asarray(ref), batch, self.kinds.get(name),
                                                             self.labelled and i == 0))
                            for i, (name, ref) in enumerate(zip(names, reference))]
        for acc, ref, got in zip(self.outputs, reference, candidate):
            ref, got = np.asarray(ref), np.asarray(got)
            keep = _real_positions(feed, ref.shape) if feed is not None and acc.kind == "tensor" else None
            if keep is not None and got.shape == ref.shape:
                ref, got = ref[keep], got[keep]
            acc.add(ref, got, batch)

    def results(self, floors: Mapping[str, Mapping[str, float]] | None = None) -> list[dict]:
        if not self.outputs:
            return []
        return [acc.result((floors or {}).get(acc.kind)) for acc in self.outputs]


def _real_positions(feed: Mapping[str, np.ndarray], shape: tuple):
    return real_positions(dict(feed), shape)


def _output_names(names: Sequence[str], count: int) -> list[str]:
    names = list(names)[:count]
    return names + [f"output_{i}" for i in range(len(names), count)]


def compare_batches(float_run: Run, candidate_run: Run, feeds: Iterable[dict], names: Sequence[str],
                    kinds: Mapping[str, str] | None = None, labelled: bool = False,
                    axes: Mapping[str, int] | None = None) -> Comparison:
    """``axes``: the sample axis of each input (default 0), where a batch's samples are counted."""
    comparison = Comparison(names, kinds, labelled)
    for feed in feeds:
        comparison.add(float_run(feed), candidate_run(feed), _batch_of(feed, (), axes), feed)
    return comparison


def compare_streams(float_run: Run, candidate_run: Run, streams: Iterable[Iterable[dict]], names: Sequence[str],
                    pairs: Sequence, initial: Mapping[str, np.ndarray], kinds: Mapping[str, str] | None = None,
                    labelled: bool = False, axes: Mapping[str, int] | None = None) -> tuple[Comparison, int, int]:
    """Every stream from ``initial`` state (by state input name), each model feeding its own state
    outputs back (``pairs``: ``StatePair``s); -> (comparison, streams, steps)."""
    comparison = Comparison(names, kinds, labelled)
    index = {name: i for i, name in enumerate(_output_names(names, len(names)))}
    streams_run = steps = 0
    for stream in streams:
        float_state = {p.input: np.array(initial[p.input], copy=True) for p in pairs}
        cand_state = {p.input: np.array(initial[p.input], copy=True) for p in pairs}
        for step in stream:
            ref = float_run({**step, **float_state})
            got = candidate_run({**step, **cand_state})
            comparison.add(ref, got, _batch_of(step, [p.input for p in pairs], axes))
            for pair in pairs:
                float_state[pair.input] = np.asarray(ref[index[pair.output]], dtype=initial[pair.input].dtype)
                cand_state[pair.input] = np.asarray(got[index[pair.output]], dtype=initial[pair.input].dtype)
            steps += 1
        streams_run += 1
    return comparison, streams_run, steps
