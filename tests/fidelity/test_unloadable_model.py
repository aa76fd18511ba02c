"""A model file the board's runtime cannot open is one clear error naming the file and the runtime's reason."""

from __future__ import annotations

import pytest

from edgekit.core.errors import InputFileError
from edgekit.fidelity.assess import runtime_runner


def test_an_unloadable_onnx_file_is_an_input_error_with_the_runtimes_reason(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"not a protobuf at all")
    with pytest.raises(InputFileError) as raised:
        runtime_runner("onnx", path, ["x"])
    message = str(raised.value)
    assert message.startswith(f"{path} is not a loadable onnx model (")
    assert "\n" not in message and len(message) > len(f"{path} is not a loadable onnx model ()")
