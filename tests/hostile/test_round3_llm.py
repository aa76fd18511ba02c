"""Round three on the language-model surfaces: chat templates are bounded in time, memory and output
(at import with a representative conversation, and again per request), text that is not valid
Unicode is one line or a 4xx, numbers are range-checked, NaN/inf weights are refused at import.

Templates come from downloaded files: each hostile one below ran for minutes, for ever, or took
gigabytes before (a recursive loop, nested ``range(100000)``, ``'x' * 1500000000``, ``tojson`` with a
300-million-space indent, ...).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import TINY_CHAT_TEMPLATE, write_tiny_gguf
from corpus.hostile import assert_one_line_error, leftovers, snapshot
from edgekit.cli.app import app
from edgekit.core.errors import InputFileError, UsageError

pytest.importorskip("jinja2")
pytest.importorskip("gguf")

runner = CliRunner()

# (name, template, a fragment of the refusal)
HOSTILE_TEMPLATES = [
    ("recursive-loop", "{% for m in messages recursive %}{{ loop(messages) }}{{ loop(messages) }}{% endfor %}",
     "fails to render"),
    ("nested-ranges", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "rendering took longer than"),
    ("string-times", "{% set x = 'x' * 1500000000 %}{{ x|length }}", "'*' would make a value of 1,500,000,000"),
    ("list-times", "{{ ([1] * 1000000000)|length }}", "'*' would make a value"),
    ("tojson-indent", "{{ messages|tojson(indent=300000000) }}", "tojson's indent"),
    ("power", "{{ 9 ** 999999999 }}", "'**' would make a value"),
    ("center-filter", "{{ 'a'|center(2000000000) }}", "the center filter"),
    ("center-method", "{{ 'a'.center(2000000000) }}", "str.center"),
    ("ljust-method", "{{ 'a'.ljust(2000000000) }}", "str.ljust"),
    ("replace-method", "{% set a = 'x' * 4000 %}{{ a.replace('x', a) }}", "str.replace"),
    ("replace-filter", "{% set a = 'x' * 4000 %}{{ a|replace('x', a) }}", "the replace filter"),
    ("percent-width", "{{ '%0999999999d' % 1 }}", "'%' formatting"),
    ("format-width", "{{ '{:>999999999}'.format(1) }}", "str.format"),
    ("format-nested-width", "{{ '{0:>{1}}'.format(1, 999999999) }}", "nested fields"),
    ("indent-filter", "{{ ('a\n' * 1000000)|indent(1000) }}", "the indent filter"),
    ("join-filter", "{{ (['x' * 4000000] * 1000)|join }}", "would make a value"),
    ("concat-growth", "{% set ns = namespace(x='y' * 4000000) %}{% for i in range(100000) %}"
                      "{% set ns.x = ns.x ~ 'y' * 4000000 %}{% endfor %}{{ ns.x|length }}", "'~' would make a value"),
    ("print-list-of-refs", "{{ ['x' * 4000000] * 1000 }}", "an output would make a value"),
    ("concat-list-of-refs", "{{ (['x' * 4000000] * 1000) ~ '' }}", "'~' would make a value"),
    ("string-filter-refs", "{{ (['x' * 4000000] * 1000)|string|length }}", "the string filter's argument"),
    ("tojson-refs", "{{ (['x' * 4000000] * 1000)|tojson|length }}", "would make a value"),
    ("tojson-deep-indent", "{{ ([[[[[[[[[[1]]]]]]]]]] * 4000)|tojson(indent=100000)|length }}", "tojson would make"),
    ("format-fields", "{{ ('{0}' * 1000000).format('x' * 4000) }}", "str.format would make a value"),
    ("percent-fields", "{{ ('%(a)s' * 1000) % {'a': 'x' * 4000000} }}", "'%' formatting would make a value"),
    ("translate", "{{ ('a' * 4000).translate({97: 'x' * 4000000}) }}", "str.translate would make a value"),
    ("set-block", "{% set y = 'x' * 4000000 %}{% set x %}{% for i in range(1000) %}{{ y }}{% endfor %}{% endset %}"
                  "{{ x|length }}", "a block's output would make a value"),
    ("macro-growth", "{% macro m() %}{% for i in range(1000) %}{{ 'x' * 4000000 }}{% endfor %}{% endmacro %}"
                     "{{ m()|length }}", "rendering grew memory"),
    ("batch-count", "{{ [1]|batch(1000000000, 0)|list|length }}", "the batch filter's count"),
    ("slice-count", "{{ [1]|slice(1000000000)|list|length }}", "the slice filter's count"),
    ("sum-of-lists", "{{ ([[1] * 4000000] * 1000)|sum(start=[])|length }}", "the sum filter's argument"),
    ("escape-refs", "{{ (['<' * 4000000] * 100)|e|length }}", "the e filter's argument"),
    ("namespace-print", "{% set ns = namespace(a=['x' * 4000000] * 1000) %}{{ ns }}", "an output would make"),
    ("lipsum", "{{ lipsum(1000000000)|length }}", "'lipsum' is undefined"),
    ("output-size", "{% for i in range(100000) %}{{ 'z' * 4000 }}{% endfor %}", "passes 4,194,304 characters"),
]


@pytest.mark.parametrize("name, template, fragment", HOSTILE_TEMPLATES, ids=[t[0] for t in HOSTILE_TEMPLATES])
def test_a_hostile_template_is_refused_at_the_check(name, template, fragment):
    from edgekit.llm.chat import check_template

    with pytest.raises(InputFileError, match="fails to render") as caught:
        check_template(template, name)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_real_templates_still_render():
    from edgekit.llm.chat import REPRESENTATIVE, check_template, render_chat

    check_template(TINY_CHAT_TEMPLATE, "tiny")
    text = render_chat(TINY_CHAT_TEMPLATE, list(REPRESENTATIVE), where="tiny")
    assert all(m["content"] in text for m in REPRESENTATIVE)
    # a template that refuses system turns (as some do) is still accepted: only bounds fail the check
    strict = ("{% if messages[0].role == 'system' %}{{ raise_exception('no system turn') }}{% endif %}"
              "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")
    check_template(strict, "strict")
    formatted = "{% for m in messages %}{{ '%-10s|' % m.role }}{{ '{:>4}'.format(loop.index) }}{{ m.content|tojson(indent=2) }}{% endfor %}"
    check_template(formatted, "formatted")


TRIGGERED = ("{% if messages[-1].content == 'boom' %}{% for i in range(100000) %}{% for j in range(100000) %}"
             "{% endfor %}{% endfor %}{% endif %}" + TINY_CHAT_TEMPLATE)


def _bounded_child(code: str, timeout: float = 120) -> dict:
    """Run ``code`` in a fresh interpreter; its last stdout line is JSON, plus its peak RSS in MB."""
    # VmHWM, not getrusage's ru_maxrss: that one keeps the forking parent's (the pytest worker's) peak across exec
    wrapper = textwrap.dedent(code) + textwrap.dedent("""
        hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
        print(json.dumps({**RESULT, "peak_mb": int(hwm.split()[1]) / 1024}))
    """)
    done = subprocess.run([sys.executable, "-c", "import json\n" + wrapper], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_import_of_a_gguf_with_a_huge_template_is_one_line_and_bounded(tmp_path):
    gguf = write_tiny_gguf(tmp_path / "bomb.gguf", chat_template="{% set x = 'x' * 1500000000 %}{{ x }}")
    result = _bounded_child(f"""
        from typer.testing import CliRunner
        from edgekit.cli.app import app
        r = CliRunner().invoke(app, ["import", "gguf:{gguf}", "--out", "{tmp_path / 'out'}"])
        RESULT = {{"code": r.exit_code, "stderr": r.stderr}}
    """)
    assert result["code"] == 2 and "'*' would make a value" in result["stderr"]
    assert result["peak_mb"] < 1024
    assert not (tmp_path / "out").exists() and leftovers(tmp_path, "out") == []


def test_a_template_that_hangs_on_one_message_is_bounded_per_request(tmp_path):
    """It passes the import check (the representative conversation never says 'boom'); the request
    that does ends in one line within the render's deadline, and the artifact is untouched."""
    gguf = write_tiny_gguf(tmp_path / "trap.gguf", chat_template=TRIGGERED)
    out = tmp_path / "llm"
    imported = runner.invoke(app, ["import", f"gguf:{gguf}", "--out", str(out), "--context", "64"])
    assert imported.exit_code == 0, imported.output
    before = snapshot(out)
    result = runner.invoke(app, ["generate", str(out), "boom", "--max-tokens", "1"])
    assert_one_line_error(result, 2, "rendering took longer than")
    fine = runner.invoke(app, ["generate", str(out), "hello", "--max-tokens", "1", "--temperature", "0"])
    assert fine.exit_code == 0, fine.output
    assert snapshot(out) == before


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("round3-llm")
    out = root / "llm"
    result = runner.invoke(app, ["import", f"gguf:{write_tiny_gguf(root / 'tiny.gguf')}", "--out", str(out),
                                 "--context", "64"])
    assert result.exit_code == 0, result.output
    return out


