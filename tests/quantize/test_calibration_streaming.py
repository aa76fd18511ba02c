"""Streaming calibrators, the calibration pass over a real ONNX model, and the range cache."""

import json

import numpy as np
import pytest

from edgekit.core.input_spec import InputSpec
from edgekit.core.errors import InputFileError, UsageError
from edgekit.quantize.calibration.calibrators import make_calibration, make_calibrator
from edgekit.quantize.calibration.histogram import StreamingHistogram


def test_histogram_rebins_exactly_and_keeps_every_count():
    rng = np.random.default_rng(0)
    hist = StreamingHistogram(256)
    chunks = [rng.standard_normal(1000) * scale for scale in (0.1, 1.0, 10.0, 100.0)]
    for chunk in chunks:
        hist.add(chunk)
    data = np.concatenate(chunks)
    assert hist.counts.sum() == hist.total == data.size
    assert hist.counts.nbytes == 256 * 8  # fixed, however many values went in
    counts, edges = hist.occupied()
    assert edges[0] <= data.min() and edges[-1] >= data.max()
    # every bin holds exactly the values between its edges (re-binning merged whole bins)
    expected, _ = np.histogram(data, bins=hist.edges())
    np.testing.assert_array_equal(hist.counts, expected)


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy", "mse"])
def test_calibrators_stream_any_batch_shape(method):
    rng = np.random.default_rng(1)
    cal = make_calibrator(method)
    cal.prepare(["x", "relu", "mask"])
    seen = []
    for batch, length in [(1, 5), (8, 17), (3, 128), (16, 2)]:  # batches > 1, variable lengths
        x = rng.standard_normal((batch, length, 4)).astype(np.float32)
        seen.append(x)
        mask = np.where(rng.random((batch, 1, length)) < 0.3, np.finfo(np.float32).min, 0.0).astype(np.float32)
        cal.collect({"x": x, "relu": np.maximum(x, 0), "mask": mask, "ignored": x})
    ranges = cal.compute()
    assert set(ranges) == {"x", "relu", "mask"}
    everything = np.concatenate([s.reshape(-1) for s in seen])
    assert ranges["mask"].mask_like and not ranges["x"].mask_like
    low, high = ranges["x"].low, ranges["x"].high
    assert everything.min() <= low < 0 < high <= everything.max()
    assert ranges["relu"].low == 0.0
    if method == "minmax":
        assert (low, high) == (float(everything.min()), float(everything.max()))


def test_percentile_clips_outliers_that_minmax_keeps():
    x = np.random.default_rng(2).standard_normal(100_000).astype(np.float32)
    x[:5] = 1000.0
    ranges = {}
    for method in ("minmax", "percentile", "mse", "entropy"):
        cal = make_calibrator(method)
        cal.prepare(["x"])
        for chunk in np.array_split(x, 7):
            cal.collect({"x": chunk})
        ranges[method] = cal.compute()["x"]
    assert ranges["minmax"].high == 1000.0
    assert ranges["percentile"].high < 10 and ranges["entropy"].high < 50  # entropy: at the grown bin width
    # MSE weighs each clipped outlier by its squared error: five values at 1000 are worth keeping,
    # but the sparse negative tail is clipped
    assert ranges["mse"].high <= 1000.0 and ranges["mse"].low > ranges["minmax"].low


def test_calibration_settings_are_validated():
    assert make_calibration("percentile", percentile=99.9).percentile == 99.9
    with pytest.raises(UsageError, match="percentile must be between 90 and 100"):
        make_calibration("percentile", percentile=50)
    with pytest.raises(UsageError, match="does not take: percentile"):
        make_calibration("minmax", percentile=99.9)
    with pytest.raises(UsageError, match="unknown calibration method 'kl'; choose one of: entropy, minmax, mse, percentile"):
        make_calibration("kl")
    with pytest.raises(UsageError, match="bins must be an integer"):
        make_calibration("entropy", bins=3)


