"""``build_bundle``: an export folder -> a self-contained device bundle folder + ``.tar.gz``.

The layout is described in ``edgekit.bundle``. The folder is built under a temporary name and
swapped in; the archive beside it is written the same way.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Callable

from edgekit import formats
from edgekit._version import __version__
from edgekit.formats.artifacts import Manifest, ModelFile, is_cached_family, load_manifest
from edgekit.board import entries as board_files
from edgekit.bundle import layout, native
from edgekit.bundle.compat import check_target
from edgekit.bundle.host_check import python_check
from edgekit.bundle.job import BundleJob
from edgekit.bundle.readme import native_readme_text, readme_text
from edgekit.bundle.requirements import check_wheel_exists, download_wheels, pin
from edgekit.bundle.tarball import is_bundle_archive, write_archive
from edgekit.bundle.verify import write_checksums
from edgekit.core import handlers
from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.fileio import atomic_dir, clean_stale_temps, sha256_file, temp_sibling, write_json, write_text
from edgekit.formats.limits import check_model_fits, model_memory_mb, ResourceLimitError
from edgekit.core.outputs import check_not_inputs, claim_output, safe_text
from edgekit.core.targets import Target, load_target



def tarball_path(out: str | Path) -> Path:
    """``dist/rpi4`` -> ``dist/rpi4.tar.gz``."""
    out = Path(out)
    return out.parent / f"{out.name}.tar.gz"


def build_bundle(
    export_dir: str | Path,
    target: str | Target | None,
    out: str | Path,
    *,
    fmt: str | formats.Format | None = None,
    wheels: bool = False,
    force: bool = False,
    platform: str | None = None,
    python_version: str = layout.DEFAULT_PYTHON_VERSION,
    created: str | None = None,
    archive: bool = True,
    runtime: str = "python",
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Bundle one model of the export at ``export_dir`` for ``target`` into the folder ``out``.

    ``target`` None means the export's own target (else rpi4).
    ``fmt`` (a name or a format entry) picks the model (default: the export's format the table prefers for bundles, ONNX first). A model
    made for another target (its manifest's target, TorchScript quantized engine or ONNX
    quantization settings) is refused unless ``force``, which records the override in
    bundle.json. ``wheels`` downloads the target platform's wheels (network). ``platform``
    overrides the target's python platform tag; ``created`` pins the timestamp (a bundle built
    twice from the same export with the same ``created`` is byte-identical). Returns ``out``;
    the archive is ``tarball_path(out)`` (not written when ``archive`` is False).
    ``runtime`` "python" ships the board package and pinned requirements; "native" ships
    ``edgekit-run`` built for the target (``edgekit.bundle.native``: no Python on the board).
    """
    if runtime not in native.RUNTIMES:
        raise UsageError(f"unknown runtime {runtime!r}; choose from: {', '.join(native.RUNTIMES)}")
    progress = progress or (lambda message: None)
    folder, manifest = load_manifest(export_dir)

    is_llm = is_cached_family(manifest)
    if is_llm:  # its program runs on edgekit-run only: the board's Python runtimes have no token loop
        if manifest.kind not in ("export", "quantized") or not manifest.formats():
            raise UsageError(f"{folder} is a language-model {manifest.kind}; export or quantize it first "
                             f"(edgekit quantize {folder} --method int4)")
        runtime = "native"
    elif manifest.kind != "export":
        raise UsageError(f"{folder} is a {manifest.kind} artifact; export it first (edgekit export {folder})")
    tgt = target if isinstance(target, Target) else load_target(target or manifest.target or "rpi4")
    entry, spec = _pick(manifest, fmt, native_only=runtime == "native")  # the format, resolved once for every step
    if runtime == "native":
        native.check_native(spec, tgt)
        if wheels:
            raise UsageError("--wheels applies to Python bundles; a native bundle installs nothing on the board")
    llm = handlers.handler(handlers.LANGUAGE_MODEL_BUNDLE) if is_llm else None
    if llm is not None:
        llm.check_program(folder, entry)
    reference = folder / layout.REFERENCE
    if not is_llm and not reference.is_file():
        raise InputFileError(f"{reference} is missing; export the model again to create it")
    mismatches = check_target(folder, manifest, entry, spec, tgt, force)
    too_big = check_model_fits(tgt, entry.total_bytes, spec, f"{folder / entry.path}", force,
                               native=runtime == "native")
    if too_big:
        mismatches = [*mismatches, too_big]
    spec.ops().check_file(folder / entry.path)  # a file the runtime cannot load is the export's fault: say so now
    llm_data = llm.check_data(folder, manifest, entry, progress) if llm is not None else None
    created = created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    mtime = _epoch(created)
    inputs = [folder, tgt.source if tgt.source and Path(tgt.source).is_file() else None]
    with claim_output(out, "bundle", inputs=inputs, force=force) as out:
        archive_path = _check_archive(out, inputs, force)
        clean_stale_temps(archive_path)  # an archive a killed run had staged
        pins = None if runtime == "native" else pin(spec, platform or tgt.python_platform, python_version)
        if pins is not None and spec.board.check_wheel:
            check_wheel_exists(pins.runtime["name"], pins.runtime["version"], pins.platform, pins.python_version)
        job = BundleJob(folder=folder, manifest=manifest, entry=entry, spec=spec, target=tgt, out=out,
                        archive_path=archive_path, staged_archive=temp_sibling(archive_path) if archive else None,
                        pins=pins, wheels=wheels, mismatches=tuple(mismatches), created=created, mtime=mtime,
                        progress=progress, force=force, llm_data=llm_data)
        try:
            _build(job)
        finally:
            if job.staged_archive is not None:
                with contextlib.suppress(FileNotFoundError):
                    job.staged_archive.unlink()
    return out


