"""``native.wheel.unpack_pinned``, the one unpacking step of the ExecuTorch and ONNX Runtime wheels that
native builds use: a wheel whose SHA-256 differs from the pinned one is removed and refused, and a good
one replaces ``dist`` whole (nothing of an older unpacking is left beside it)."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from edgekit.core.errors import EdgekitError
from edgekit.native.wheel import unpack_pinned


def _wheel(folder):
    wheel = folder / "dist-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("lib/libx.so", b"\x7fELF")
    return wheel


def test_a_substituted_wheel_is_removed_and_refused(tmp_path):
    wheel = _wheel(tmp_path)
    with pytest.raises(EdgekitError, match="not the 0{64} edgekit pins"):
        unpack_pinned(wheel, tmp_path, "0" * 64, lambda dest: None, wheel.name, lambda message: None)
    assert not wheel.exists() and not (tmp_path / "dist").exists()


def test_a_pinned_wheel_replaces_dist_whole(tmp_path):
    wheel = _wheel(tmp_path)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "stale.so").write_bytes(b"old")

    def extract(dest):
        with zipfile.ZipFile(wheel) as archive:
            (dest / "libx.so").write_bytes(archive.read("lib/libx.so"))

    said = []
    assert unpack_pinned(wheel, tmp_path, digest, extract, wheel.name, said.append) == digest
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == ["libx.so"]
    assert (tmp_path / "dist" / "libx.so").read_bytes() == b"\x7fELF"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dist.")]  # no staging folder left
    assert said == [f"unpacking {wheel.name} (SHA-256 {digest[:12]}...)"]
