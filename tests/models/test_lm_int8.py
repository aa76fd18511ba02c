"""Language models end to end from int8: `edgekit generate` on a dynamic-int8 artifact (ONNX and
TorchScript), agreement with the float model, tokens/s in `bench`, and SSE streaming in `serve`."""

from __future__ import annotations

import json
import shutil

import pytest

TINY = {
    "lstm-lm": {"embed_dim": 32, "hidden_size": 64, "n_heads": 2, "max_len": 48},
    "transformer-lm": {"d_model": 32, "n_heads": 2, "n_layers": 2, "max_len": 48},
}
PROMPT = "def "


@pytest.fixture(scope="module", params=sorted(TINY))
def lm(request, tmp_path_factory):
    """(fp32 checkpoint, dynamic int8 artifact with TorchScript + ONNX) of a briefly trained tiny LM."""
    from edgekit.quantize.api import quantize
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    root = tmp_path_factory.mktemp(request.param)
    ckpt, _ = train(TrainConfig(model=request.param, model_config=TINY[request.param], max_steps=80, batch_size=16,
                                seq_len=48, seed=0), root / "ckpt")
    q_dir, _ = quantize(ckpt, "dynamic", root / "int8", "rpi4", formats=("torchscript", "onnx"))
    return request.param, ckpt, q_dir


def teacher_forced_agreement(reference, candidate, prompt_ids, tokens: int, context: int) -> float:
    """Share of steps where both models pick the same next token, both reading the reference's greedy text."""
    ids, same = list(prompt_ids), 0
    for _ in range(tokens):
        window = ids[-context:]
        want = int(reference(window).argmax())
        same += int(candidate(window).argmax()) == want
        ids.append(want)
    return same / tokens


