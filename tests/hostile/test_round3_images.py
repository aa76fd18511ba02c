"""A calibration image is opened only by the decoder its name allows, and only when its first bytes
say it is that kind of file (round three: an EPS named .png started Ghostscript, a TIFF named .png
was accepted). A ``gs`` first on PATH records any start; none may happen."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import one_line_error
from corpus.hostile import leftovers
from edgekit.cli.app import app
from edgekit.core.errors import InputFileError
from edgekit.userdata.images import open_image

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

runner = CliRunner()
EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nnewpath 0 0 moveto 8 8 lineto stroke\nshowpage\n"


def _encoded(fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(buffer, format=fmt)
    return buffer.getvalue()


def _conv_model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["logits"])]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4, 1, 1])],
                              [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture()
def fake_gs(tmp_path, monkeypatch):
    """A ``gs`` first on PATH that leaves a marker when anything starts it."""
    folder = tmp_path / "bin"
    folder.mkdir()
    marker = tmp_path / "GS_STARTED"
    script = folder / "gs"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return marker


# (file name, its bytes, a fragment of the refusal)
MISNAMED = [
    ("eps.png", EPS, "is named .png but is not a PNG, JPEG, BMP or WebP file"),
    ("eps.jpg", EPS, "is named .jpg but is not a PNG, JPEG, BMP or WebP file"),
    ("tiff.png", "TIFF", "is named .png but is not a PNG, JPEG, BMP or WebP file"),
    ("gif.jpg", "GIF", "is named .jpg but is not a PNG, JPEG, BMP or WebP file"),
    ("pdf.png", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\n", "is named .png but is not"),
    ("png.jpg", "PNG", "is named .jpg but is a PNG file"),
    ("jpeg.png", "JPEG", "is named .png but is a JPEG file"),
    ("bmp.webp", "BMP", "is named .webp but is a BMP file"),
    ("empty.png", b"", "is named .png but is not"),
]


@pytest.mark.parametrize("name, content, fragment", MISNAMED, ids=[m[0] for m in MISNAMED])
def test_a_file_whose_name_and_content_disagree_is_refused(tmp_path, fake_gs, name, content, fragment):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else _encoded(content))
    with pytest.raises(InputFileError, match=fragment.replace(".", r"\.")):
        open_image(path)
    assert not fake_gs.exists()


@pytest.mark.parametrize("name, fmt", [("a.png", "PNG"), ("a.jpg", "JPEG"), ("a.jpeg", "JPEG"), ("a.bmp", "BMP"),
                                       ("a.WEBP", "WEBP")])
def test_each_documented_kind_opens_by_its_own_decoder(tmp_path, name, fmt):
    path = tmp_path / name
    path.write_bytes(_encoded(fmt))
    with open_image(path) as img:
        assert img.format == fmt and img.size == (8, 8)


@pytest.mark.parametrize("name, content", [("eps.png", EPS), ("tiff.png", "TIFF"), ("gif.jpg", "GIF")])
def test_a_calibration_folder_with_a_disguised_file_is_one_line_and_starts_nothing(tmp_path, fake_gs, name, content):
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(3):
        (photos / f"img{i}.png").write_bytes(_encoded("PNG"))
    (photos / name).write_bytes(content if isinstance(content, bytes) else _encoded(content))
    model = _conv_model(tmp_path / "net.onnx")
    result = runner.invoke(app, ["quantize", str(model), "--method", "static", "--calib", str(photos),
                                 "--calib-preprocess", "resize=8,crop=8", "--out", str(tmp_path / "q")])
    line = one_line_error(result, 2)
    assert name in line and "is named" in line
    assert not fake_gs.exists()
    assert leftovers(tmp_path, "q") == [] and not (tmp_path / "q").exists()