def _build(job: BundleJob) -> None:
    """Build the bundle folder and its archive under temporary names, then commit them: the old
    archive goes first (it no longer matches), the folder swaps in, the new archive is renamed
    in right after (two renames apart). A kill at any moment never leaves an archive that
    disagrees with the folder beside it: at worst a folder whose archive is missing."""

    def commit_archive() -> None:
        if job.staged_archive is not None:
            os.replace(job.staged_archive, job.archive_path)

    folder, entry = job.folder, job.entry
    with atomic_dir(job.out, then=commit_archive) as work:
        shutil.copyfile(folder / entry.path, work / job.model_name)
        data_files = []
        for data in entry.data_files:  # the graph names its data file: it keeps that name
            name = Path(data["path"]).name
            shutil.copyfile(folder / data["path"], work / name)
            data_files.append({**data, "path": name})
        details = dict(entry.details or {})
        if job.native and details.get("variant"):  # the native runtime is a variant of its own in every table
            details["variant"] = f"{details['variant']}-native"
        bundled = replace(job.manifest, files=(replace(entry, path=job.model_name, data_files=data_files,
                                                       details=details),))
        write_json(work / layout.MANIFEST, bundled.to_dict())
        if job.llm_data is not None:
            info = _llm_files(job, work)
        elif job.native:
            shutil.copyfile(folder / layout.REFERENCE, work / layout.REFERENCE)
            info = _native_files(job, work)
        else:
            shutil.copyfile(folder / layout.REFERENCE, work / layout.REFERENCE)
            info = _python_files(job, work)
        if job.llm_data is None:
            readme = native_readme_text if job.native else readme_text
            write_text(work / layout.README, readme(info, job.out.name, job.target.description))
        info["bytes_on_disk"] = native.bundle_size(work)  # without bundle.json and SHA256SUMS themselves
        write_json(work / layout.BUNDLE_JSON, info)
        write_checksums(work)
        if job.staged_archive is not None:
            write_archive(work, job.staged_archive, job.out.name, mtime=job.mtime)
        with contextlib.suppress(FileNotFoundError):
            job.archive_path.unlink()  # the previous archive (ours: _check_archive proved it)


def _native_files(job: BundleJob, work: Path) -> dict:
    """edgekit-run, its libraries, run.sh and the notices; the bundled runner's check on this host; bundle.json's content."""
    extra = native.add_native(work, job.spec, job.target, job.entry.precision, job.progress)
    info = _bundle_info(job)
    info.update(extra)
    info["host_check"] = native.host_check(work, job.model_name, job.spec.name, job.target)
    return info


def _llm_files(job: BundleJob, work: Path) -> dict:
    """A language model's native files and README (``edgekit.llm.bundle``); bundle.json's content."""
    llm = handlers.handler(handlers.LANGUAGE_MODEL_BUNDLE)
    model_name, tgt = job.model_name, job.target
    llm.write_reference(work / layout.REFERENCE, job.llm_data)
    extra = native.add_native(work, job.spec, tgt, job.entry.precision, job.progress,
                              script=llm.run_script(model_name, tgt, job.llm_data))
    host = llm.host_run(work, model_name, job.llm_data, job.progress)
    too_big = llm.memory_mismatch(tgt, host.get("peak_rss_mb"))
    if too_big and not job.force:
        raise ResourceLimitError(f"{too_big}; pass --force to bundle it anyway")
    info = _bundle_info(job, mismatches=(*job.mismatches, *([too_big] if too_big else [])))
    info.update(extra)
    info["llm"] = job.llm_data
    info["host_check"] = host
    write_text(work / layout.README, llm.readme_text(info, job.out.name, tgt.description))
    return info