@pytest.fixture(scope="module")
def seq_model(tmp_path_factory):
    """A tiny ONNX model over (N, T, 4) float sequences with a dynamic T, exported from torch."""
    import torch

    from edgekit.formats.onnx_export import export_onnx

    class Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.proj = torch.nn.Linear(4, 8)
            self.out = torch.nn.Linear(8, 3)

        def forward(self, x):
            return self.out(torch.relu(self.proj(x)))

    spec = InputSpec("x", (None, None, 4), "float32", {0: "batch", 1: "sequence"})
    path = tmp_path_factory.mktemp("seq") / "seq.onnx"
    export_onnx(Seq().eval(), (torch.zeros(2, 5, 4),), (spec,), ("y",), path, 17)
    return path, spec


def _write_variable_length_set(folder, lengths, rng):
    folder.mkdir(exist_ok=True)
    for i, length in enumerate(lengths):
        np.save(folder / f"block{i:03d}.npy", rng.standard_normal((4, length, 4)).astype(np.float32))


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_calibration_pass_over_variable_length_samples(seq_model, tmp_path, method):
    """ORT's own histogram calibrators fail on variable-length samples; the streaming ones do not."""
    from edgekit.userdata.sets import open_calibration
    from edgekit.quantize.calibration.onnx_ranges import collect_ranges

    path, spec = seq_model
    _write_variable_length_set(tmp_path / "calib", [3, 9, 17, 64], np.random.default_rng(3))
    calib = open_calibration(tmp_path / "calib", spec, batch_size=3)
    seen = []
    ranges, samples = collect_ranges(path, calib.feeds(), make_calibrator(method), calib.count(), seen.append)
    assert samples == 16 and calib.count() == 16
    assert [p.samples for p in seen] == [3, 4, 7, 8, 11, 12, 15, 16]
    assert seen[-1].total == 16 and seen[-1].eta_s == 0.0 and seen[0].eta_s is not None
    assert "x" in ranges and any(name != "x" for name in ranges)
    for r in ranges.values():
        assert np.isfinite(r.low) and np.isfinite(r.high) and r.low <= r.high


def test_multi_input_calibration_files(tmp_path):
    from edgekit.userdata.sets import open_calibration

    ids = InputSpec("input_ids", (None, None), "int64", {0: "batch", 1: "sequence"}, (0.0, 100.0))
    mask = InputSpec("attention_mask", (None, None), "int64", {0: "batch", 1: "sequence"}, (0.0, 2.0))
    rng = np.random.default_rng(4)
    for i, length in enumerate((8, 32)):
        np.savez(tmp_path / f"b{i}.npz", input_ids=rng.integers(0, 100, (5, length)),
                 attention_mask=np.ones((5, length), np.int64))
    calib = open_calibration(tmp_path, (ids, mask), batch_size=4)
    feeds = list(calib.feeds())
    assert [f["input_ids"].shape for f in feeds] == [(4, 8), (1, 8), (4, 32), (1, 32)]
    assert all(set(f) == {"input_ids", "attention_mask"} for f in feeds)
    np.savez(tmp_path / "b2.npz", input_ids=np.full((2, 8), 500), attention_mask=np.ones((2, 8), np.int64))
    with pytest.raises(InputFileError, match=r"outside \[0, 100\)"):
        list(open_calibration(tmp_path, (ids, mask)).feeds())
    (tmp_path / "b2.npz").unlink()
    np.savez(tmp_path / "b3.npz", input_ids=np.zeros((2, 8), np.int64))
    with pytest.raises(InputFileError, match="lacks array\\(s\\) for input\\(s\\): attention_mask"):
        list(open_calibration(tmp_path, (ids, mask)).feeds())


def test_npy_files_are_read_batch_by_batch(tmp_path):
    """Not memory-mapped: only the batch being fed is in memory."""
    from edgekit.userdata.sets import NpyFile

    data = np.arange(5 * 3 * 2, dtype=np.float32).reshape(5, 3, 2)
    np.save(tmp_path / "a.npy", data)
    f = NpyFile(tmp_path / "a.npy")
    assert len(f) == 5 and f.shape == (5, 3, 2) and f.dtype == np.float32
    np.testing.assert_array_equal(f[1:4], data[1:4])
    raw = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "b.npy").write_bytes(raw[:-8])
    with pytest.raises(ValueError, match="truncated"):
        NpyFile(tmp_path / "b.npy")


