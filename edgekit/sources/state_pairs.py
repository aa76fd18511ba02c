"""Which inputs of a model carry state between calls, which output feeds each back, and which axis of
every input counts samples.

A recurrent or streaming model (an RNN, a voice-activity detector) takes its state as an input and
returns the next state as an output: evaluating or calibrating it means running a stream of calls
with that output fed back. The pairs are declared (``--state IN=OUT``) or found by name: the two
names agree once the words that mark a direction are dropped (``state``/``stateN``, ``h0``/``hn``,
``past_kv``/``present_kv``, ``state_in``/``state_out``, ``prev_state``/``next_state``), and, where
both shapes are known, their ranks and fixed sizes agree.

The sample axis is axis 0, except where declared (``--sample-axis state=1``) or where another axis
of the input carries the dynamic name the other inputs' axis 0 has (a state of shape
(layers, batch, hidden) whose axis 1 is named ``batch``), or, for a state input whose axis 0 is fixed,
its one free axis.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from edgekit.core.input_spec import InputSpec
from edgekit.core.errors import UsageError
from edgekit.core import onnx_files

Shape = Sequence[int | str | None]

# words that only say which way a tensor goes; what is left names the state
_DIRECTION_WORDS = {"in", "out", "input", "output", "inputs", "outputs", "prev", "previous", "next", "new",
                    "old", "past", "present", "last", "current", "cur", "init", "initial", "updated"}


@dataclass(frozen=True)
class StatePair:
    input: str  # the model input that receives the state
    output: str  # the model output holding the next state

    def to_dict(self) -> dict:
        return {"input": self.input, "output": self.output}


def state_key(name: str) -> str | None:
    """``name`` without its direction words (lower case), or None when nothing is left."""
    words = [w for w in re.split(r"[^0-9a-zA-Z]+|(?<=[a-z])(?=[A-Z])", name) if w]
    if len(words) > 1 and words[-1].lower() in ("0", "n"):  # state_0 / stateN: which end of the stream
        words = words[:-1]
    kept = []
    for word in words:
        lower = word.lower()
        if lower in _DIRECTION_WORDS:
            continue
        match = re.fullmatch(r"(h|c|state|hidden|cell)(0|n)", lower)
        if match:  # h0/hn, c0/cn, state0/stateN: the index only says which end of the stream
            kept.append(match.group(1))
            continue
        kept.append(lower)
    return "_".join(kept) or None


def _shapes_agree(a: Shape | None, b: Shape | None) -> bool:
    if a is None or b is None:
        return True
    if len(a) != len(b):
        return False
    return all(not isinstance(x, int) or not isinstance(y, int) or x == y for x, y in zip(a, b))


def state_pairs(
    inputs: Sequence[InputSpec],
    outputs: Sequence[str],
    output_shapes: Mapping[str, Shape] | None = None,
    declared: Mapping[str, str] | None = None,
) -> list[StatePair]:
    """The (input, output) state pairs of a model, in input order.

    ``declared`` (input name -> output name) wins for the inputs it names and is checked against the
    model's names; the rest are found by name (``state_key``) and shape. A name match is used only
    when it is unambiguous (one output per input and one input per output) and never for an
    input that is also an output name's exact twin with a different meaning (a name equal on both
    sides, e.g. an identity model, is a pair only when declared)."""
    by_name = {spec.name: spec for spec in inputs}
    output_shapes = dict(output_shapes or {})
    pairs: dict[str, str] = {}
    for name, out in (declared or {}).items():
        if name not in by_name:
            raise UsageError(f"state input {name!r} is not an input of the model ({', '.join(by_name) or 'none'})")
        if out not in outputs:
            raise UsageError(f"state output {out!r} is not an output of the model ({', '.join(outputs) or 'none'})")
        pairs[name] = out
    taken = set(pairs.values())
    out_keys: dict[str, list[str]] = {}
    for out in outputs:
        if out not in taken and (key := state_key(out)) is not None:
            out_keys.setdefault(key, []).append(out)
    in_keys = Counter(state_key(spec.name) for spec in inputs if spec.name not in pairs)
    for spec in inputs:
        if spec.name in pairs or np_kind(spec.dtype) not in "f":
            continue
        key = state_key(spec.name)
        if key is None or in_keys[key] != 1 or len(out_keys.get(key, ())) != 1:
            continue
        out = out_keys[key][0]
        if out == spec.name or not _shapes_agree(spec.shape, output_shapes.get(out)):
            continue
        pairs[spec.name] = out
    return [StatePair(spec.name, pairs[spec.name]) for spec in inputs if spec.name in pairs]


def np_kind(dtype: str) -> str:
    return "f" if dtype.startswith(("float", "bfloat")) else "i"


def sample_axes(inputs: Sequence[InputSpec], declared: Mapping[str, int] | None = None) -> dict[str, int]:
    """The axis of each input that counts samples (the batch axis), by input name.

    Declared axes win (checked against the input's rank); else the axis carrying the dynamic name
    most inputs' axis 0 has (``batch``); else 0."""
    by_name = {spec.name: spec for spec in inputs}
    axes = {}
    for name, axis in (declared or {}).items():
        if name not in by_name:
            raise UsageError(f"--sample-axis names {name!r}, which is not an input of the model "
                             f"({', '.join(by_name) or 'none'})")
        rank = len(by_name[name].shape)
        if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
            raise UsageError(f"--sample-axis {name}={axis}: input {name!r} has {rank} axes "
                             f"({-rank}..{rank - 1}; shape {_layout(by_name[name])})")
        axes[name] = axis % rank
    firsts = Counter(spec.dynamic_axes[0] for spec in inputs if 0 in spec.dynamic_axes)
    batch_name = firsts.most_common(1)[0][0] if firsts else None
    for spec in inputs:
        if spec.name in axes:
            continue
        named = [axis for axis, dim in spec.dynamic_axes.items() if batch_name is not None and dim == batch_name]
        axes[spec.name] = min(named) if named else 0
    return axes


def parse_sample_axes(texts: Sequence[str] | None) -> dict[str, int]:
    """``--sample-axis NAME=AXIS`` options -> {name: axis}; AXIS an int, negative counting from the end."""
    out = {}
    for text in texts or ():
        name, sep, axis = str(text).partition("=")
        name, axis = name.strip(), axis.strip()
        if not sep or not name or not re.fullmatch(r"-?[0-9]{1,3}", axis):
            raise UsageError(f"--sample-axis takes INPUT=AXIS, AXIS an integer (e.g. state=1, x=-2), got {text!r}")
        if name in out and out[name] != int(axis):
            raise UsageError(f"--sample-axis names {name!r} twice ({name}={out[name]} and {name}={axis})")
        out[name] = int(axis)
    return out


def _layout(spec: InputSpec) -> str:
    dims = (str(d) if d is not None else spec.dynamic_axes.get(i, "?") for i, d in enumerate(spec.shape))
    return "(" + ", ".join(dims) + ")"


def parse_state_pairs(texts: Sequence[str] | None) -> dict[str, str]:
    """``--state INPUT=OUTPUT`` options -> {input: output}."""
    out = {}
    for text in texts or ():
        name, sep, output = text.partition("=")
        if not sep or not name.strip() or not output.strip():
            raise UsageError(f"--state takes INPUT=OUTPUT (the output fed back into the input), got {text!r}")
        out[name.strip()] = output.strip()
    return out


def output_shapes(onnx_path) -> dict[str, tuple]:
    """Output name -> shape (ints, dim names or None) as an ONNX file declares them."""
    model = onnx_files.load(onnx_path, load_data=False)
    shapes = {}
    for out in model.graph.output:
        tensor = out.type.tensor_type
        if tensor.HasField("shape"):
            shapes[out.name] = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                     for d in tensor.shape.dim)
    return shapes


def stream_layout(source, declared_axes: Mapping[str, int] | None = None,
                  declared_states: Mapping[str, str] | None = None) -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """(sample axis by input name, (state input, output) pairs) of a ``ModelSource``."""
    shapes = output_shapes(source.onnx_path) if getattr(source, "onnx_path", None) is not None else {}
    pairs = state_pairs(source.inputs, source.outputs, shapes, declared_states)
    axes = sample_axes(source.inputs, declared_axes)
    by_name = {spec.name: spec for spec in source.inputs}
    for pair in pairs:
        spec = by_name[pair.input]
        free = [axis for axis, dim in enumerate(spec.shape) if dim is None]
        if pair.input not in (declared_axes or {}) and len(free) == 1 and spec.shape[axes[pair.input]] is not None:
            # a state's one free axis is its batch, its layers and width fixed: silero-vad's (2, N, 128),
            # whose unnamed axes tell nothing (axis 0, the 2 layers, is no sample axis)
            axes[pair.input] = free[0]
    return axes, tuple((p.input, p.output) for p in pairs)
