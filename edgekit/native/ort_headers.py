"""ONNX Runtime's C API header (API 21 or later), what the ONNX Runtime backend of ``edgekit-run`` compiles against.

The onnxruntime wheel ships no headers. Debian 13 (trixie) packages them in ``libonnxruntime-dev``
(``onnxruntime_c_api.h``: one header, the same for every architecture). Where this host has them
installed (``/usr/include/onnxruntime``) they are used; otherwise the package is fetched once with
a private apt configuration (its own sources.list naming trixie, its own state and cache folders
in edgekit's cache; the system's sources and package state are never touched; apt checks the
archive's signature with the system's keyring), unpacked with ``dpkg-deb -x`` and cached.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from edgekit.core.errors import EdgekitError
from edgekit.core.cache import entry_dir
from edgekit.native.build import _locked

HEADER = "onnxruntime_c_api.h"
API_VERSION = 21  # what ort_library.cpp asks GetApi for
SYSTEM_INCLUDE = Path("/usr/include/onnxruntime")
PACKAGE = "libonnxruntime-dev"
SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
READY = "ready.json"
APT_TIMEOUT_S = 600.0
Progress = Callable[[str], None]
_API_LINE = re.compile(rb"^#define ORT_API_VERSION (\d+)\s*$", re.MULTILINE)


def api_version(folder: Path) -> int | None:
    """The ``ORT_API_VERSION`` the header in ``folder`` declares; None without a readable header."""
    try:
        found = _API_LINE.search((folder / HEADER).read_bytes()[:1 << 20])
    except OSError:
        return None
    return int(found.group(1)) if found else None


def ort_include(progress: Progress | None = None) -> Path:
    """The folder holding ``onnxruntime_c_api.h`` of API ``API_VERSION`` or later."""
    progress = progress or (lambda message: None)
    if (api_version(SYSTEM_INCLUDE) or 0) >= API_VERSION:
        return SYSTEM_INCLUDE

    entry = entry_dir("native", f"onnxruntime-headers-{SUITE}")
    include = entry / "include"
    if _ready(entry) and (api_version(include) or 0) >= API_VERSION:
        return include

    with _locked(entry / ".fetch.lock"):
        if _ready(entry) and (api_version(include) or 0) >= API_VERSION:
            return include
        _fetch(entry, progress)
    return include


def _ready(entry: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads((entry / READY).read_text(encoding="utf-8"))
        return isinstance(doc, dict) and doc.get("schema") == "edgekit.onnxruntime-headers"
    return False


def _fetch(entry: Path, progress: Progress) -> None:
    tools = {name: shutil.which(name) for name in ("apt-get", "dpkg-deb")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        raise EdgekitError(f"ONNX Runtime's C headers come from Debian 13's {PACKAGE}, fetched with apt; this host has "
                           f"no {' or '.join(missing)}: install {PACKAGE} (Debian 13, Ubuntu 25.04) and build again")
    progress(f"fetching {PACKAGE} from Debian {SUITE} for ONNX Runtime's C headers (private apt configuration, once: "
             f"cached in {entry})")
    with tempfile.TemporaryDirectory(prefix=".fetch.", dir=entry) as tmp:
        work = Path(tmp)
        for folder in ("etc/sources.list.d", "etc/preferences.d", "state/lists/partial", "cache/archives/partial",
                       "deb", "unpacked"):
            (work / folder).mkdir(parents=True)
        (work / "etc" / "sources.list").write_text(f"deb {MIRROR} {SUITE} main\n", encoding="utf-8")
        (work / "state" / "status").write_text("", encoding="utf-8")
        options = []
        for key, value in (("Dir::Etc::SourceList", work / "etc" / "sources.list"),
                           ("Dir::Etc::SourceParts", work / "etc" / "sources.list.d"),
                           ("Dir::Etc::Preferences", work / "etc" / "preferences"),
                           ("Dir::Etc::PreferencesParts", work / "etc" / "preferences.d"),
                           ("Dir::State", work / "state"), ("Dir::State::status", work / "state" / "status"),
                           ("Dir::Cache", work / "cache"), ("Debug::NoLocking", "1"),
                           ("APT::Sandbox::User", "root" if os.geteuid() == 0 else os.environ.get("USER", "nobody"))):
            options += ["-o", f"{key}={value}"]
        apt = [tools["apt-get"], "-q", *options]
        _run([*apt, "update"], "apt-get update (Debian trixie's package list)")
        _run([*apt, "download", PACKAGE], f"apt-get download {PACKAGE}", cwd=work / "deb")
        debs = sorted((work / "deb").glob(f"{PACKAGE}_*.deb"))
        if len(debs) != 1:
            raise EdgekitError(f"apt-get download {PACKAGE} gave {[p.name for p in debs]}, not one package")
        _run([tools["dpkg-deb"], "-x", str(debs[0]), str(work / "unpacked")], f"dpkg-deb -x {debs[0].name}")
        headers = work / "unpacked" / "usr" / "include" / "onnxruntime"
        version = api_version(headers)
        if version is None or version < API_VERSION:
            raise EdgekitError(f"{debs[0].name} holds C API {version}, not {API_VERSION} or later")
        staged = work / "include"
        shutil.copytree(headers, staged, symlinks=False)
        final = entry / "include"
        if final.exists():
            shutil.rmtree(final)
        os.replace(staged, final)
        from edgekit.core.fileio import write_json

        write_json(entry / READY, {"schema": "edgekit.onnxruntime-headers", "package": debs[0].name,
                                   "suite": SUITE, "api_version": version})


def _run(argv: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL, cwd=cwd, env={**os.environ, "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        raise EdgekitError(f"{what} did not finish within {APT_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip().startswith(("E:", "dpkg-deb"))]
        why = lines[0] if lines else (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise EdgekitError(f"{what} failed (Debian's archive must be reachable once; it is cached after): {why[:300]}")