def _argv_text(raw: bytes) -> str:
    """What Python makes of argv bytes that are not UTF-8 (surrogateescape)."""
    return raw.decode("utf-8", "surrogateescape")


@pytest.mark.parametrize("args, fragment", [
    ([_argv_text(b"caf\xe9")], "the prompt is not valid UTF-8 text (byte 0xe9"),
    (["--raw", _argv_text(b"\xff\xfeabc")], "the prompt is not valid UTF-8 text (byte 0xff"),
    (["hi", "--system", _argv_text(b"be \xc3 kind")], "--system is not valid UTF-8 text"),
    (["hi", "--stop", _argv_text(b"\x80")], "--stop is not valid UTF-8 text"),
    (["\ud800"], "lone surrogate U+D800"),
    (["hi", "--seed", "1" * 25], "--seed must be an integer between 0 and 4294967295"),
    (["hi", "--seed", "-1"], "--seed must be an integer between 0 and 4294967295"),
    (["hi", "--seed", str(2**32)], "--seed must be an integer between 0 and 4294967295"),
    (["hi", "--top-k", "1" * 25], "top_k must be between 0 (no limit) and 2,097,152"),
    (["hi", "--max-tokens", "1" * 25], "max_tokens must be between 1 and 100000"),
    (["hi", "--threads", "1" * 25], "--threads must be an integer between 1 and"),
])
def test_generation_text_and_numbers_are_checked_in_one_line(tiny_llm, args, fragment):
    before = snapshot(tiny_llm)
    result = runner.invoke(app, ["generate", str(tiny_llm), *args] + ([] if "--max-tokens" in args else ["--max-tokens", "1"]))
    assert_one_line_error(result, 2, fragment)
    assert result.stdout == "" and snapshot(tiny_llm) == before


