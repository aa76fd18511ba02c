"""Which of ExecuTorch's shared libraries a program needs, and the notices that travel with them.

A program fully delegated to XNNPACK needs the runtime, the XNNPACK backend and its thread pool.
Operators outside the delegate need the library that registers them: the operator names a
program lists are looked up in the libraries themselves (each registers its kernels by name).
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.errors import UsageError
from edgekit.native.build import KERNELS, LINKED, NativeRunner
from edgekit.native.program import read_methods

BACKENDS = {"XnnpackBackend": "libexecutorch_backend_xnnpack.so"}
NOTICES_DIR = Path(__file__).resolve().parent / "notices"
# What the shipped libraries are built from, beyond ExecuTorch itself (its licence comes from the
# wheel): (component, upstream, licence file under notices/, copyright lines, the libraries holding
# it, found by their symbols). The wheel carries none of these notices; a bundle that ships them must.
_XNN = ("libexecutorch_backend_xnnpack.so",)
_POOL = ("libexecutorch_threadpool.so", "libexecutorch_backend_xnnpack.so", "libexecutorch_kernels_optimized.so")
THIRD_PARTY = (
    ("XNNPACK", "https://github.com/google/XNNPACK", "BSD-3-Clause.txt",
     ("Copyright (c) Facebook, Inc. and its affiliates.", "Copyright 2019 Google LLC"), _XNN),
    ("cpuinfo", "https://github.com/pytorch/cpuinfo", "BSD-2-Clause.txt",
     ("Copyright (c) 2019 Google LLC", "Copyright (c) 2017-2018 Facebook Inc.",
      "Copyright (C) 2012-2017 Georgia Institute of Technology", "Copyright (C) 2010-2012 Marat Dukhan"), _POOL),
    ("pthreadpool", "https://github.com/google/pthreadpool", "BSD-2-Clause.txt",
     ("Copyright 2019 Google LLC", "Copyright (c) 2017 Facebook Inc.",
      "Copyright (c) 2015-2017 Georgia Institute of Technology", "Copyright (C) 2010-2015 Marat Dukhan"), _POOL),
    ("FP16", "https://github.com/Maratyszcza/FP16", "MIT.txt",
     ("Copyright (c) 2017 Facebook Inc.", "Copyright (c) 2017 Georgia Institute of Technology",
      "Copyright 2019 Google LLC"), _XNN),
    ("FXdiv", "https://github.com/Maratyszcza/FXdiv", "MIT.txt",
     ("Copyright (c) 2017 Facebook Inc.", "Copyright (c) 2016-2017 Marat Dukhan"), _POOL),
    ("KleidiAI", "https://gitlab.arm.com/kleidi/kleidiai", "Apache-2.0.txt",
     ("Copyright 2024-2025 Arm Limited and/or its affiliates",), _XNN),
    ("FlatBuffers", "https://github.com/google/flatbuffers", "Apache-2.0.txt", ("Copyright 2014 Google Inc.",),
     ("libexecutorch.so", "libexecutorch_backend_xnnpack.so")),
    ("Eigen", "https://gitlab.com/libeigen/eigen", "MPL-2.0.txt", ("Copyright (C) Eigen authors",),
     ("libexecutorch_kernels_optimized.so",)),
)


def needed_libraries(program: str | Path, runner: NativeRunner) -> tuple[str, ...]:
    """The library file names ``program``'s methods need, among those built with ``runner``.

    UsageError when the program names a backend or an operator none of them provides."""
    needed = list(LINKED)
    registered = {name: _registered(runner.library(name)) for name in (*LINKED, *KERNELS)}
    for method in read_methods(program):
        for backend in method.delegates:
            if backend not in BACKENDS:
                raise UsageError(f"{program} delegates to {backend}; the native runtime has {', '.join(BACKENDS)} only")
        for operator in method.operators:
            home = next((name for name, ops in registered.items() if operator.encode() + b"\x00" in ops), None)
            if home is None:
                raise UsageError(f"{program} needs the operator {operator}, which no ExecuTorch library of "
                                 f"version {runner.dist.version} registers; the native runtime cannot run it")
            if home not in needed:
                needed.append(home)
    return tuple(needed)


def _registered(library: Path) -> bytes:
    """The library's bytes (operator names are NUL-terminated strings in it); empty when absent."""
    try:
        return library.read_bytes()
    except OSError:
        return b""


def notices_text(runner: NativeRunner, libraries: tuple[str, ...]) -> str:
    """THIRD_PARTY_NOTICES for a bundle shipping ``libraries``: ExecuTorch's licence and each component's."""
    parts = [f"edgekit-run and the libraries in lib/ ({', '.join(libraries)}) are built from ExecuTorch "
             f"{runner.dist.version} and the projects below. Their licences:\n"]
    license_file = runner.dist.license
    executorch = license_file.read_text(encoding="utf-8") if license_file and license_file.is_file() else ""
    parts.append(f"== ExecuTorch (https://github.com/pytorch/executorch), BSD-3-Clause ==\n\n{executorch.strip()}\n")
    for component, upstream, licence, holders, holding in THIRD_PARTY:
        if not set(holding) & set(libraries):
            continue
        text = (NOTICES_DIR / licence).read_text(encoding="utf-8").strip()
        parts.append(f"== {component} ({upstream}), {licence.removesuffix('.txt')} ==\n\n"
                     + "\n".join(holders) + f"\n\n{text}\n")
    return "\n".join(parts)
