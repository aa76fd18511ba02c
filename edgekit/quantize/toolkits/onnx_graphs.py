"""The ONNX graphs one quantize job works on, each built once per job and kept in ``job.memo``.

The float model's ONNX graph (``QuantJob.float_onnx``) after ONNX Runtime's pre-processing (what is
calibrated and quantized), its fusion layouts (``fusion.py``), the calibrated tensor ranges of the
pre-processed graph, and the target's ORT recipe for a config.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.quantize.calibration.cache import files_fingerprint
from edgekit.core.fileio import sha256_file
from edgekit.quantize.calibration import cache as calib_cache
from edgekit.quantize.calibration.calibrators import describe, make_calibration, make_calibrator
from edgekit.quantize.calibration.onnx_ranges import collect_ranges
from edgekit.quantize.job import file_names
from edgekit.quantize.toolkits.fusion import apply_fusion
from edgekit.quantize.toolkits.recipes import onnx_recipe

# job.memo keys (the memo is shared with other toolkits: each key names its owner)
_PREPARED = ("onnx-graphs", "prepared")
_FUSED = ("onnx-graphs", "fused")


def prepared_onnx(job) -> Path:
    """The float ONNX model after ORT's pre-processing: what is calibrated and quantized."""
    if _PREPARED not in job.memo:
        from edgekit.quantize.toolkits.ort_backend import preprocess

        notes: list[str] = []
        job.memo[_PREPARED] = preprocess(job.float_onnx(), job.scratch / "prepared.onnx", notes)
        job.warnings.extend(note for note in notes if note not in job.warnings)
    return job.memo[_PREPARED]


def fused_onnx(job, fusion: str) -> tuple[Path, dict]:
    """The prepared model in a fusion layout (``quantize/toolkits/fusion.py``), built once per layout."""
    fused = job.memo.setdefault(_FUSED, {})
    if fusion not in fused:
        fused[fusion] = apply_fusion(prepared_onnx(job), job.scratch / f"graph-{fusion}.onnx", fusion, job.float_onnx())
    return fused[fusion]


def recipe(job, config):
    """The target's ORT recipe with ``config``'s overrides; its warnings join the job's."""
    found = onnx_recipe(
        job.target,
        activation_type=getattr(config, "activation_type", None),
        weight_type=getattr(config, "weight_type", None),
        per_channel=getattr(config, "per_channel", None),
        reduce_range=getattr(config, "reduce_range", None),
    )
    for warning in found.warnings:
        if warning not in job.warnings:
            job.warnings.append(warning)
    return found


def activation_ranges(job, config) -> dict:
    """Per-tensor ranges of the prepared ONNX model, from the calibration cache or a pass."""
    settings = make_calibration(config.calibrate_method, **config.calibration_settings())
    memo = (config.calibrate_method, repr(settings), str(config.calib), config.calib_batch_size, config.calib_max_samples)
    if memo in job.calibrated_ranges:
        return job.calibrated_ranges[memo]
    calib = job.calibration(config)
    prepared = prepared_onnx(job)
    about = describe(config.calibrate_method, settings)
    key = calib_cache.cache_key(sha256_file(prepared), calib_cache.data_fingerprint(calib),
                                config.calibrate_method, about)
    cache = calib_cache.CalibrationCache()
    hit = cache.load(key) if config.calib_cache else None
    if hit is not None:
        ranges, samples = hit
    else:
        total = calib.count()
        ranges, samples = collect_ranges(
            prepared, calib.feeds(), make_calibrator(config.calibrate_method, settings), total, job.progress,
            streams=getattr(calib, "streams", ()), axes=dict(getattr(calib, "axes", ())),
        )
        if config.calib_cache:
            cache.store(key, ranges, samples, {"model": job.source.label, **about, "samples": samples})
    job.calibration_info = {
        "source": str(Path(config.calib)),
        **file_names(calib),
        "data_sha256": files_fingerprint(calib.files),
        "samples": samples,
        "batch_size": config.calib_batch_size,
        **({"reading": calib.settings} if getattr(calib, "settings", None) else {}),
        **({"sample_axes": dict(calib.axes)} if getattr(calib, "axes", ()) else {}),  # where not axis 0
        **about,
        "cache": ("hit" if hit is not None else "stored") if config.calib_cache else "off",
        "cache_key": key,
        "mask_tensors": sorted(n for n, r in ranges.items() if r.mask_like),
    }
    job.calibrated_ranges[memo] = ranges
    return ranges
