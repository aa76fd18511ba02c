from pathlib import Path

import numpy as np
import pytest

from edgekit.core.input_spec import InputSpec
from edgekit.data import digits
from edgekit.core.errors import InputFileError
from edgekit.userdata.sets import open_calibration

SPEC = InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"})


def test_shipped_calibration_set_is_train_data_never_test(request):
    from conftest import CALIB_DIGITS

    calib = np.load(CALIB_DIGITS / "digits_calib.npy")
    assert calib.shape == (256, 1, 8, 8) and calib.dtype == np.float32
    np.testing.assert_array_equal(calib, digits.calibration_inputs())
    idx = digits.split_indices()
    assert not set(idx["train"]) & set(idx["test"]) and not set(idx["train"]) & set(idx["val"])
    # every calibration sample is one of the train split's first rows (by position), none from test
    np.testing.assert_array_equal(calib, digits.load_split("train").inputs[:256])


def test_batches_stream_everything_once(tmp_path):
    data = np.random.default_rng(0).random((70, 1, 8, 8), dtype=np.float32)
    np.save(tmp_path / "a.npy", data[:50])
    np.savez(tmp_path / "b.npz", x=data[50:])
    calib = open_calibration(tmp_path, SPEC, batch_size=16)
    batches = list(calib.batches())
    assert [len(b) for b in batches] == [16, 16, 16, 2, 16, 4]
    np.testing.assert_array_equal(np.concatenate(batches), data)
    assert calib.count() == 70
    limited = open_calibration(tmp_path, SPEC, batch_size=16, max_samples=20)
    assert sum(len(b) for b in limited.batches()) == 20


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros((4, 3, 8, 8), np.float32), "axis 1 differs"),
        (np.zeros((4, 8, 8), np.float32), "expects (N, 1, 8, 8)"),
        (np.zeros((0, 1, 8, 8), np.float32), "zero samples"),
        (np.full((4, 1, 8, 8), np.nan, np.float32), "NaN or Inf"),
        (np.array([["a"] * 8] * 8)[None, None].repeat(2, 0), "expected numbers"),
    ],
)
def test_bad_calibration_data(tmp_path, array, message):
    np.save(tmp_path / "c.npy", array)
    with pytest.raises(InputFileError) as info:
        calib = open_calibration(tmp_path, SPEC)
        list(calib.batches())
    assert message in str(info.value)


def test_missing_empty_and_corrupt(tmp_path):
    with pytest.raises(InputFileError, match="not found"):
        open_calibration(tmp_path / "nope", SPEC)
    with pytest.raises(InputFileError, match="no .npy or .npz"):
        open_calibration(tmp_path, SPEC)
    (tmp_path / "c.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(InputFileError, match="cannot read"):
        open_calibration(tmp_path, SPEC)


def test_pickled_object_arrays_are_refused(tmp_path):
    np.save(tmp_path / "c.npy", np.array([object(), 1], dtype=object), allow_pickle=True)
    with pytest.raises(InputFileError, match="cannot read"):
        open_calibration(tmp_path, SPEC)


def test_static_config_default_calibration_is_packaged_not_checkout_relative(tmp_path, monkeypatch):
    import edgekit
    from edgekit.quantize.methods import StaticConfig

    monkeypatch.chdir(tmp_path)  # any folder: a non-editable install run from elsewhere
    calib = StaticConfig().calib
    assert calib.is_absolute() and calib.is_dir() and any(calib.iterdir())
    assert calib.resolve().is_relative_to(Path(edgekit.__file__).resolve().parent)
