"""What verify needs from a device bundle: its checked files, model, target and wheels."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import InputFileError
from edgekit import formats
from edgekit.bundle import layout
from edgekit.bundle.verify import verify_checksums
from edgekit.formats.artifacts import load_manifest

# {name}-{version}(-{build})?-{python tags}-{abi tags}-{platform tags}.whl (PEP 427)
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl\Z")


@dataclass(frozen=True)
class Bundle:
    path: Path
    info: dict  # bundle.json
    model: Path
    data_files: tuple[Path, ...]  # ONNX external data beside the model
    format: str  # a name in the format table (edgekit.formats)
    spec: object  # that name's entry (edgekit.formats.Format), resolved once when the bundle is opened
    precision: str  # fp32 | int8
    target: str
    arch: str
    engine: str | None  # TorchScript quantized engine
    input_names: tuple[str, ...]
    reference: Path
    requirements: Path | None
    runner: Path | None
    wheels: tuple[Path, ...]
    checked_files: int  # files whose SHA256SUMS entry matched


def open_bundle(path: str | Path) -> Bundle:
    """Read a bundle folder after checking every file against its SHA256SUMS."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputFileError(f"bundle folder not found: {folder}")
    if not layout.is_bundle(folder):
        raise InputFileError(
            f"{folder} has no {layout.BUNDLE_JSON}; make a bundle first: edgekit bundle EXPORT_DIR --target rpi4 --out {folder}"
        )
    sums = verify_checksums(folder)
    info = layout.read_bundle_json(folder)
    _, manifest = load_manifest(folder, verify=False)
    model = folder / info["model"]
    if info["model"] not in sums:
        raise InputFileError(f"{model} is not covered by the bundle's {layout.CHECKSUMS}")
    if sums[info["model"]] != info["model_sha256"]:
        raise InputFileError(f"{model} is not the model {layout.BUNDLE_JSON} describes (sha256 differs)")
    data_files = []
    for name in info.get("model_data_files") or []:
        if not isinstance(name, str) or name not in sums or "/" in name:
            raise InputFileError(f"{folder / layout.BUNDLE_JSON}: model data file {name!r} is not a file the {layout.CHECKSUMS} covers")
        data_files.append(folder / name)

    spec = formats.get(info["format"])  # a format this edgekit does not know is one line, before any work
    reference = folder / layout.REFERENCE
    if not reference.is_file():
        raise InputFileError(f"{reference} is missing; rebuild the bundle")
    optional = {name: folder / name for name in (layout.REQUIREMENTS, layout.RUNNER)}
    if optional[layout.REQUIREMENTS].is_file():  # pip options in any spelling are refused here, before any work
        from edgekit.bundle.requirements import read_requirements

        read_requirements(optional[layout.REQUIREMENTS], info["format"])
    return Bundle(
        path=folder,
        info=info,
        model=model,
        data_files=tuple(data_files),
        format=info["format"],
        spec=spec,
        precision=str(info.get("precision") or "fp32"),
        target=info["target"],
        arch=str(info.get("arch") or ""),
        engine=info.get("quantized_engine"),
        input_names=tuple(spec.name for spec in manifest.inputs),
        reference=reference,
        requirements=optional[layout.REQUIREMENTS] if optional[layout.REQUIREMENTS].is_file() else None,
        runner=optional[layout.RUNNER] if optional[layout.RUNNER].is_file() else None,
        wheels=tuple(sorted((folder / layout.WHEELS_DIR).glob("*.whl"))),
        checked_files=len(sums),
    )


def wheel_problem(name: str, arch: str, python: str | None = None) -> str | None:
    """Why the wheel file ``name`` cannot install on Linux ``arch`` with CPython ``python`` ("3.11"), or None."""
    match = _WHEEL.match(name)
    if not match:
        return f"{name} is not a wheel file name"
    platforms = match["plat"].split(".")
    if not any(p == "any" or (p.endswith(f"_{arch}") and p.startswith(("manylinux", "linux"))) for p in platforms):
        return f"wheels/{name} is built for {platforms[0]}, not {arch} Linux (glibc)"
    if python is None:
        return None
    major, minor = python.split(".")[:2]
    pythons = match["py"].split(".")
    abis = match["abi"].split(".")
    fits = any(
        tag in (f"py{major}", f"py{major}{minor}", f"cp{major}{minor}")
        or ("abi3" in abis and tag.startswith(f"cp{major}") and tag[2:].isdigit() and int(tag[3:] or 0) <= int(minor))
        for tag in pythons
    )
    return None if fits else f"wheels/{name} is for {'/'.join(pythons)}, not CPython {python}"


def check_wheels(bundle: Bundle, python: str | None = None) -> None:
    """Refuse a bundle whose wheels/ would not install on the emulated board (arch, then Python)."""
    for wheel in bundle.wheels:
        problem = wheel_problem(wheel.name, bundle.arch, python)
        if problem:
            platform = bundle.info.get("python_platform") or f"manylinux2014_{bundle.arch}"
            raise InputFileError(f"{problem}; rebuild the bundle with --wheels for {platform} (edgekit bundle ... --wheels)")
