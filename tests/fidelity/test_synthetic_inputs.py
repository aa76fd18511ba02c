"""Synthetic inputs are shaped like the model's inputs: token ids inside the vocabulary, 8-bit
pixels over their whole range, floats in a normalised range; never what the input cannot hold."""

from __future__ import annotations

import numpy as np

from edgekit.core.input_spec import InputSpec
from edgekit.formats.reference import random_inputs


def test_integers_stay_in_their_range_and_pixels_use_it_all():
    specs = (InputSpec("input_ids", (None, None), "int64", {0: "batch", 1: "sequence"}, (0, 30522)),
             InputSpec("pixels", (None, 32, 32, 3), "uint8", {0: "batch"}),
             InputSpec("image", (None, 3, 32, 32), "float32", {0: "batch"}))
    found = random_inputs(specs, 7, 11)
    ids, pixels, image = found["input_ids"], found["pixels"], found["image"]
    assert ids.shape == (7, 11) and ids.min() >= 0 and ids.max() < 30522 and len(np.unique(ids)) > 50
    assert pixels.dtype == np.uint8 and pixels.min() < 10 and pixels.max() > 245  # not only 0 and 1
    assert image.shape == (7, 3, 32, 32) and abs(float(image.mean())) < 0.1 and 0.9 < float(image.std()) < 1.1
