"""`edgekit serve` through a real uvicorn server (a child process on 127.0.0.1, a free port) and a
real HTTP client (httpx): outputs, concurrency, back-pressure, bad input, SIGTERM, API keys."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from edgekit.core import process  # noqa: E402


def npz_body(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def npy_body(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def digits_onnx(digits_fp32_export):
    return digits_fp32_export / "model.onnx"


@pytest.fixture(scope="module")
def local(digits_onnx):
    """Bare onnxruntime on the same file: the reference every answer is compared with."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(digits_onnx), providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"input": x})[0]


@pytest.fixture(scope="module")
def server(digits_fp32_export):
    with process.local_server(digits_fp32_export, ["--threads", "1"]) as url:
        yield url


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 16, size=(n, 1, 8, 8)).astype(np.float32)


def test_outputs_equal_local_inference(server, local):
    x = images(3)
    by_json = httpx.post(f"{server}/v1/predict", json={"inputs": {"input": x.tolist()}}, timeout=30)
    assert by_json.status_code == 200, by_json.text
    np.testing.assert_array_equal(np.asarray(by_json.json()["outputs"]["logits"], dtype=np.float32), local(x))
    by_npy = httpx.post(f"{server}/v1/predict", content=npy_body(x[:1]), headers={"Content-Type": "application/x-npy",
                        "Accept": "application/x-npz"}, timeout=30)
    assert by_npy.status_code == 200 and by_npy.headers["content-type"] == "application/x-npz"
    with np.load(io.BytesIO(by_npy.content)) as data:
        np.testing.assert_array_equal(data["logits"], local(x[:1]))
    info = httpx.get(f"{server}/v1/model", timeout=30).json()
    assert info["inputs"] == [{"name": "input", "dtype": "float32", "shape": [None, 1, 8, 8]}]
    assert info["batching"]["dynamic_batch_axis"] is True


def test_200_concurrent_requests_all_succeed_with_their_own_answer(server, local):
    x = images(200, seed=1)

    async def run():
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            return await asyncio.gather(*(client.post(f"{server}/v1/predict", content=npz_body(input=x[i:i + 1]),
                                                      headers={"Content-Type": "application/x-npz"}) for i in range(200)))

    answers = asyncio.run(run())
    assert [a.status_code for a in answers] == [200] * 200
    got = np.concatenate([np.asarray(a.json()["outputs"]["logits"], dtype=np.float32) for a in answers])
    np.testing.assert_allclose(got, local(x), rtol=1e-5, atol=1e-5)  # batched kernels may sum in another order
    metrics = httpx.get(f"{server}/metrics", timeout=30).text
    assert 'edgekit_requests_total{route="/v1/predict",status="200"}' in metrics
    assert "edgekit_batch_size_bucket" in metrics and "edgekit_queue_depth 0" in metrics


@pytest.mark.parametrize("body, content_type, fragment", [
    (json.dumps({"inputs": {"input": [[["a"]]]}}), "application/json", "not a rectangular array of numbers"),
    (json.dumps({"inputs": {"input": np.ones((1, 1, 8, 8), bool).tolist()}}), "application/json", "expects float32"),
    (json.dumps({"inputs": {"input": [[1.0, 2.0]]}}), "application/json", "must have 4 dimensions"),
    (json.dumps({"inputs": {"input": np.ones((1, 3, 8, 8)).tolist()}}), "application/json", "axis 1 must be 1"),
    (json.dumps({"inputs": {}}), "application/json", "missing input 'input'"),
    (json.dumps({"inputs": {"image": [1]}}), "application/json", "unknown input 'image'"),
    ('{"inputs": [1, 2', "application/json", "malformed JSON"),
    ('{"inputs": [[[[NaN]]]]}', "application/json", "NaN"),
    (json.dumps({"inputs": [[1, [2]]]}), "application/json", "not a rectangular array"),
])
def test_bad_inputs_are_422_json_naming_the_input(server, body, content_type, fragment):
    answer = httpx.post(f"{server}/v1/predict", content=body, headers={"Content-Type": content_type}, timeout=30)
    assert answer.status_code == 422, answer.text
    assert fragment in answer.json()["error"]
    if "input" in fragment:
        assert answer.json()["input"] in ("input", "image")
    assert httpx.get(f"{server}/healthz", timeout=30).status_code == 200