def _python_files(job: BundleJob, work: Path) -> dict:
    """The board package, its entries, pinned requirements (and wheels, serve.py); bundle.json's content."""
    pins = job.pins
    board_files.install(work, entries=(layout.RUNNER, layout.CHECK_OUTPUTS), formats=(job.spec.name,))
    write_text(work / layout.REQUIREMENTS, pins.text())
    serving = None
    if job.spec.board.standalone_server:  # serve.py: FastAPI + uvicorn + the runtime, no edgekit
        from edgekit.bundle.serving import add_serving

        serving = add_serving(work, pins)
    wheel_names = []
    if job.wheels:
        wheel_names = download_wheels(work / layout.REQUIREMENTS, work / layout.WHEELS_DIR,
                                      pins.platform, pins.python_version, no_deps=pins.no_deps)
        if serving is not None:  # serve.py's stack too, into the same folder (offline boards serve as well)
            from edgekit.bundle.serving import SERVE_REQUIREMENTS

            wheel_names = download_wheels(work / SERVE_REQUIREMENTS, work / layout.WHEELS_DIR,
                                          pins.platform, pins.python_version)
    info = _bundle_info(job, wheel_names)
    if serving is not None:
        info["serve"] = serving
    info["host_check"] = python_check(work, job.model_name, job.spec.name)
    return info


def _check_archive(out: Path, inputs: list, force: bool) -> Path:
    """``<out>.tar.gz`` may be replaced only when it is the archive of an edgekit bundle."""
    archive = tarball_path(out)
    check_not_inputs(archive, inputs, "--out's archive")
    if archive.is_symlink() or (archive.exists() and not archive.is_file()):
        raise UsageError(f"{safe_text(archive)} exists and is not a plain file; remove it or choose another --out")
    if archive.exists() and not force and not is_bundle_archive(archive, out.name):
        raise UsageError(
            f"{safe_text(archive)} exists and is not an edgekit bundle archive; choose another --out, move it, "
            "or pass --force to replace it"
        )
    return archive


def _pick(manifest: Manifest, fmt: str | formats.Format | None,
          native_only: bool = False) -> tuple[ModelFile, formats.Format]:
    """The model file to bundle and its format (``fmt``, else the one the table prefers for bundles)."""
    if fmt is not None:
        spec = fmt if isinstance(fmt, formats.Format) else formats.get(fmt)
        return manifest.file(spec.name), spec
    present = manifest.formats()
    if native_only:  # --runtime native: the model the native runner runs, when the export has one
        present = [name for name in present if formats.get(name).board.native_runner] or present
    chosen = formats.preferred(present)
    if chosen is None:
        raise InputFileError(f"the export holds no model file of a known format (it has: {', '.join(manifest.formats()) or 'none'}; "
                             f"formats: {', '.join(formats.names())})")
    return manifest.file(chosen), formats.get(chosen)


def _bundle_info(job: BundleJob, wheel_names=(), mismatches: tuple[str, ...] | None = None) -> dict:
    """bundle.json's content (``mismatches``: what --force overrode, default the job's)."""
    folder, manifest, entry, spec, tgt, pins = job.folder, job.manifest, job.entry, job.spec, job.target, job.pins
    created = job.created
    mismatches = list(job.mismatches if mismatches is None else mismatches)
    details = entry.details or {}
    engine = details.get("quantized_engine")  # torch.ao int8 TorchScript: the engine its weights were packed for
    return {
        "schema": layout.BUNDLE_SCHEMA,
        "schema_version": layout.BUNDLE_SCHEMA_VERSION,
        "target": tgt.name,
        "arch": tgt.arch,
        "threads": tgt.threads,
        "ram_mb": tgt.ram_mb,
        "memory_estimate_mb": round(model_memory_mb(entry.total_bytes, spec, native=pins is None), 1),
        "python_platform": pins.platform if pins else None,
        "python_version": pins.python_version if pins else None,
        "model": spec.files.file_name,
        "model_sha256": entry.sha256,
        "model_bytes": entry.total_bytes,
        "model_data_files": [Path(d["path"]).name for d in entry.data_files],
        "format": entry.format,
        "precision": entry.precision,
        "variant": details.get("variant", "") + ("" if pins or not details.get("variant") else "-native"),
        "runtime": pins.runtime if pins else None,
        "quantized_engine": engine,
        "requirements": list(pins.requirements) if pins else [],
        "pip_no_deps": pins.no_deps if pins else False,
        "wheels": list(wheel_names),
        "override": {"forced": True, "made_for": manifest.target, "mismatches": mismatches} if mismatches else None,
        "source": {"path": str(folder.resolve()), "model": entry.path,
                   "manifest_sha256": sha256_file(folder / layout.MANIFEST)},
        "edgekit_version": __version__,
        "created": created,
    }


def _epoch(created: str) -> int:
    try:
        stamp = _dt.datetime.fromisoformat(created)
    except ValueError:
        raise UsageError(f"created {created!r} is not an ISO 8601 time") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=_dt.timezone.utc)
    return max(0, int(stamp.timestamp()))
