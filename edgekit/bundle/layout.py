"""Names inside a bundle folder (the layout is described in ``edgekit.bundle``), and bundle.json."""

from __future__ import annotations

import re
from pathlib import Path

from edgekit import formats
from edgekit.core.errors import InputFileError
from edgekit.core.fileio import read_json
from edgekit.native.toolchain import CPU_NAME, CROSS

BUNDLE_SCHEMA = "edgekit.bundle"
BUNDLE_SCHEMA_VERSION = 1

BUNDLE_JSON = "bundle.json"
MANIFEST = "manifest.json"
REFERENCE = "reference.npz"
RUNNER = "runner.py"
CHECK_OUTPUTS = "check_outputs.py"
REQUIREMENTS = "requirements.txt"
README = "README.txt"
CHECKSUMS = "SHA256SUMS"
WHEELS_DIR = "wheels"

DEFAULT_PYTHON_VERSION = "3.11"  # Raspberry Pi OS bookworm's python3


def is_bundle(folder: str | Path) -> bool:
    return (Path(folder) / BUNDLE_JSON).is_file()


def read_bundle_json(folder: str | Path) -> dict:
    """bundle.json of ``folder``, checked for schema, version and the fields edgekit relies on."""
    folder = Path(folder)
    info = read_json(folder / BUNDLE_JSON, "bundle description")
    where = folder / BUNDLE_JSON
    if info.get("schema") != BUNDLE_SCHEMA:
        raise InputFileError(f"{where} is not an edgekit bundle description")
    if info.get("schema_version") != BUNDLE_SCHEMA_VERSION:
        raise InputFileError(
            f"{where} has bundle schema version {info.get('schema_version')!r}; "
            f"this edgekit reads version {BUNDLE_SCHEMA_VERSION}"
        )
    for key, kind in (("model", str), ("format", str), ("target", str), ("model_sha256", str)):
        if not isinstance(info.get(key), kind):
            raise InputFileError(f"{where} is malformed: {key!r} missing or not a {kind.__name__}")
    model = Path(info["model"])
    if (model.is_absolute() or len(model.parts) != 1 or info["model"] in ("", ".", "..")
            or not info["model"].isprintable() or len(info["model"]) > 255):
        raise InputFileError(f"{where} is malformed: model {info['model']!r} must be a file name in the bundle")
    if info["format"] not in formats.names():
        raise InputFileError(f"{where} is malformed: format {info['format']!r} not in {', '.join(formats.names())}")
    # strings that reach file names, README.txt and command lines are plain tokens
    for key in ("target", "variant", "python_platform", "precision", "arch", "quantized_engine"):
        value = info.get(key)
        if key != "target" and value in (None, ""):
            continue
        if not isinstance(value, str) or not _TOKEN.fullmatch(value):
            raise InputFileError(f"{where} is malformed: {key} {str(value)[:60]!r} must be 1-64 of A-Z a-z 0-9 . _ -")
    threads = info.get("threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024):
        raise InputFileError(f"{where} is malformed: threads {threads!r} must be an integer between 1 and 1024")
    if "native" in info:
        _check_native(info["native"], where)
    return info


_NATIVE_TEXT = ("compiler", "executorch_version", "executorch_source", "executorch_wheel_sha256", "build_key")


def _check_native(native, where: Path) -> None:
    """A native bundle's ``native`` section: the values that pick a compiler, an emulated CPU, the
    files a board runs and the lines of README.txt, each in the form ``bundle.native`` writes."""
    def bad(key: str, value, rule: str):
        raise InputFileError(f"{where} is malformed: native {key} {str(value)[:60]!r} {rule}")

    if not isinstance(native, dict):
        raise InputFileError(f"{where} is malformed: native must be an object, not {type(native).__name__}")
    if native.get("runner") != "edgekit-run":
        bad("runner", native.get("runner"), "must be 'edgekit-run'")
    if native.get("entry") != "run.sh":
        bad("entry", native.get("entry"), "must be 'run.sh'")
    arch = native.get("arch")
    if not isinstance(arch, str) or arch not in CROSS:
        bad("arch", arch, f"must be one of {', '.join(CROSS)}")
    cpu = native.get("cpu")
    if cpu is not None and (not isinstance(cpu, str) or not CPU_NAME.match(cpu)):
        bad("cpu", cpu, "must be a CPU name such as cortex-a72 (a-z 0-9 . + _ -) or null")
    libraries = native.get("libraries")
    if not isinstance(libraries, list) or len(libraries) > 64:
        bad("libraries", libraries, "must be a list of lib/NAME.so paths")
    for item in libraries:
        if not isinstance(item, str) or not _LIBRARY.fullmatch(item):
            bad("library", item, "must be lib/NAME.so (a file name of A-Z a-z 0-9 . _ - in lib/)")
    for key in _NATIVE_TEXT:
        value = native.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > 200 or not value.isprintable()):
            bad(key, value, "must be printable text of at most 200 characters, or null")


_LIBRARY = re.compile(r"lib/[A-Za-z0-9_][A-Za-z0-9._-]{0,99}\.so(\.[0-9]+)*")


_TOKEN = re.compile(r"[A-Za-z0-9._-]{1,64}")  # with fullmatch: "$" would let a trailing newline through
