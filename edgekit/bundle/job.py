"""``BundleJob``: the resolved inputs of one bundle, made once by ``build_bundle`` and handed to every
step that writes the bundle (the model file, the runtime's files, bundle.json, the archive)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgekit import formats
from edgekit.bundle.requirements import Pins
from edgekit.formats.artifacts import Manifest, ModelFile
from edgekit.core.targets import Target


@dataclass(frozen=True)
class BundleJob:
    folder: Path  # the export folder read
    manifest: Manifest  # its manifest
    entry: ModelFile  # the model file bundled
    spec: formats.Format  # that file's format
    target: Target
    out: Path  # the bundle folder (claimed)
    archive_path: Path  # <out>.tar.gz
    staged_archive: Path | None  # where the archive is written before it is renamed in; None: no archive
    pins: Pins | None  # the Python runtime's pinned requirements; None: the native runtime
    wheels: bool  # download the target platform's wheels into the bundle
    mismatches: tuple[str, ...]  # what --force overrode (recorded in bundle.json)
    created: str  # ISO 8601 time recorded in bundle.json
    mtime: int  # the archive members' timestamp (from ``created``)
    progress: Callable[[str], None]
    force: bool = False
    llm_data: dict | None = None  # a language model's checked data (edgekit.llm.bundle.check_data)

    @property
    def model_name(self) -> str:
        """The model's file name inside the bundle."""
        return self.spec.files.file_name

    @property
    def native(self) -> bool:
        return self.pins is None
