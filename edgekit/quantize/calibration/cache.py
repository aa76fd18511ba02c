"""A JSON cache of computed activation ranges, so re-quantizing skips the calibration pass.

The key is a hash of everything the ranges depend on: the exact model graph that was calibrated,
the calibration data (file names, sizes and contents, batch size, sample limit, input spec), the
calibration method and its settings, and this cache's format version. Change any of them and the
key changes, so a stale entry is never read. Entries are plain JSON (never pickle), written
atomically under ``$EDGEKIT_CACHE_DIR/calibration`` (default ``~/.cache/edgekit/calibration``),
a folder made by ``edgekit.core.cache.part_dir`` (tagged as edgekit's, never in a folder no cache may use).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from edgekit.core.errors import EdgekitError
from edgekit.core.fileio import sha256_file, write_json
from edgekit.quantize.calibration.calibrators import TensorRange
from edgekit.core.cache import cache_root

CACHE_SCHEMA = "edgekit.calibration-cache"
CACHE_VERSION = 1


def default_cache_dir() -> Path:
    return cache_root() / "calibration"


def files_fingerprint(files) -> str:
    """Hash of calibration files: each file's name, size and SHA-256, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.name):
        digest.update(f"{path.name}\0{path.stat().st_size}\0{sha256_file(path)}\0".encode())
    return digest.hexdigest()


def data_fingerprint(calib) -> str:
    """Hash of a CalibrationSet: its files' names and contents plus how they are batched."""
    digest = hashlib.sha256(files_fingerprint(calib.files).encode())
    settings = {"batch_size": calib.batch_size, "max_samples": calib.max_samples,
                "inputs": [spec.to_dict() for spec in calib.specs]}
    if getattr(calib, "settings", None):  # images: the preprocessing; text: the tokenizer, the length
        settings["reading"] = calib.settings
    if getattr(calib, "axes", ()):  # samples not on axis 0: which rows are calibrated depends on it
        settings["sample_axes"] = dict(calib.axes)
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()


def cache_key(model_sha256: str, data_sha256: str, method: str, settings: dict) -> str:
    payload = {"version": CACHE_VERSION, "model": model_sha256, "data": data_sha256,
               "method": method, "settings": settings}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class CalibrationCache:
    def __init__(self, folder: str | os.PathLike | None = None):
        self.folder = Path(folder) if folder is not None else default_cache_dir()
        self._default = folder is None  # the cache part: made (and checked) by edgekit.core.cache.part_dir

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def load(self, key: str) -> tuple[dict[str, TensorRange], int] | None:
        """(ranges, samples) for ``key``, or None when absent or unreadable (then it is recomputed)."""
        path = self.path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("schema") != CACHE_SCHEMA or data.get("version") != CACHE_VERSION or data.get("key") != key:
                return None
            ranges = {name: TensorRange.from_json(value) for name, value in data["ranges"].items()}
            return ranges, int(data["samples"])
        except Exception:  # noqa: BLE001 - any damage to a cache entry only costs a recalibration
            return None

    def store(self, key: str, ranges: dict[str, TensorRange], samples: int, about: dict) -> Path:
        doc = {
            "schema": CACHE_SCHEMA,
            "version": CACHE_VERSION,
            "key": key,
            "about": about,
            "samples": samples,
            "ranges": {name: r.to_json() for name, r in sorted(ranges.items())},
        }
        try:
            if self._default:
                from edgekit.core.cache import part_dir

                self.folder = part_dir("calibration")
            return write_json(self.path(key), doc)
        except (OSError, EdgekitError):  # UsageError of a cache root no cache may use included
            return self.path(key)  # a read-only cache folder only costs the next run a recalibration