def test_nan_inf_in_binary_body_and_huge_claimed_shape_are_refused(server):
    x = images(1)
    x[0, 0, 0, 0] = np.inf
    answer = httpx.post(f"{server}/v1/predict", content=npy_body(x), headers={"Content-Type": "application/x-npy"}, timeout=30)
    assert answer.status_code == 422 and "NaN or infinite" in answer.json()["error"]
    # a .npy header claiming 10^12 floats, followed by 256 bytes: refused before any allocation
    header = npy_body(np.zeros((1, 1, 8, 8), np.float32))
    claimed = header.replace(b"(1, 1, 8, 8)", b"(1000000, 1, 1000, 1000)")
    answer = httpx.post(f"{server}/v1/predict", content=claimed, headers={"Content-Type": "application/x-npy"}, timeout=30)
    assert answer.status_code == 422 and "claims shape" in answer.json()["error"]
    assert httpx.post(f"{server}/v1/predict", json={"inputs": images(1).tolist()}, timeout=30).status_code == 200


def test_body_over_the_limit_is_413_and_server_keeps_serving(digits_fp32_export):
    with process.local_server(digits_fp32_export, ["--max-body-mb", "0.01", "--threads", "1"]) as url:
        big = npz_body(input=images(64))  # ~16 KiB > 10 KiB
        answer = httpx.post(f"{url}/v1/predict", content=big, headers={"Content-Type": "application/x-npz"}, timeout=30)
        assert answer.status_code == 413 and "limit" in answer.json()["error"]

        def chunks():  # no Content-Length: the limit holds while streaming
            for i in range(0, len(big), 1024):
                yield big[i:i + 1024]

        answer = httpx.post(f"{url}/v1/predict", content=chunks(), headers={"Content-Type": "application/x-npz"}, timeout=30)
        assert answer.status_code == 413
        assert httpx.post(f"{url}/v1/predict", json={"inputs": images(1).tolist()}, timeout=30).status_code == 200


def test_overload_answers_503_with_retry_after_then_recovers(digits_fp32_export):
    # One queue slot, no batching, slow calls (4096 images each): a burst must overflow the queue.
    with process.local_server(digits_fp32_export, ["--queue-size", "1", "--max-batch", "1", "--threads", "1"]) as url:
        body = npz_body(input=images(4096))

        async def burst():
            async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=40)) as client:
                return await asyncio.gather(*(client.post(f"{url}/v1/predict", content=body,
                                                          headers={"Content-Type": "application/x-npz"}) for _ in range(40)))

        answers = asyncio.run(burst())
        codes = [a.status_code for a in answers]
        assert set(codes) <= {200, 503} and 503 in codes and 200 in codes, codes
        refused = next(a for a in answers if a.status_code == 503)
        assert refused.headers["retry-after"] == "1" and "overloaded" in refused.json()["error"]
        assert httpx.post(f"{url}/v1/predict", json={"inputs": images(1).tolist()}, timeout=30).status_code == 200
        assert 'status="503"' in httpx.get(f"{url}/metrics", timeout=30).text


def test_sigterm_during_load_finishes_every_accepted_request(digits_fp32_export):
    proc = process.start(digits_fp32_export, ["--threads", "1", "--max-batch", "1"])
    url = process.wait_ready(proc)
    body = npz_body(input=images(2048))
    outcomes: list = []

    async def load():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=32,
                                                                      max_keepalive_connections=0)) as client:
            async def one():
                try:
                    answer = await client.post(f"{url}/v1/predict", content=body, headers={"Content-Type": "application/x-npz"})
                    outcomes.append(answer.status_code)
                except httpx.ConnectError:
                    outcomes.append("refused")  # never accepted: the listener had closed
                except httpx.HTTPError as exc:
                    outcomes.append(type(exc).__name__)  # accepted, then lost: what must not happen
            await asyncio.gather(*(one() for _ in range(32)))

    runner = threading.Thread(target=lambda: asyncio.run(load()))
    runner.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the server has taken some requests
        time.sleep(0.05)
        if "edgekit_queue_depth 0" not in httpx.get(f"{url}/metrics", timeout=30).text:
            break
    proc.send_signal(signal.SIGTERM)
    runner.join(300)
    code = proc.wait(120)
    assert code == 0, proc.lines
    assert len(outcomes) == 32
    assert set(outcomes) <= {200, "refused"}, outcomes
    assert outcomes.count(200) >= 1


