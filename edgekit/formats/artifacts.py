"""The on-disk artifact every stage hands to the next: a folder of model files + manifest.json."""

from __future__ import annotations

import datetime as _dt
import platform
import re
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from edgekit import formats
from edgekit._version import __version__
from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.fileio import read_json, sha256_file, write_json
from edgekit.core.input_spec import InputSpec
from edgekit.core.outputs import safe_text

MANIFEST_NAME = "manifest.json"
# Files an artifact carries beside its models, which later stages read (and what they are):
# every one present is listed with its checksum in the manifest's ``extra_files``.
TOKENIZER_FILE = "tokenizer.json"  # a language model's vocabulary (Hugging Face tokenizers)
CARRIED_FILES = {"reference.npz": "reference data", TOKENIZER_FILE: "tokenizer",
                 "chat_template.jinja": "chat template"}  # a pretrained LLM's (edgekit.llm.gguf.importer)
MANIFEST_SCHEMA = "edgekit.manifest"
MANIFEST_VERSION = 1
KINDS = ("checkpoint", "quantized", "export")
CHECKPOINT = "checkpoint"  # a training checkpoint's file; model formats come from edgekit.formats
CACHED_FAMILY = "llama"  # the zoo name of the language models that run with a KV cache (edgekit.llm)


@dataclass(frozen=True)
class ModelFile:
    path: str  # relative to the artifact folder
    format: str  # "checkpoint" or a name in the format table (edgekit.formats)
    sha256: str
    bytes: int
    precision: str = "fp32"  # fp32, or what the quantization method writes (int8, int4, fp16, ...)
    metrics: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    # ONNX external data beside the model file: [{"path", "sha256", "bytes"}] (models over 2 GB)
    data_files: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        """The model's size on disk: its file plus its external data files."""
        return self.bytes + sum(int(d["bytes"]) for d in self.data_files)

    def paths(self) -> list[str]:
        """Every file of this model, relative to the artifact folder (the model file first)."""
        return [self.path, *(d["path"] for d in self.data_files)]


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
    # The files the artifact carries beside its models (CARRIED_FILES), each with its checksum:
    # [{"path", "sha256", "bytes"}]. ``finalize`` lists them; ``load_manifest`` verifies them.
    extra_files: tuple[dict[str, Any], ...] = ()

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
        data["extra_files"] = [dict(e) for e in self.extra_files]
        return {"schema": MANIFEST_SCHEMA, "schema_version": MANIFEST_VERSION, **data}

    @classmethod
    def from_dict(cls, data: dict, where: str = "manifest") -> "Manifest":
        """Read a manifest document; anything malformed is an InputFileError naming ``where``."""
        if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
            raise InputFileError(f"{where} is not an edgekit manifest")
        version = data.get("schema_version")
        if version != MANIFEST_VERSION:
            raise InputFileError(
                f"{where} has schema version {version!r}; this edgekit reads version {MANIFEST_VERSION}"
            )

        formats.names()  # the table (and its plug-ins) first: a plug-in that fails is not this file's fault
        try:
            kind = data["kind"]
            if kind not in KINDS:
                raise ValueError(f"kind {kind!r} not in {KINDS}")
            model = _typed(data["model"], dict, "model")
            _plain(_typed(model.get("name"), str, "model.name"), "model.name", MODEL_NAME)
            files = tuple(_model_file(raw) for raw in _typed(data["files"], list, "files"))
            inputs = tuple(InputSpec.from_dict(_typed(s, dict, "inputs[]")) for s in _typed(data["inputs"], list, "inputs"))
            return cls(
                kind=kind,
                model=model,
                inputs=inputs,
                outputs=tuple(_typed(o, str, "outputs[]") for o in _typed(data["outputs"], list, "outputs")),
                files=files,
                task=dict(_typed(data.get("task") or {}, dict, "task")),
                quantization=_typed(data.get("quantization"), (dict, type(None)), "quantization"),
                metrics=dict(_typed(data.get("metrics") or {}, dict, "metrics")),
                parent=_typed(data.get("parent"), (dict, type(None)), "parent"),
                target=_plain_or_none(_typed(data.get("target"), (str, type(None)), "target"), "target", TOKEN),
                versions=dict(_typed(data.get("versions") or {}, dict, "versions")),
                created=str(data.get("created", "")),
                extra_files=_extra_files(data.get("extra_files", [])),
            )
        except InputFileError as exc:
            raise InputFileError(f"{where} is malformed: {safe_text(exc)}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise InputFileError(f"{where} is malformed: {safe_text(exc)}") from None


# Names that reach file names, a bundle's README and command lines: plain tokens only.
TOKEN = re.compile(r"^[A-Za-z0-9._-]{1,64}\Z")
MODEL_NAME = re.compile(r"^[A-Za-z0-9._:/@+=-]{1,200}\Z")  # zoo names, onnx:FILE, module:pkg.mod:fn, hf:TYPE


def _plain(value: str, what: str, pattern: re.Pattern) -> str:
    if not pattern.match(value):
        raise ValueError(f"{what} {value[:60]!r} has characters outside {pattern.pattern}")
    return value


def _plain_or_none(value, what: str, pattern: re.Pattern):
    return None if value is None else _plain(value, what, pattern)


def _typed(value, kind, what: str):
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        names = "/".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise ValueError(f"{what} must be {names}, got {type(value).__name__}")
    return value


def _model_file(raw) -> ModelFile:
    raw = _typed(raw, dict, "files[]")
    entry = ModelFile(**raw)
    _typed(entry.path, str, "files[].path")
    known = (CHECKPOINT, *formats.names())
    if entry.format not in known:
        raise ValueError(f"file format {entry.format!r} not in {known}")
    _check_relative(entry.path)
    _typed(entry.sha256, str, "files[].sha256")
    if not isinstance(entry.bytes, int) or isinstance(entry.bytes, bool) or entry.bytes < 0:
        raise ValueError(f"files[].bytes must be a size in bytes, got {entry.bytes!r}")
    _typed(entry.precision, str, "files[].precision")
    _typed(entry.metrics, dict, "files[].metrics")
    _typed(entry.details, dict, "files[].details")
    if "variant" in entry.details:
        _plain(_typed(entry.details["variant"], str, "files[].details.variant"), "files[].details.variant", TOKEN)
    for data in _typed(entry.data_files, list, "files[].data_files"):
        _typed(data, dict, "files[].data_files[]")
        if set(data) != {"path", "sha256", "bytes"}:
            raise ValueError(f"files[].data_files[] must have exactly path, sha256 and bytes, got {sorted(data)}")
        _check_relative(_typed(data["path"], str, "files[].data_files[].path"))
        _typed(data["sha256"], str, "files[].data_files[].sha256")
        if not isinstance(data["bytes"], int) or isinstance(data["bytes"], bool) or data["bytes"] < 0:
            raise ValueError(f"files[].data_files[].bytes must be a size in bytes, got {data['bytes']!r}")
    return entry


def _extra_files(raw) -> tuple[dict[str, Any], ...]:
    entries = []
    for data in _typed(raw, list, "extra_files"):
        _typed(data, dict, "extra_files[]")
        if set(data) != {"path", "sha256", "bytes"}:
            raise ValueError(f"extra_files[] must have exactly path, sha256 and bytes, got {sorted(data)[:5]}")
        path = _typed(data["path"], str, "extra_files[].path")
        if path not in CARRIED_FILES or any(e["path"] == path for e in entries):
            raise ValueError(f"extra_files[].path {path[:60]!r} is not one of {', '.join(CARRIED_FILES)} (or repeated)")
        _typed(data["sha256"], str, "extra_files[].sha256")
        if not isinstance(data["bytes"], int) or isinstance(data["bytes"], bool) or data["bytes"] < 0:
            raise ValueError(f"extra_files[].bytes must be a size in bytes, got {data['bytes']!r}")
        entries.append({"path": path, "sha256": data["sha256"], "bytes": data["bytes"]})
    return tuple(entries)


def _check_relative(path: str) -> None:
    if not path or "\x00" in path or Path(path).is_absolute() or ".." in Path(path).parts or path in (".",):
        raise ValueError(f"file path {path!r} escapes the artifact folder")


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


def describe_file(folder: Path, rel: str, fmt, **extra) -> ModelFile:
    """The manifest entry of ``folder/rel`` (``fmt``: its format's entry, a name, or ``CHECKPOINT``); the
    files that belong with it (an ONNX model's external data, ncnn's weights: its format's ``data_files``)
    are listed with it."""
    path = folder / rel
    data_files = []
    spec = None if fmt == CHECKPOINT else formats.entry(fmt)
    if spec is not None and spec.files.external_data:
        parent = Path(rel).parent
        for name in spec.ops().data_files(path):
            data = path.parent / name
            data_files.append({"path": (parent / name).as_posix(), "sha256": sha256_file(data), "bytes": data.stat().st_size})
    return ModelFile(path=rel, format=fmt if spec is None else spec.name, sha256=sha256_file(path), bytes=path.stat().st_size, data_files=data_files, **extra)


def recipe_sha256(quantization: dict, target: str | None) -> str:
    """SHA-256 of a quantization recipe: the method and its settings, for the target.

    Where the calibration data lives (``calib``) and whether its ranges were cached are left
    out: the same recipe on the same data gives the same model wherever the files are.
    """
    import hashlib
    import json

    config = {k: v for k, v in (quantization.get("config") or {}).items() if k not in ("calib", "calib_cache")}
    recipe = {"method": quantization.get("method"), "config": config, "target": target}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()


def finalize(manifest: Manifest, folder: Path) -> Manifest:
    """Stamp versions, time and the recipe's hash, then write manifest.json into ``folder`` (atomically)."""
    quantization = manifest.quantization
    if isinstance(quantization, dict) and quantization.get("method") and "recipe_sha256" not in quantization:
        quantization = {**quantization, "recipe_sha256": recipe_sha256(quantization, manifest.target)}
    stamped = replace(
        manifest,
        extra_files=carried_files(folder),
        quantization=quantization,
        versions=manifest.versions or runtime_versions(),
        created=manifest.created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    write_json(folder / MANIFEST_NAME, stamped.to_dict())
    return stamped


def carried_files(folder: Path) -> tuple[dict[str, Any], ...]:
    """The ``extra_files`` entries of the carried files (CARRIED_FILES) present in ``folder``."""
    entries = []
    for name in CARRIED_FILES:
        path = folder / name
        if path.is_file() and not path.is_symlink():
            entries.append({"path": name, "sha256": sha256_file(path), "bytes": path.stat().st_size})
    return tuple(entries)


def check_carried(folder: Path, manifest: Manifest, name: str | None = None) -> None:
    """Every carried file present in ``folder`` (or just ``name``) is the one its manifest lists.

    One that is absent is left to the stage that needs it (it says what is missing); one that is
    present but unlisted, changed, or a link out of the folder is an InputFileError.
    """
    listed = {e["path"]: e for e in manifest.extra_files}
    root = folder.resolve()
    for rel in [name] if name is not None else list(CARRIED_FILES):
        what, path = CARRIED_FILES[rel], folder / rel
        if not (path.exists() or path.is_symlink()):
            continue
        if not path.resolve().is_relative_to(root):
            raise InputFileError(f"{what} {path} points outside the artifact folder")
        entry = listed.get(rel)
        if entry is None:
            raise InputFileError(f"{what} {path} is not covered by {folder / MANIFEST_NAME}'s checksums "
                                 "(added or replaced after the artifact was made); rebuild the artifact")
        if not path.is_file() or path.stat().st_size != entry["bytes"] or sha256_file(path) != entry["sha256"]:
            raise InputFileError(f"{what} {path} does not match its manifest checksum (corrupt or changed)")


def carry_tokenizer(parent: dict | None, dest: Path) -> None:
    """Copy the parent artifact's ``tokenizer.json`` into a derived artifact being written at ``dest``
    (generate and serve need the vocabulary); only the parent's own, unchanged one is carried on."""
    if not parent or not parent.get("path"):
        return
    folder = Path(str(parent["path"]))
    source = folder / TOKENIZER_FILE
    if source.is_file() and not (dest / TOKENIZER_FILE).exists():
        manifest = folder / MANIFEST_NAME
        check_carried(folder, Manifest.from_dict(read_json(manifest, "manifest"), str(manifest)), TOKENIZER_FILE)
        shutil.copyfile(source, dest / TOKENIZER_FILE)


def is_cached_family(manifest: Manifest) -> bool:
    """A language model that runs with a KV cache: its stages are ``edgekit.llm``'s handlers."""
    return manifest.model.get("name") == CACHED_FAMILY


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
        root = folder.resolve()
        for entry in manifest.files:
            listed = [(entry.path, entry.bytes, entry.sha256, "model file"),
                      *((d["path"], d["bytes"], d["sha256"], "external data file") for d in entry.data_files)]
            for rel, size, digest, what in listed:
                file_path = folder / rel
                if not file_path.resolve().is_relative_to(root):  # a link out of the folder
                    raise InputFileError(f"{what} {file_path} points outside the artifact folder")
                if not file_path.is_file():
                    raise InputFileError(f"{what} missing from artifact: {file_path}")
                if file_path.stat().st_size != size or sha256_file(file_path) != digest:
                    raise InputFileError(f"{what} {file_path} does not match its manifest checksum (corrupt or changed)")
        check_carried(folder, manifest)
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