def test_int8_artifact_generates_and_agrees_with_fp32(lm):
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.lm_runtime import load_language_model, load_tokenizer

    name, ckpt, q_dir = lm
    assert (q_dir / "tokenizer.json").is_file()  # quantize carries the vocabulary
    folder, manifest = load_manifest(ckpt)
    fp32 = load_language_model(folder, manifest)
    prompt_ids = load_tokenizer(folder, manifest).encode("import numpy as np\n").tolist()
    q_folder, q_manifest = load_manifest(q_dir)
    for fmt in ("onnx", "torchscript"):
        int8 = load_language_model(q_folder, q_manifest, fmt)
        assert int8.precision == "int8" and int8.format == fmt
        agreement = teacher_forced_agreement(fp32.step, int8.step, prompt_ids, 48, fp32.context)
        assert agreement >= 0.8, (name, fmt, agreement)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_generate_cli_runs_from_an_int8_artifact(lm, fmt):
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    _, _, q_dir = lm
    result = CliRunner().invoke(app, ["generate", str(q_dir), "-p", PROMPT, "--max-tokens", "12", "--temperature", "0",
                                      "--format", fmt, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["tokens"] == 12 and doc["tokens_per_s"] > 0 and doc["prompt"] == PROMPT
    # greedy decoding by hand, from the same int8 file's logits (not through generate's own loop)
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.lm_runtime import load_language_model, load_tokenizer

    folder, manifest = load_manifest(q_dir)
    model, tokenizer = load_language_model(folder, manifest, fmt), load_tokenizer(folder, manifest)
    ids = tokenizer.encode(PROMPT).tolist()
    new = []
    for _ in range(12):
        window = (ids + new)[-model.context:]
        new.append(int(model.step(window).argmax()))
    assert doc["text"] == tokenizer.decode(new)


def test_generate_without_any_tokenizer_is_one_error(lm, tmp_path):
    from typer.testing import CliRunner

    from edgekit.cli.app import app
    from tests.conftest import one_line_error

    _, _, q_dir = lm
    orphan = tmp_path / "orphan"
    shutil.copytree(q_dir, orphan)
    (orphan / "tokenizer.json").unlink()
    manifest = json.loads((orphan / "manifest.json").read_text())
    manifest["parent"]["manifest_sha256"] = "0" * 64  # the parent changed since: not trusted
    (orphan / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(app, ["generate", str(orphan), "-p", PROMPT, "--max-tokens", "2"])
    assert "no tokenizer" in one_line_error(result, 2)


def test_bench_reports_tokens_per_s_for_fp32_and_int8(lm, tmp_path):
    from edgekit.bench.api import bench
    from edgekit.records.result import from_document, to_document
    from edgekit.export.api import export

    _, ckpt, q_dir = lm
    fp32_dir, _ = export(ckpt, tmp_path / "fp32", ("onnx",), target="rpi4")
    results = bench([fp32_dir / "model.onnx", q_dir / "model.onnx"], threads=1, warmup=1, min_runs=3, min_time_s=0,
                    lm_tokens=8)
    assert [r.model.precision for r in results] == ["fp32", "int8"]
    assert all(r.tokens_per_s is not None and r.tokens_per_s > 0 for r in results)
    assert any("tokens/s: greedy generation of 8 tokens" in n for n in results[0].notes)
    again = from_document(json.loads(json.dumps(to_document(results))))
    assert [r.tokens_per_s for r in again] == [r.tokens_per_s for r in results]


def test_bench_leaves_tokens_per_s_empty_for_other_models(digits_fp32_export):
    from edgekit.bench.api import bench

    (result,) = bench(digits_fp32_export / "model.onnx", threads=1, warmup=1, min_runs=3, min_time_s=0)
    assert result.tokens_per_s is None


def test_serve_streams_generated_tokens_as_server_sent_events(lm):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from edgekit.llm.generation import generate_text
    from edgekit.core import process

    name, _, q_dir = lm
    expected = generate_text(q_dir, PROMPT, 10, temperature=0, fmt="onnx").text
    with process.local_server(q_dir, ["--threads", "1"]) as url:
        events = []
        with httpx.stream("POST", f"{url}/v1/generate", timeout=60,
                          json={"prompt": PROMPT, "max_tokens": 10, "temperature": 0, "stream": True}) as answer:
            assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
            for line in answer.iter_lines():
                if line:
                    events.append(line)
        data = [json.loads(line[len("data: "):]) for line in events if line.startswith("data: ")]
        assert events[-2] == "event: done" and data[-1] == {"tokens": 10}
        assert "".join(d["token"] for d in data[:-1]) == expected
        whole = httpx.post(f"{url}/v1/generate", json={"prompt": PROMPT, "max_tokens": 10, "temperature": 0}, timeout=60)
        assert whole.status_code == 200 and whole.json()["text"] == expected
        bad = httpx.post(f"{url}/v1/generate", json={"prompt": PROMPT, "temperature": -1}, timeout=60)
        assert bad.status_code == 422 and "temperature" in bad.json()["error"]
        bad = httpx.post(f"{url}/v1/generate", json={"prompt": "", "max_tokens": 3}, timeout=60)
        assert bad.status_code == 422
        assert httpx.post(f"{url}/v1/predict", json={"inputs": [[2, 3, 4]]}, timeout=60).status_code == 200
        past = httpx.post(f"{url}/v1/predict", json={"inputs": [[2, 3, 10**6]]}, timeout=60)
        assert past.status_code == 422 and past.json()["input"] == "tokens" and "outside" in past.json()["error"]


@pytest.mark.slow
def test_transformer_lm_as_an_executorch_program_generates_like_the_checkpoint(tmp_path):
    """torch.export caps the sequence at the model's context (its positional table), so the .pte
    exports with that bound instead of failing; generation and /v1/generate then run from it."""
    pytest.importorskip("executorch")
    httpx = pytest.importorskip("httpx")
    from edgekit.formats.artifacts import load_manifest
    from edgekit.export.api import export
    from edgekit.llm.generation import generate_text
    from edgekit.llm.lm_runtime import load_language_model, load_tokenizer
    from edgekit.core import process
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    config = TINY["transformer-lm"]
    ckpt, _ = train(TrainConfig(model="transformer-lm", model_config=config, max_steps=40, batch_size=16,
                                seq_len=48, seed=0), tmp_path / "ckpt")
    pte_dir, manifest = export(ckpt, tmp_path / "pte", ("executorch",), target="rpi4")
    entry = manifest.file("executorch")
    assert entry.details["max_shapes"]["sequence"] == config["max_len"]
    assert entry.metrics["parity"]["cosine"] > 0.9999
    folder, ckpt_manifest = load_manifest(ckpt)
    fp32 = load_language_model(folder, ckpt_manifest)
    program = load_language_model(*load_manifest(pte_dir), "executorch")
    assert program.format == "executorch" and program.context == fp32.context
    prompt_ids = load_tokenizer(folder, ckpt_manifest).encode("import numpy as np\n").tolist()
    # 60 steps run past the 48-token context: the window slides within the program's bound
    assert teacher_forced_agreement(fp32.step, program.step, prompt_ids, 60, fp32.context) >= 0.95
    expected = generate_text(pte_dir, PROMPT, 10, temperature=0, fmt="executorch").text
    with process.local_server(pte_dir, ["--threads", "1"]) as url:
        whole = httpx.post(f"{url}/v1/generate", json={"prompt": PROMPT, "max_tokens": 10, "temperature": 0}, timeout=60)
        assert whole.status_code == 200 and whole.json()["text"] == expected
        assert httpx.get(f"{url}/v1/model", timeout=60).json()["format"] == "executorch"