def test_the_python_api_checks_the_same(tiny_llm):
    from edgekit.llm.generation import generate_text

    for kwargs in ({"prompt": "caf\udce9"}, {"prompt": "hi", "system": "\udfff"}, {"prompt": "hi", "seed": 10**25},
                   {"prompt": "hi", "seed": True}, {"prompt": 42}, {"prompt": "hi", "top_k": 2**63}):
        with pytest.raises(UsageError):
            generate_text(tiny_llm, max_tokens=1, **kwargs)


@pytest.mark.parametrize("body", [
    b'{"prompt": "\\ud800", "max_tokens": 1}',
    b'{"messages": [{"role": "user", "content": "hi \\udfff"}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud83d"}]}]}',
    b'{"prompt": "ok", "stop": ["\\udc80"]}',
    b'{"\\ud800": 1, "prompt": "ok"}',
    b'{"model": "\\udbff", "prompt": "ok"}',
])
def test_a_lone_surrogate_anywhere_in_a_body_is_a_client_error(body):
    from edgekit.serve.inputs import parse_json
    from edgekit.serve.llm_routes import parse_object

    with pytest.raises(ValueError, match="lone surrogate"):
        parse_json(body)
    from edgekit.serve.inputs import InputError

    with pytest.raises(InputError) as caught:
        parse_object(body)
    assert caught.value.status == 400
    assert parse_json(b'{"prompt": "\\ud83d\\ude00"}') == {"prompt": "\N{GRINNING FACE}"}  # a real pair is fine


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_gguf_with_non_finite_weights_is_refused_at_import(tmp_path, value):
    import gguf as gguf_lib

    clean = write_tiny_gguf(tmp_path / "clean.gguf", qtype="F32")
    reader = gguf_lib.GGUFReader(str(clean))
    tensor = next(t for t in reader.tensors if t.name == "blk.1.ffn_up.weight")
    data = bytearray(clean.read_bytes())
    at = int(tensor.data_offset) + 4 * 17
    data[at:at + 4] = np.float32(value).tobytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    result = runner.invoke(app, ["import", f"gguf:{bad}", "--out", str(tmp_path / "out")])
    assert_one_line_error(result, 2, "tensor blk.1.ffn_up.weight holds 1 values that are NaN or infinite")
    assert leftovers(tmp_path, "out") == [] and not (tmp_path / "out").exists()
    generated = runner.invoke(app, ["generate", f"gguf:{bad}", "hi", "--max-tokens", "1"])
    assert_one_line_error(generated, 2, "NaN or infinite")


