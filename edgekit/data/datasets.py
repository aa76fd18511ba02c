"""Datasets by name, so a manifest's ``task.dataset`` leads back to its held-out split."""

from __future__ import annotations

from typing import Callable

from edgekit.core.errors import unknown_name


def _digits(split: str):
    from edgekit.data import digits

    return digits.load_split(split)


def _digits32(split: str):
    from edgekit.data import digits

    return digits.load_split_large(split)


def _pydoc_topics(split: str):
    from edgekit.data import text

    return text.topic_split(split)


def _pydoc_text(split: str):
    from edgekit.data import text

    return text.lm_windows(split)


_LOADERS: dict[str, Callable] = {
    "digits": _digits,
    "digits32": _digits32,  # the same digits upscaled to 32x32 (bilinear)
    "pydoc-topics": _pydoc_topics,  # classification: inputs (N, 64) token ids, labels (N,)
    "pydoc-text": _pydoc_text,  # language modelling: inputs (N, 128) token ids, labels = next tokens
}


def load_split(dataset: str, split: str):
    """An ``ArraySplit`` (inputs, labels) of a named dataset."""
    if dataset not in _LOADERS:
        raise unknown_name("dataset", dataset, _LOADERS)
    return _LOADERS[dataset](split)
