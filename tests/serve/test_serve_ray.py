"""`edgekit serve --ray`: the same app as a Ray Serve deployment on a local Ray instance."""

from __future__ import annotations

import signal
import socket
import sys

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("ray.serve")

from edgekit.core import process  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_ray_serve_two_replicas_answer_like_local_inference_and_stop_on_sigterm(digits_fp32_export):
    import onnxruntime as ort

    port = free_port()
    proc = process.spawn([sys.executable, "-m", "edgekit", "serve", str(digits_fp32_export), "--ray", "--replicas", "2",
                          "--port", str(port), "--threads", "1"])
    try:
        url = process.wait_ready(proc, 150)
        assert url == f"http://127.0.0.1:{port}" and any("2 replicas" in line for line in proc.lines)
        session = ort.InferenceSession(str(digits_fp32_export / "model.onnx"), providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).uniform(0, 16, size=(8, 1, 8, 8)).astype(np.float32)
        with httpx.Client(timeout=60) as client:
            for i in range(8):
                answer = client.post(f"{url}/v1/predict", json={"inputs": x[i:i + 1].tolist()})
                assert answer.status_code == 200, answer.text
                np.testing.assert_array_equal(np.asarray(answer.json()["outputs"]["logits"], dtype=np.float32),
                                              session.run(None, {"input": x[i:i + 1]})[0])
            bad = client.post(f"{url}/v1/predict", json={"inputs": [[1.0]]})
            assert bad.status_code == 422 and bad.json()["input"] == "input"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
    assert code == 0, proc.lines[-10:]
