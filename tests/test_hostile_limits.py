"""Resource limits, checked before work starts (edgekit/formats/limits.py): a model larger than the
target's RAM is refused by `bundle`, `bench --host` and `pipeline` (a warning with --force), and a
huge calibration set gets a warning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from corpus.hostile import assert_one_line_error
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.core.errors import UsageError
from edgekit.formats.limits import (
    CALIB_WARN_BYTES,
    ResourceLimitError,
    calibration_bytes,
    check_calibration_size,
    check_model_fits,
    float_parameter_bytes,
    model_memory_mb,
)
from edgekit.core.targets import load_target
from sshd_fixture import fake_ssh

runner = CliRunner()
CORPUS = Path(__file__).resolve().parent / "corpus"
TINY = CORPUS / "targets" / "tiny_ram.toml"  # "rpi4" with 32 MB of RAM: nothing fits
REPO = Path(__file__).resolve().parent.parent


def test_the_estimate_is_the_model_plus_its_runtime():
    from edgekit import formats

    assert model_memory_mb(0, "onnx") == formats.get("onnx").board.footprint_mb == 64.0
    assert model_memory_mb(10 * 2**20, "torchscript") == 10 + formats.get("torchscript").board.footprint_mb
    rpi4 = load_target("rpi4")  # 1024 MB
    assert check_model_fits(rpi4, 900 * 2**20, "onnx", "m") is None
    with pytest.raises(ResourceLimitError, match=r"m needs about 1,025 MB of RAM \(961.0 MiB model \+ ~64 MB for onnxruntime\), more than the 1,024 MB RAM of target 'rpi4'"):
        check_model_fits(rpi4, 961 * 2**20, "onnx", "m")
    assert issubclass(ResourceLimitError, UsageError)  # exit code 2
    warning = check_model_fits(rpi4, 2 * 2**30, "torchscript", "m", force=True)
    assert "going ahead because of --force" in warning


def test_float_parameter_bytes_of_a_zoo_model():
    assert float_parameter_bytes("digits-cnn") == pytest.approx(96_000, rel=0.1)  # 24,058 parameters + BN buffers


def _sparse_npy(path: Path, samples: int) -> Path:
    """A .npy of ``samples`` zero 1x8x8 float32 samples that takes no disk space (a sparse file)."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 1, 8, 8), np.float32))
    header["shape"] = (samples, 1, 8, 8)
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        fh.truncate(fh.tell() + samples * 256)
    return path