def test_range_cache_hits_and_invalidates(seq_model, tmp_path, monkeypatch):
    """Same model + data + method + settings: reused; change any of them: recomputed. JSON only."""
    from edgekit.quantize.calibration import cache as calib_cache
    from edgekit.userdata.sets import open_calibration
    from edgekit.quantize.calibration.onnx_ranges import collect_ranges

    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    path, spec = seq_model
    _write_variable_length_set(tmp_path / "calib", [5, 7], np.random.default_rng(5))
    calib = open_calibration(tmp_path / "calib", spec)
    model_hash = "m" * 64

    def key(method="percentile", settings=None, data=None):
        return calib_cache.cache_key(model_hash, data or calib_cache.data_fingerprint(calib), method,
                                     settings or {"percentile": 99.99})

    cache = calib_cache.CalibrationCache()
    assert cache.folder == tmp_path / "cache" / "calibration"
    assert cache.load(key()) is None
    ranges, samples = collect_ranges(path, calib.feeds(), make_calibrator("percentile"))
    stored = cache.store(key(), ranges, samples, {"model": "seq"})
    doc = json.loads(stored.read_text())
    assert doc["schema"] == "edgekit.calibration-cache" and doc["samples"] == 8
    back, n = cache.load(key())
    assert n == 8 and back == ranges
    assert key() != key(method="entropy")
    assert key() != key(settings={"percentile": 99.9})
    before = key()
    np.save(tmp_path / "calib" / "block001.npy", np.zeros((4, 7, 4), np.float32))  # data changed
    assert key() != before
    stored.write_text("{ not json")
    assert cache.load(key()) is None  # a damaged entry is recomputed, never trusted


def test_quantize_reuses_cached_ranges(digits_checkpoint, tmp_path, monkeypatch):
    from conftest import CALIB_DIGITS

    from edgekit.quantize.api import quantize

    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    opts = dict(calib=CALIB_DIGITS, formats=("onnx",), calibrate_method="percentile", percentile=99.9)
    _, first = quantize(digits_checkpoint, "static", tmp_path / "a", "rpi4", **opts)
    _, again = quantize(digits_checkpoint, "static", tmp_path / "b", "rpi4", **opts)
    _, other = quantize(digits_checkpoint, "static", tmp_path / "c", "rpi4", **{**opts, "percentile": 99.0})
    assert first.quantization["calibration"]["cache"] == "stored"
    assert again.quantization["calibration"]["cache"] == "hit"
    assert other.quantization["calibration"]["cache"] == "stored"
    assert first.file("onnx").sha256 == again.file("onnx").sha256
    _, off = quantize(digits_checkpoint, "static", tmp_path / "d", "rpi4", **opts, calib_cache=False)
    assert off.quantization["calibration"]["cache"] == "off"
    assert first.quantization["calibration"]["samples"] == 256


def test_nan_and_empty_calibration_sets_are_refused(digits_checkpoint, tmp_path):
    from edgekit.quantize.api import quantize

    bad = tmp_path / "nan"
    bad.mkdir()
    data = np.random.default_rng(0).random((40, 1, 8, 8), dtype=np.float32)
    data[33, 0, 0, 0] = np.nan
    np.save(bad / "c.npy", data)
    with pytest.raises(InputFileError, match="NaN or Inf"):
        quantize(digits_checkpoint, "static", tmp_path / "q", calib=bad, formats=("onnx",), calib_cache=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    np.save(empty / "c.npy", np.zeros((0, 1, 8, 8), np.float32))
    with pytest.raises(InputFileError, match="zero samples"):
        quantize(digits_checkpoint, "static", tmp_path / "q", calib=empty, formats=("onnx",))
    ints = tmp_path / "strings"
    ints.mkdir()
    np.save(ints / "c.npy", np.array([["a"] * 8] * 8)[None, None].repeat(2, 0))
    with pytest.raises(InputFileError, match="expected numbers"):
        quantize(digits_checkpoint, "static", tmp_path / "q", calib=ints, formats=("onnx",))
    assert not (tmp_path / "q").exists()