def test_non_finite_logits_end_generation_in_one_line():
    import torch

    from edgekit.llm.generation import pick_token

    for logits in (torch.tensor([0.0, float("nan"), 1.0]), torch.tensor([float("inf"), 0.0]),
                   torch.full((4,), float("-inf"))):
        for temperature in (0.0, 0.7):
            with pytest.raises(InputFileError, match="not finite"):
                pick_token(logits, temperature)
    assert pick_token(torch.tensor([0.0, float("-inf"), 2.0]), 0.0) == 2  # a masked id is no damage


def test_the_detokenised_text_holds_no_control_characters():
    from edgekit.llm.generation import TextStream

    pieces = {0: "\x00", 1: "ok\x1b[2J", 2: "\x07line\n\tnext\r\n", 3: "\x7f!"}
    stream = TextStream(lambda ids: "".join(pieces[i] for i in ids))
    text = "".join(stream.push(i) for i in (0, 1, 2, 3)) + stream.finish()
    assert text == "ok[2Jline\n\tnext\r\n!"


@pytest.fixture(scope="module")
def trap_server(tmp_path_factory):
    """A tiny GGUF model whose template hangs on the message 'boom', served: (url, process)."""
    pytest.importorskip("fastapi")
    from edgekit.core import process

    root = tmp_path_factory.mktemp("round3-serve")
    out = root / "llm"
    result = runner.invoke(app, ["import", f"gguf:{write_tiny_gguf(root / 'trap.gguf', chat_template=TRIGGERED)}",
                                 "--out", str(out), "--context", "64"])
    assert result.exit_code == 0, result.output
    proc = process.start(out, ["--threads", "1"])
    url = process.wait_ready(proc, 120)
    yield url, proc
    if proc.poll() is None:
        process.stop(proc, 30)


def _no_traceback(proc):
    assert not [line for line in proc.lines if "Traceback" in line or "Exception in ASGI" in line], proc.lines[-20:]


@pytest.mark.parametrize("route, body", [
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 1}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "stream": true, "stop": ["\\udfff"]}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user\\udc80", "content": "hi"}]}'),
    ("/v1/chat/completions", b'{"model": "\\ud83d", "messages": [{"role": "user", "content": "hi"}]}'),
    ("/v1/generate", b'{"prompt": "\\udbff", "max_tokens": 1}'),
    ("/v1/generate", b'{"prompt": "ok", "max_tokens": 1, "stream": true, "stop": "\\udc00"}'),
])
def test_the_server_answers_lone_surrogates_with_400(trap_server, route, body):
    import httpx

    url, proc = trap_server
    answer = httpx.post(f"{url}{route}", content=body, headers={"Content-Type": "application/json"}, timeout=60)
    assert answer.status_code == 400, answer.text[:300]
    error = answer.json()["error"]  # OpenAI's {"message": ...} on chat, edgekit's one line on /v1/generate
    message = error["message"] if isinstance(error, dict) else error
    assert "lone surrogate" in message and "\n" not in message
    _no_traceback(proc)


def test_hanging_template_requests_end_and_the_server_stays_responsive_and_stops(trap_server):
    import concurrent.futures

    import httpx

    url, proc = trap_server
    boom = {"messages": [{"role": "user", "content": "boom"}], "max_tokens": 1}

    def ask(_):
        return httpx.post(f"{url}/v1/chat/completions", json=boom, timeout=120)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(8)))
    for answer in answers:
        assert 400 <= answer.status_code < 600, answer.text[:300]
        assert "rendering took longer than" in answer.json()["error"]["message"]
    fine = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                         "max_tokens": 1, "temperature": 0}, timeout=60)
    assert fine.status_code == 200, fine.text[:300]
    _no_traceback(proc)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # SIGTERM while hanging renders are in flight
        pending = [pool.submit(ask, i) for i in range(4)]
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0  # it exits on its own, no SIGKILL needed
        for future in pending:
            with contextlib.suppress(httpx.HTTPError):
                future.result()