@pytest.fixture()
def huge_calib(tmp_path) -> Path:
    folder = tmp_path / "calib-huge"
    folder.mkdir()
    _sparse_npy(folder / "b.npy", CALIB_WARN_BYTES // 256 + 16)
    return folder


def test_a_huge_calibration_set_is_flagged(huge_calib, tmp_path):
    assert calibration_bytes(huge_calib) > CALIB_WARN_BYTES
    warning = check_calibration_size(huge_calib)
    assert "1.0 GiB on disk (over 1.0 GiB)" in warning and "--calib-max-samples" in warning
    assert check_calibration_size(REPO / "calib_data" / "digits") is None
    assert check_calibration_size(tmp_path / "missing") is None


def test_pipeline_warns_about_a_huge_calibration_set_before_it_starts(huge_calib, digits_checkpoint, tmp_path):
    bad = huge_calib / "a_first.npy"  # sorted first: the pipeline stops on it, after warning
    sample = np.zeros((4, 1, 8, 8), np.float32)
    sample[0, 0, 0, 0] = np.nan
    np.save(bad, sample)
    result = runner.invoke(app, ["pipeline", "--checkpoint", str(digits_checkpoint), "--methods", "static",
                                 "--calib", str(huge_calib), "--out", str(tmp_path / "out")])
    assert_one_line_error(result, 2, "NaN or Inf")
    said = " ".join(result.stderr.split())  # the warning wraps where tmp_path is long (xdist's popen-gw<N>/)
    assert "calibration data" in said and "on disk (over 1.0 GiB)" in said
    assert not (tmp_path / "out").exists()


def test_quantize_warns_about_a_huge_calibration_set(huge_calib, digits_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    # real samples sorted first, so the 16 samples used are real digits (the huge file is zeros)
    real = np.load(REPO / "calib_data" / "digits" / "digits_calib.npy")[:16]
    np.save(huge_calib / "a_first.npy", real)
    result = runner.invoke(app, ["quantize", str(digits_checkpoint), "--method", "static", "--format", "torchscript",
                                 "--calib", str(huge_calib), "--calib-max-samples", "16", "--out", str(tmp_path / "q")])
    assert result.exit_code == 0, result.stderr
    assert "Warning: calibration data" in result.stderr and "on disk (over 1.0 GiB)" in result.stderr


def test_bundle_refuses_a_model_too_big_for_the_board_unless_forced(digits_fp32_export, tmp_path):
    from edgekit.bundle.layout import read_bundle_json

    result = runner.invoke(app, ["bundle", str(digits_fp32_export), "--target", str(TINY), "--out", str(tmp_path / "b")])
    assert_one_line_error(result, 2, "more than the 32 MB RAM of target 'rpi4'")
    assert "--force" in result.stderr and not (tmp_path / "b").exists()

    result = runner.invoke(app, ["bundle", str(digits_fp32_export), "--target", str(TINY), "--out", str(tmp_path / "b"),
                                 "--force"])
    assert result.exit_code == 0, result.stderr
    assert "Warning: bundled for rpi4 despite:" in result.stderr and "32 MB RAM" in result.stderr
    info = read_bundle_json(tmp_path / "b")
    assert info["ram_mb"] == 32 and info["memory_estimate_mb"] > 32
    assert any("going ahead because of --force" in m for m in info["override"]["mismatches"])


def test_bundle_records_the_boards_ram(digits_fp32_export, tmp_path):
    from edgekit.bundle.build import build_bundle
    from edgekit.bundle.layout import read_bundle_json

    info = read_bundle_json(build_bundle(digits_fp32_export, "rpi4", tmp_path / "b", archive=False))
    assert info["ram_mb"] == 1024 and 64 < info["memory_estimate_mb"] < 65 and info["override"] is None


def test_remote_bench_refuses_before_connecting_unless_forced(digits_static, tmp_path, monkeypatch):
    from edgekit.bundle.build import build_bundle
    from edgekit.export.api import export

    exported, _ = export(digits_static, tmp_path / "int8", formats=("onnx",), target="rpi4")
    bundle = build_bundle(exported, str(TINY), tmp_path / "tiny", force=True, archive=False)
    marker = fake_ssh(tmp_path, monkeypatch)
    result = runner.invoke(app, ["bench", str(bundle), "--host", "pi@board", "-q"])
    assert_one_line_error(result, 2, "more than the 32 MB RAM of target 'rpi4'")
    assert not marker.exists()  # no ssh was started

    result = runner.invoke(app, ["bench", str(bundle), "--host", "pi@board", "--force"])
    assert result.exit_code == 1 and marker.exists()  # went on, and reached (the fake) ssh
    assert "Warning:" in result.stderr and "going ahead because of --force" in result.stderr

    result = runner.invoke(app, ["bench", str(bundle), "--force"])
    assert_one_line_error(result, 2, "--force applies only to a remote run")


def test_pipeline_refuses_before_training_unless_forced(tmp_path):
    from edgekit.pipeline.run import PipelineConfig, _check_before_work

    target = load_target(str(TINY))
    config = PipelineConfig(out=tmp_path / "p", model="digits-cnn", calib=REPO / "calib_data" / "digits", target=str(TINY))
    with pytest.raises(ResourceLimitError, match="the fp32 torchscript model of digits-cnn needs about 256 MB"):
        _check_before_work(config, target, lambda message: None)
    said = []
    forced = PipelineConfig(out=tmp_path / "p", model="digits-cnn", calib=REPO / "calib_data" / "digits", target=str(TINY),
                            force=True)
    _check_before_work(forced, target, said.append)
    from edgekit import formats

    # one warning per format whose runtime alone needs more than the target's 32 MB (ncnn's and LiteRT's fit)
    assert len(said) == sum(formats.get(name).board.footprint_mb > 32 for name in formats.available_names())
    assert all(line.startswith("Warning: the fp32 ") for line in said)
    assert not (tmp_path / "p").exists()  # checks write nothing
