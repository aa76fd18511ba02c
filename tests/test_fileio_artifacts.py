import json

import pytest

from edgekit.formats.artifacts import InputSpec, Manifest, describe_file, finalize, load_manifest
from edgekit.core.errors import EdgekitError, InputFileError
from edgekit.core.fileio import atomic_dir, write_json


def test_atomic_dir_keeps_previous_on_failure(tmp_path):
    final = tmp_path / "art"
    with atomic_dir(final) as work:
        (work / "a.txt").write_text("v1")
    with pytest.raises(RuntimeError):
        with atomic_dir(final) as work:
            (work / "a.txt").write_text("half")
            raise RuntimeError("killed")
    assert (final / "a.txt").read_text() == "v1"
    assert [p.name for p in tmp_path.iterdir()] == ["art"]  # no temp folders left behind


def test_atomic_write_leaves_no_temp_and_normal_mode(tmp_path):
    path = write_json(tmp_path / "x.json", {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)


def test_unwritable_output(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(EdgekitError, match="cannot create output folder"):
        with atomic_dir(blocker / "sub" / "art"):
            pass


def _manifest(folder):
    (folder / "m.bin").write_bytes(b"12345")
    return Manifest(
        kind="checkpoint",
        model={"name": "digits-cnn", "config": {}},
        inputs=(InputSpec("input", (None, 1, 8, 8), "float32", {0: "batch"}),),
        outputs=("logits",),
        files=(describe_file(folder, "m.bin", "checkpoint"),),
    )


def test_manifest_round_trip_and_checksum(tmp_path):
    written = finalize(_manifest(tmp_path), tmp_path)
    folder, loaded = load_manifest(tmp_path)
    assert loaded == written
    assert loaded.inputs[0].concrete_shape(batch=7) == (7, 1, 8, 8)
    assert loaded.files[0].bytes == 5 and loaded.versions["edgekit"]
    (tmp_path / "m.bin").write_bytes(b"12346")
    with pytest.raises(InputFileError, match="does not match its manifest checksum"):
        load_manifest(tmp_path)


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"schema_version": 99}, "schema version 99"),
        ({"schema": "other"}, "not an edgekit manifest"),
        ({"kind": "weird"}, "malformed"),
        ({"files": [{"path": "../../etc/passwd", "format": "onnx", "sha256": "", "bytes": 1}]}, "escapes"),
    ],
)
def test_bad_manifests(tmp_path, patch, message):
    finalize(_manifest(tmp_path), tmp_path)
    data = json.loads((tmp_path / "manifest.json").read_text())
    data.update(patch)
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(InputFileError, match=message):
        load_manifest(tmp_path)


def test_truncated_manifest(tmp_path):
    (tmp_path / "manifest.json").write_text('{"schema": "edgekit.man')
    with pytest.raises(InputFileError, match="not valid JSON"):
        load_manifest(tmp_path)
