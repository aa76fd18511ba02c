"""The on-disk artifact every stage hands to the next: a folder of model files + manifest.json."""

from __future__ import annotations

import datetime as _dt
import platform
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from edgekit import __version__
from edgekit.errors import InputFileError, UsageError
from edgekit.fileio import read_json, sha256_file, write_json

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "edgekit.manifest"
MANIFEST_VERSION = 1
KINDS = ("checkpoint", "quantized", "export")
FORMATS = ("checkpoint", "torchscript", "onnx")


@dataclass(frozen=True)
class InputSpec:
    """One model input. ``shape`` uses ``None`` for a dynamic axis named in ``dynamic_axes``."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str = "float32"
    dynamic_axes: dict[int, str] = field(default_factory=dict)
    value_range: tuple[float, float] | None = None  # [low, high) of valid values, e.g. token ids

    def concrete_shape(self, **sizes: int) -> tuple[int, ...]:
        """The shape with each dynamic axis filled from ``sizes`` (by axis name, default 1)."""
        return tuple(
            dim if dim is not None else int(sizes.get(self.dynamic_axes.get(i, ""), 1))
            for i, dim in enumerate(self.shape)
        )

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "dynamic_axes": {str(k): v for k, v in self.dynamic_axes.items()},
            "value_range": list(self.value_range) if self.value_range is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "InputSpec":
        try:
            shape = tuple(None if d is None else int(d) for d in data["shape"])
            axes = {int(k): str(v) for k, v in dict(data.get("dynamic_axes", {})).items()}
            bounds = data.get("value_range")
            value_range = None if bounds is None else (float(bounds[0]), float(bounds[1]))
            return cls(str(data["name"]), shape, str(data.get("dtype", "float32")), axes, value_range)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputFileError(f"malformed input spec in manifest: {exc!r}") from None


@dataclass(frozen=True)
class ModelFile:
    path: str  # relative to the artifact folder
    format: str  # one of FORMATS
    sha256: str
    bytes: int
    precision: str = "fp32"  # fp32 | int8
    metrics: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Manifest:
    kind: str
    model: dict[str, Any]  # {"name": zoo name, "config": {...}}
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    files: tuple[ModelFile, ...]
    task: dict[str, Any] = field(default_factory=dict)
    quantization: dict[str, Any] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    parent: dict[str, Any] | None = None
    target: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    created: str = ""

    def file(self, fmt: str) -> ModelFile:
        for entry in self.files:
            if entry.format == fmt:
                return entry
        have = ", ".join(f.format for f in self.files) or "none"
        raise InputFileError(f"artifact has no {fmt} model file (it has: {have})")

    def formats(self) -> tuple[str, ...]:
        return tuple(f.format for f in self.files)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["inputs"] = [spec.to_dict() for spec in self.inputs]
        data["outputs"] = list(self.outputs)
        data["files"] = [asdict(f) for f in self.files]
        return {"schema": MANIFEST_SCHEMA, "schema_version": MANIFEST_VERSION, **data}

    @classmethod
    def from_dict(cls, data: dict, where: str = "manifest") -> "Manifest":
        if data.get("schema") != MANIFEST_SCHEMA:
            raise InputFileError(f"{where} is not an edgekit manifest")
        version = data.get("schema_version")
        if version != MANIFEST_VERSION:
            raise InputFileError(
                f"{where} has schema version {version!r}; this edgekit reads version {MANIFEST_VERSION}"
            )
        try:
            kind = data["kind"]
            if kind not in KINDS:
                raise ValueError(f"kind {kind!r} not in {KINDS}")
            files = []
            for raw in data["files"]:
                entry = ModelFile(**raw)
                if entry.format not in FORMATS:
                    raise ValueError(f"file format {entry.format!r} not in {FORMATS}")
                if Path(entry.path).is_absolute() or ".." in Path(entry.path).parts:
                    raise ValueError(f"file path {entry.path!r} escapes the artifact folder")
                files.append(entry)
            return cls(
                kind=kind,
                model=dict(data["model"]),
                inputs=tuple(InputSpec.from_dict(s) for s in data["inputs"]),
                outputs=tuple(str(o) for o in data["outputs"]),
                files=tuple(files),
                task=dict(data.get("task") or {}),
                quantization=data.get("quantization"),
                metrics=dict(data.get("metrics") or {}),
                parent=data.get("parent"),
                target=data.get("target"),
                versions=dict(data.get("versions") or {}),
                created=str(data.get("created", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputFileError(f"{where} is malformed: {exc}") from None


def runtime_versions() -> dict[str, str]:
    """Versions of the pieces that produced an artifact (only those already imported or importable)."""
    from importlib import metadata

    versions = {"edgekit": __version__, "python": platform.python_version()}
    for dist in ("torch", "onnx", "onnxruntime", "numpy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return versions


def describe_file(folder: Path, rel: str, fmt: str, **extra) -> ModelFile:
    path = folder / rel
    return ModelFile(path=rel, format=fmt, sha256=sha256_file(path), bytes=path.stat().st_size, **extra)


def finalize(manifest: Manifest, folder: Path) -> Manifest:
    """Stamp versions and time, then write manifest.json into ``folder`` (atomically)."""
    stamped = replace(
        manifest,
        versions=manifest.versions or runtime_versions(),
        created=manifest.created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    write_json(folder / MANIFEST_NAME, stamped.to_dict())
    return stamped


def parent_ref(folder: Path, manifest: Manifest) -> dict:
    return {
        "path": str(folder.resolve()),
        "kind": manifest.kind,
        "manifest_sha256": sha256_file(folder / MANIFEST_NAME),
    }


def find_artifact_dir(path: str | Path) -> Path:
    """An artifact folder, or the folder of a model file inside one."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"artifact not found: {path}")
    folder = path if path.is_dir() else path.parent
    if not (folder / MANIFEST_NAME).is_file():
        raise InputFileError(f"{folder} has no {MANIFEST_NAME}; is it an edgekit artifact?")
    return folder


def load_manifest(path: str | Path, verify: bool = True) -> tuple[Path, Manifest]:
    """Load an artifact's manifest; with ``verify`` check every model file's size and checksum."""
    folder = find_artifact_dir(path)
    manifest = Manifest.from_dict(read_json(folder / MANIFEST_NAME, "manifest"), str(folder / MANIFEST_NAME))
    if verify:
        for entry in manifest.files:
            file_path = folder / entry.path
            if not file_path.is_file():
                raise InputFileError(f"model file missing from artifact: {file_path}")
            if file_path.stat().st_size != entry.bytes or sha256_file(file_path) != entry.sha256:
                raise InputFileError(f"model file {file_path} does not match its manifest checksum (corrupt or changed)")
    return folder, manifest


def model_file_for(path: str | Path) -> tuple[Path, Manifest, ModelFile]:
    """Resolve a user path (a model file or an artifact folder with one model) to its manifest entry."""
    folder, manifest = load_manifest(path)
    path = Path(path)
    if path.is_file():
        for entry in manifest.files:
            if (folder / entry.path).resolve() == path.resolve():
                return folder, manifest, entry
        raise InputFileError(f"{path} is not listed in {folder / MANIFEST_NAME}")
    if len(manifest.files) != 1:
        names = ", ".join(f.path for f in manifest.files)
        raise UsageError(f"{folder} holds several models ({names}); name the file")
    return folder, manifest, manifest.files[0]