def test_non_loopback_bind_needs_an_api_key_and_enforces_it(digits_fp32_export):
    env = {k: v for k, v in os.environ.items() if k != "EDGEKIT_API_KEY"}
    refused = subprocess.run([sys.executable, "-m", "edgekit", "serve", str(digits_fp32_export), "--host", "0.0.0.0",
                              "--port", "0"], capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith("Error: binding 0.0.0.0") and "--api-key" in refused.stderr
    key = "s3cret-key"
    with process.local_server(digits_fp32_export, ["--threads", "1"], host="0.0.0.0", api_key=key) as url:
        url = url.replace("0.0.0.0", "127.0.0.1")  # traffic only over loopback
        body = {"inputs": images(1).tolist()}
        assert httpx.post(f"{url}/v1/predict", json=body, timeout=30).status_code == 401
        assert httpx.post(f"{url}/v1/predict", json=body, headers={"X-API-Key": "wrong"}, timeout=30).status_code == 401
        assert httpx.get(f"{url}/v1/model", headers={"Authorization": "Bearer s3cret"}, timeout=30).status_code == 401
        assert httpx.post(f"{url}/v1/predict", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30).status_code == 200
        assert httpx.post(f"{url}/v1/predict", json=body, headers={"X-API-Key": key}, timeout=30).status_code == 200
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200  # probes stay open


def test_loadtest_writes_bench_json_that_gate_reads(server, tmp_path):
    from typer.testing import CliRunner

    from edgekit.records.result import load_results
    from edgekit.cli.app import app

    out = tmp_path / "load.json"
    result = CliRunner().invoke(app, ["loadtest", server, "-c", "4", "--duration", "1", "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    (loaded,) = load_results(out)
    assert loaded.mode == "loadtest" and loaded.timing.runs >= 1 and loaded.timing.p99 >= loaded.timing.p50 > 0
    assert loaded.settings["status_counts"] == {"200": loaded.settings["requests"]}
    assert loaded.settings["error_rate"] == 0 and loaded.throughput_per_s > 0 and loaded.memory.peak_rss > 0
    gate = CliRunner().invoke(app, ["gate", str(out), "--max-p99-ms", "60000"])
    assert gate.exit_code == 0, gate.output
    gate = CliRunner().invoke(app, ["gate", str(out), "--max-p99-ms", "0.000001"])
    assert gate.exit_code == 3, gate.output


def test_loadtest_can_start_the_server_itself(digits_fp32_export, tmp_path):
    from typer.testing import CliRunner

    from edgekit.records.result import load_results
    from edgekit.cli.app import app

    out = tmp_path / "load.json"
    result = CliRunner().invoke(app, ["loadtest", "--serve", str(digits_fp32_export), "-c", "2", "--duration", "0.5",
                                      "--rate", "40", "--json", str(out), "-q", "--threads", "1"])
    assert result.exit_code == 0, result.output
    (loaded,) = load_results(out)
    assert loaded.settings["rate"] == 40 and loaded.settings["requests"] >= 1 and loaded.model.format == "onnx"


def test_serve_usage_errors_are_one_line():
    from typer.testing import CliRunner

    from edgekit.cli.app import app
    from tests.conftest import one_line_error

    result = CliRunner().invoke(app, ["serve", "nowhere", "--port", "70000"])
    assert "--port" in one_line_error(result, 2)
    result = CliRunner().invoke(app, ["loadtest"])
    assert "URL or --serve" in one_line_error(result, 2)
    result = CliRunner().invoke(app, ["serve", "nowhere", "--replicas", "2"])
    assert "--ray" in one_line_error(result, 2)
    for flags in (["--threads", "100000"], ["--max-body-mb", "1e9"], ["--queue-size", "0"], ["--max-wait-ms", "-1"]):
        result = CliRunner().invoke(app, ["serve", "nowhere", *flags])
        one_line_error(result, 2)  # refused before anything is loaded or started
    result = CliRunner().invoke(app, ["loadtest", "--serve", "nowhere", "--threads", "100000"])
    assert "--threads" in one_line_error(result, 2)


BLOCK_EDGEKIT_AND_TORCH = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('edgekit', 'torch'):
            raise ImportError('blocked on the board: ' + name)
sys.meta_path.insert(0, Block())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def test_bundle_serve_py_serves_without_edgekit_or_torch(digits_fp32_export, local, tmp_path):
    from edgekit.bundle.build import build_bundle
    from edgekit.bundle.serving import SERVE_REQUIREMENTS

    bundle = build_bundle(digits_fp32_export, "rpi4", tmp_path / "bundle")
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["serve"]["script"] == "serve.py" and (bundle / "edgekit_serve" / "app.py").is_file()
    pins = (bundle / SERVE_REQUIREMENTS).read_text()
    assert "onnxruntime==" in pins and "fastapi==" in pins and "uvicorn==" in pins and "torch" not in pins
    import edgekit.serve

    for name in edgekit.serve.STANDALONE:  # byte for byte
        source = (__import__("pathlib").Path(edgekit.serve.__file__).parent / name).read_bytes()
        assert (bundle / "edgekit_serve" / name).read_bytes() == source
    proc = process.spawn([sys.executable, "-c", BLOCK_EDGEKIT_AND_TORCH, str(bundle / "serve.py"), "--port", "0",
                          "--threads", "1"])
    url = process.wait_ready(proc, 60)
    x = images(2, seed=3)
    answer = httpx.post(f"{url}/v1/predict", json={"inputs": x.tolist()}, timeout=30)
    assert answer.status_code == 200, answer.text
    np.testing.assert_array_equal(np.asarray(answer.json()["outputs"]["logits"], dtype=np.float32), local(x))
    assert process.stop(proc) == 0, proc.lines
    assert not any("blocked on the board" in line for line in proc.lines)


def test_bundle_serve_py_refuses_a_public_bind_without_a_key(digits_fp32_export, tmp_path):
    from edgekit.bundle.build import build_bundle

    bundle = build_bundle(digits_fp32_export, "rpi4", tmp_path / "bundle")
    env = {k: v for k, v in os.environ.items() if k != "EDGEKIT_API_KEY"}
    proc = subprocess.run([sys.executable, str(bundle / "serve.py"), "--host", "0.0.0.0", "--port", "0"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("Error: binding 0.0.0.0")


def test_npz_that_expands_past_the_limit_is_413_before_reading():
    from edgekit.serve.inputs import InputError, read_npz

    buffer = io.BytesIO()
    np.savez_compressed(buffer, input=np.zeros((1024, 1024), np.float32))  # 4 MiB of zeros, a few KiB zipped
    assert len(buffer.getvalue()) < 64 << 10
    with pytest.raises(InputError) as caught:
        read_npz(buffer.getvalue(), max_bytes=1 << 20)
    assert caught.value.status == 413


def test_spec_checks_against_an_independent_reference():
    from edgekit.serve.inputs import InputError, spec_from_dict, validate

    specs = [spec_from_dict({"name": "tokens", "shape": [None, None], "dtype": "int64",
                             "dynamic_axes": {"0": "batch", "1": "sequence"}, "value_range": [0, 50]})]
    feed = validate({"tokens": np.array([[1, 2, 49]], np.uint8)}, specs)
    assert feed["tokens"].dtype == np.int64 and feed["tokens"].tolist() == [[1, 2, 49]]
    for bad, fragment in ((np.array([[1.5]]), "expects int64"), (np.array([[50]]), "outside [0, 50)"),
                          (np.array([1, 2]), "2 dimensions"), (np.zeros((1, 0), np.int64), "empty"),
                          (np.array([[2**63 + 1]], np.uint64), "do not fit int64")):
        with pytest.raises(InputError, match=fragment.replace("[", r"\[").replace(")", r"\)")):
            validate({"tokens": bad}, specs)


@pytest.mark.parametrize("array", [
    np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8), np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
    np.array(3.5), np.zeros((2, 0, 3), np.uint8), np.array([True, False]), np.arange(5, dtype=">f4"),
])
@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_bodies_read_like_numpy_reads_them(array, version):
    from edgekit.serve.inputs import read_npy

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version)
    got = read_npy(buffer.getvalue(), "x")
    expected = np.load(io.BytesIO(buffer.getvalue()), allow_pickle=False)
    assert got.dtype == expected.dtype and got.shape == expected.shape and np.array_equal(got, expected)


def test_npy_headers_numpy_did_not_write_still_read_and_lies_are_refused():
    from edgekit.serve.inputs import InputError, read_npy

    def npy(header: str, payload: bytes) -> bytes:
        text = header + " " * (63 - len(header) % 64) + "\n"  # numpy pads the header to 64 bytes
        return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin-1") + payload

    values = np.array([[1.5, -2.0]], np.float32)
    reordered = npy("{'shape': (1, 2), 'descr': '<f4', 'fortran_order': False}", values.tobytes())
    assert np.array_equal(read_npy(reordered, "x"), values)
    for header, payload, fragment in (
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 2), }", values.tobytes(), "claims shape"),
        ("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", b"\0" * 8, "only numeric"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), '__import__': 1}", values.tobytes(), "readable"),
        ("__import__('os').system('true')", values.tobytes(), "readable"),
    ):
        with pytest.raises(InputError, match=fragment) as caught:
            read_npy(npy(header, payload), "x")
        assert caught.value.status == 422


def test_predict_answers_405_to_other_methods(server):
    answer = httpx.get(f"{server}/v1/predict", timeout=30)
    assert answer.status_code == 405 and answer.headers["allow"] == "POST" and "error" in answer.json()
