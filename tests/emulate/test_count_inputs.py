"""Every runtime of one model is counted on the same inputs: its artifact's batch-1 reference inputs
(edgekit.emulate.count_inputs), and a count says which inputs it ran on (no QEMU here)."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.core.errors import InputFileError
from edgekit.emulate.count_inputs import RANDOM, REFERENCE, reference_inputs, write_inputs
from edgekit.records.instructions import differences, read_section, section


def _reference(path, **batches):
    arrays = {}
    for batch, inputs in batches.items():
        for name, value in inputs.items():
            arrays[f"{batch}/input/{name}"] = value
        arrays[f"{batch}/output"] = np.zeros((len(next(iter(inputs.values()))), 2), np.float32)
    np.savez(path, **arrays)
    return path


def test_the_batch_one_case_of_the_reference_is_what_is_counted(tmp_path):
    rng = np.random.default_rng(5)
    one = {"input_ids": rng.integers(0, 30522, (1, 128)), "attention_mask": np.ones((1, 128), np.int64)}
    seven = {"input_ids": rng.integers(0, 30522, (7, 128)), "attention_mask": np.zeros((7, 128), np.int64)}
    found = reference_inputs(_reference(tmp_path / "reference.npz", b1=one, b7=seven))
    assert sorted(found) == ["attention_mask", "input_ids"]
    for name in one:
        np.testing.assert_array_equal(found[name], one[name])
    written = write_inputs(found, tmp_path / "inputs.npz")
    with np.load(written, allow_pickle=False) as data:  # what edgekit-run's and runner.py's --input read
        assert sorted(data.files) == ["attention_mask", "input_ids"]
        np.testing.assert_array_equal(data["input_ids"], one["input_ids"])


def test_no_reference_or_no_batch_one_keeps_the_runners_random_inputs(tmp_path):
    assert reference_inputs(None) is None
    assert reference_inputs(tmp_path / "absent.npz") is None
    only_seven = _reference(tmp_path / "r7.npz", b7={"x": np.ones((7, 4), np.float32)})
    assert reference_inputs(only_seven) is None
    (tmp_path / "link.npz").symlink_to(only_seven)
    assert reference_inputs(tmp_path / "link.npz") is None


def test_a_damaged_reference_is_one_line(tmp_path):
    bad = tmp_path / "reference.npz"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(InputFileError) as caught:
        reference_inputs(bad)
    assert "\n" not in str(caught.value)


def _counts(inputs=None):
    classes = {"simd_fp": 60, "integer": 10, "load": 10, "store": 10, "branch": 5, "other": 5}
    counts = {"cpu": "cortex-a76", "per_run": 100, "startup": 1000, "classes": classes, "runs": 5, "threads": 1,
              "qemu": "7.2.22", "plugin": "qemu-plugin-0123", "libc": "/usr/aarch64-linux-gnu", "runner": "edgekit-run"}
    return {**counts, **({"inputs": inputs} if inputs else {})}


def test_the_inputs_travel_with_the_count_and_different_inputs_do_not_compare():
    on_reference = read_section(section(_counts(REFERENCE)))
    assert on_reference["inputs"] == REFERENCE
    on_random = read_section(section(_counts(RANDOM)))
    assert differences(on_reference, on_random) == [f"inputs {REFERENCE!r} vs {RANDOM!r}"]
    older = read_section(section(_counts()))  # results written before counts said their inputs
    assert "inputs" not in older and differences(on_reference, older) == []
    with pytest.raises(ValueError, match="emulated.inputs"):
        read_section({**section(_counts()), "inputs": "x\n" * 3})
