"""Inputs of a transformer exported to ONNX, inferred from its graph: token ids (an input that
indexes a constant embedding table: its range is the table's rows) and masks, so fidelity is
measured on right-padded token rows like a tokenizer's, not on random ids with a random 0/1 mask.
"""

from __future__ import annotations
from edgekit.core.onnx_files import model_inputs


def lookup_sizes(model) -> dict[str, int]:
    """Graph inputs used as indices into a constant table (Gather): input name -> table rows."""
    inputs = {vi.name for vi in model_inputs(model)}  # not the initializers IR 3 also lists as inputs
    tables = {i.name: (i.dims[0] if i.dims else 0) for i in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in inputs and node.input[0] in tables:
            out[node.input[1]] = int(tables[node.input[0]])
    return {k: v for k, v in out.items() if v > 1}


def token_feed(specs, vocab: dict[str, int]):
    """A transformer's inputs (token ids indexing an embedding, int masks, other int ids): right-padded
    rows like a tokenizer's, so fidelity is measured on inputs the model was made for (random ids
    with a random 0/1 mask are not). None for any other kind of model."""
    import numpy as np

    token = [s for s in specs if s.name in vocab]
    if len(token) != 1 or any(np.dtype(s.dtype).kind not in "iu" or len(s.shape) != 2 for s in specs):
        return None
    ids_name, rows = token[0].name, vocab[token[0].name]

    def feed(batch: int) -> dict:
        from edgekit.formats.reference import sequence_length

        rng = np.random.default_rng(4321 + batch)
        batch = token[0].shape[0] or batch  # a fixed batch is what the model takes
        length = token[0].shape[1] or sequence_length(batch)
        lens = rng.integers(max(1, length // 2), length + 1, size=batch)
        lens[0] = length
        mask = (np.arange(length)[None, :] < lens[:, None])
        out = {}
        for spec in specs:
            if spec.name == ids_name:
                value = rng.integers(min(1000, rows - 1), rows, size=(batch, length)) * mask
            elif "mask" in spec.name.lower():
                value = mask
            else:
                value = np.zeros((batch, length))
            out[spec.name] = value.astype(spec.dtype)
        return out

    return feed
