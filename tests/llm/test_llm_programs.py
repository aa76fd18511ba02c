"""A language model imported from GGUF as ExecuTorch programs with the KV cache inside (issue 22):
export (fp32) and quantize (int4), generate through the program, bench and gate its figures.

A tiny random Llama keeps it fast (the 135 M model takes minutes to lower; benchmarks/llm_edgekit.py
measures that one). References: the float checkpoint's own torch module, run through its cache
and without it (the plain causal forward), and hand-computed statistics.
"""

from __future__ import annotations

import json
import math
import os
import statistics

import pytest
from typer.testing import CliRunner

from conftest import write_tiny_gguf
from corpus.hostile import assert_one_line_error, leftovers
from edgekit.cli.app import app

pytest.importorskip("executorch")
runner = CliRunner()
PROMPT = [5, 17, 42, 99, 3, 250, 7, 64]


def _cli(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory):
    """(checkpoint artifact, fp32 program artifact, int4 program artifact) of one tiny random Llama."""
    root = tmp_path_factory.mktemp("llm")
    gguf = write_tiny_gguf(root / "tiny.gguf", seed=3)
    _cli("import", f"gguf:{gguf}", "--out", root / "ckpt", "--context", 256)
    _cli("export", root / "ckpt", "--out", root / "fp32", "--kernels", "llm")  # ExecuTorch's fused LLM kernels
    _cli("quantize", root / "ckpt", "--method", "int4", "--group-size", 32, "--out", root / "int4", "--eval-tokens", 200)
    return root / "ckpt", root / "fp32", root / "int4"


def _open(folder, fmt):
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.cached import open_cached

    folder, manifest = load_manifest(folder)
    return open_cached(folder, manifest, fmt, threads=1)


def _float_module(ckpt):
    from edgekit.formats.artifacts import load_manifest
    from edgekit.sources.checkpoint import load_model_from_artifact

    folder, manifest = load_manifest(ckpt)
    return load_model_from_artifact(folder, manifest)


def test_the_fp32_program_is_the_float_model_through_its_cache(tiny_llm):
    """Prefill then 12 one-token steps through the program's own cache: logits equal the float
    module's plain causal forward over the whole sequence (no cache) at every step."""
    import torch

    ckpt, fp32, _ = tiny_llm
    program = _open(fp32, "executorch")
    model = _float_module(ckpt)
    ids = list(PROMPT)
    got = program.feed(ids, 0)
    for _ in range(12):
        with torch.no_grad():
            want = model(torch.tensor([ids]))[0, -1]
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
        ids.append(int(got.argmax()))
        got = program.feed(ids[-1:], len(ids) - 1)


def test_a_new_conversation_does_not_see_the_last_one(tiny_llm):
    """After a longer exchange, a reset and a shorter prompt give the same logits as a fresh load."""
    import torch

    _, fp32, _ = tiny_llm
    program = _open(fp32, "executorch")
    program.feed(list(range(1, 60)), 0)
    program.reset()
    again = program.feed(PROMPT, 0)
    fresh = _open(fp32, "executorch").feed(PROMPT, 0)
    assert torch.equal(again, fresh)


def test_the_int4_manifest_records_what_was_quantized_and_its_quality(tiny_llm):
    ckpt, _, int4 = tiny_llm
    manifest = json.loads((int4 / "manifest.json").read_text())
    entry = manifest["files"][0]
    assert entry["format"] == "executorch" and entry["precision"] == "int4"
    recipe = entry["details"]["quantization"]
    assert recipe["group_size"] == 32 and "8da4w" in recipe["linears"]
    assert recipe["embedding"].startswith("int8 per row") and "untied" in recipe["lm_head"]
    assert entry["details"]["context"] == 256 and entry["details"]["kv_cache"].startswith("static")
    quality = entry["details"]["quality"]
    assert quality["scored_tokens"] == 199  # 200 held-out tokens, every one but the first
    assert quality["perplexity_growth"] == pytest.approx(quality["perplexity"] / quality["float_perplexity"] - 1,
                                                         abs=1e-4)
    assert quality["recommended"] == (quality["perplexity_growth"] <= 0.10)
    assert {e["path"] for e in manifest["extra_files"]} == {"tokenizer.json", "chat_template.jinja"}
    assert manifest["parent"]["path"] == str(ckpt.resolve())
    # the int4 file is smaller than the fp32 one (weights 4-bit, embedding and head 8/4-bit)
    fp32_bytes = json.loads((tiny_llm[1] / "manifest.json").read_text())["files"][0]["bytes"]
    assert entry["bytes"] < 0.6 * fp32_bytes


def test_the_recorded_perplexity_is_the_programs_own(tiny_llm):
    """Recomputed here by hand from the program's logits (log-softmax in float64), same windows."""
    import torch

    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.quality import heldout_text
    from edgekit.llm.lm_runtime import load_llm_text

    _, _, int4 = tiny_llm
    folder, manifest = load_manifest(int4)
    ids = load_llm_text(folder, manifest).tokenizer.encode(heldout_text()[0], add_special_tokens=False).ids[:200]
    program = _open(int4, "executorch")
    logits = program.feed_all(ids, 0).double()  # one window: 200 tokens fit the 256-token context
    nll = -torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None]).sum()
    assert manifest.files[0].details["quality"]["perplexity"] == pytest.approx(math.exp(float(nll) / 199), rel=1e-3)


def _raw_logits(pte, ids, start=0):
    """What the program's ``forward`` itself returns for ``ids`` at ``start`` (a fresh load)."""
    import torch

    from edgekit.formats import executorch
    from edgekit.llm.program import load_runtime_kernels

    load_runtime_kernels()
    method = executorch.load_method(pte)
    inputs = (torch.tensor([ids]), torch.arange(start, start + len(ids)))
    if method.metadata.num_inputs() == 3:  # key_pos: the cells filled once the ids are in
        inputs += (torch.arange(start + len(ids)),)
    return method.execute(inputs)[0]


@pytest.mark.parametrize("which, quantized, rel", [(1, False, 1e-4), (2, True, 0.05)])
def test_the_program_returns_only_the_last_positions_logits(tiny_llm, which, quantized, rel):
    """Each program's output is (1, 1, vocab): the last row of the every-position logits of the
    float model's plain causal forward (no cache), for int4 after the same torchao quantization in
    torch (int4 moves a random tiny model's logits by ~25 % of their norm; the lowered kernels'
    own rounding, ~2.5 %); the manifest says so."""
    import torch

    from edgekit.llm.program import load_kernels, quantize_module

    folder = tiny_llm[which]
    details = json.loads((folder / "manifest.json").read_text())["files"][0]["details"]
    assert details["logits"] == "last position"
    got = _raw_logits(folder / "model.pte", PROMPT * 3)
    model = _float_module(tiny_llm[0]).eval()
    if quantized:
        load_kernels()
        quantize_module(model, details["precision"], details["quantization"]["group_size"])
    with torch.no_grad():
        want = model(torch.tensor([PROMPT * 3]))[:, -1:]
    assert tuple(got.shape) == (1, 1, 300)
    assert float((got - want).norm() / want.norm()) < rel
    assert int(got.argmax()) == int(want.argmax())


def test_perplexity_through_a_last_only_program_is_the_float_models(tiny_llm):
    """Overlapping windows (64 ids every 24) scored through the fp32 program, which returns one
    row per call, equal perplexity computed by hand from the float module's every-position logits
    over the same windows (each window from scratch, each id scored once)."""
    import torch

    from edgekit.llm.quality import measure, windows

    ids = [(i * 37 + 11) % 300 for i in range(150)]
    spans = [(0, 64, 1), (24, 88, 64), (48, 112, 88), (72, 136, 112), (96, 150, 136)]
    assert windows(len(ids), 64, 24) == spans
    model = _float_module(tiny_llm[0]).eval()
    nll = 0.0
    for begin, end, first in spans:
        with torch.no_grad():
            logits = model(torch.tensor([ids[begin:end]]))[0].double()
        rows = torch.log_softmax(logits[first - 1 - begin:end - 1 - begin], dim=-1)
        nll -= float(rows.gather(1, torch.tensor(ids[first:end])[:, None]).sum())
    got = measure(_open(tiny_llm[1], "executorch"), ids, window=64, stride=24)
    assert got.tokens == 149
    assert got.perplexity == pytest.approx(math.exp(nll / 149), rel=1e-5)


def test_a_program_of_every_positions_logits_still_runs(tiny_llm, tmp_path):
    """A program as older edgekits wrote it (forward -> (1, T, vocab), no "logits" in its details):
    generation takes its last row and perplexity its rows, as from a last-only program."""
    import torch

    from edgekit.formats import executorch
    from edgekit.llm.cached import program_cached
    from edgekit.llm.program import load_kernels

    class EveryPosition(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, tokens, input_pos):
            return self.model.step(tokens, input_pos)

    load_kernels()
    model = _float_module(tiny_llm[0]).eval()
    length = torch.export.Dim("tokens", min=1, max=128)
    with torch.no_grad():
        exported = torch.export.export(EveryPosition(model), (torch.zeros(1, 2, dtype=torch.long), torch.arange(2)),
                                       dynamic_shapes=({1: length}, {0: length}), strict=False)
    executorch.lower(exported, tmp_path / "old.pte", {}, in_place_buffers=True)
    assert tuple(_raw_logits(tmp_path / "old.pte", PROMPT).shape) == (1, len(PROMPT), 300)
    old = program_cached(tmp_path / "old.pte", {"context": 256, "max_prefill": 128}, threads=1)
    new = _open(tiny_llm[1], "executorch")
    want = _greedy(new, PROMPT * 20, 8)
    assert _greedy(old, PROMPT * 20, 8) == want  # 160 ids: two prefill slices
    # edgekit-run takes the two-input program too (no key_pos: it attends to the whole cache)
    done = _run_native("generate", tmp_path / "old.pte", "--prompt-ids", ",".join(map(str, PROMPT * 20)),
                       "--context", 256, "--max-new-tokens", 8)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tokens"] == want
    old.reset()
    new.reset()
    assert torch.allclose(old.feed_all(PROMPT, 0, keep_from=3), new.feed_all(PROMPT, 0, keep_from=3),
                          rtol=1e-4, atol=1e-4)


def test_a_portable_program_attends_to_the_cells_its_key_pos_names(tiny_llm):
    """The int4 program (portable kernels) takes key_pos (S,) as its third input and attends to the
    cache's first S cells only: decoding after a short prompt gives the float model's next-token
    logits with key_pos covering the cells fed, and the manifest says so. With key_pos one cell
    short, the last fed id's own key is not seen, and the logits move (the cells past S are not read)."""
    import torch

    from edgekit.formats import executorch
    from edgekit.llm.program import FILLED_ONLY, load_kernels, quantize_module

    folder = tiny_llm[2]
    details = json.loads((folder / "manifest.json").read_text())["files"][0]["details"]
    assert details["attention"] == FILLED_ONLY
    load_kernels()
    method = executorch.load_method(folder / "model.pte")
    assert method.metadata.num_inputs() == 3
    prompt = PROMPT * 2
    n = len(prompt)
    method.execute((torch.tensor([prompt]), torch.arange(n), torch.arange(n)))
    step = (torch.tensor([[prompt[-1]]]), torch.tensor([n]))
    full = method.execute((*step, torch.arange(n + 1)))[0]
    short = method.execute((*step, torch.arange(n)))[0]  # the same cell written again; its key unseen
    model = _float_module(tiny_llm[0]).eval()
    quantize_module(model, "int4", details["quantization"]["group_size"])
    with torch.no_grad():
        want = model(torch.tensor([prompt + [prompt[-1]]]))[:, -1:]
    assert float((full - want).norm() / want.norm()) < 0.05
    assert float((short - full).norm() / full.norm()) > 1e-3


def test_generate_runs_the_int4_program(tiny_llm):
    """Greedy ids from `edgekit generate` on the int4 artifact are the program's own argmax chain."""
    _, _, int4 = tiny_llm
    result = _cli("generate", int4, "hello", "--raw", "--temperature", 0, "--max-tokens", 6, "--threads", 1)
    assert "6 tokens" in result.output and "ended by max_tokens" in result.output


def test_bench_and_gate_read_the_llm_figures(tiny_llm, tmp_path):
    _, fp32, int4 = tiny_llm
    doc = tmp_path / "bench.json"
    _cli("bench", int4, fp32, "--processes", 2, "--prompt-tokens", 16, "--new-tokens", 9, "--threads", 1,
         "--json", doc)
    results = json.loads(doc.read_text())["results"]
    assert [r["model"]["variant"] for r in results] == ["int4-executorch", "fp32-executorch"]
    for r in results:
        llm = r["settings"]["llm"]
        assert llm["processes"] == 2 and llm["prompt_tokens"] == 16 and llm["new_tokens"] == 9
        for key in ("decode_tps", "prefill_tps", "ttft_ms", "peak_rss_mb"):
            assert llm[key]["min"] <= llm[key]["median"] <= llm[key]["max"]
        assert r["timing"]["runs"] == 8  # 9 new tokens: the first from the prompt, 8 one-token steps
        assert r["memory"]["peak_rss"] == pytest.approx(llm["peak_rss_mb"]["median"])
        assert r["model"]["bytes"] == (fp32 if r["model"]["precision"] == "fp32" else int4).joinpath("model.pte").stat().st_size
    slowest = min(r["settings"]["llm"]["decode_tps"]["median"] for r in results)
    passed = runner.invoke(app, ["gate", str(doc), "--min-decode-tps", f"{slowest * 0.5:.3f}", "--max-ttft-ms", "60s"])
    assert passed.exit_code == 0, passed.output
    fastest = max(r["settings"]["llm"]["decode_tps"]["median"] for r in results)
    failed = runner.invoke(app, ["gate", str(doc), "--min-decode-tps", f"{fastest * 2:.3f}tok/s"])
    assert failed.exit_code == 3 and "decode rate" in failed.output and " < " in failed.output


@pytest.mark.parametrize("args, message", [
    (["--method", "int4", "--group-size", "24"], "--group-size must be a power of two >= 16"),
    (["--method", "int4", "--group-size", "128"], "--group-size 128 does not divide the model's width 64"),
    (["--method", "int4", "--eval-tokens", "-3"], "--eval-tokens must be between 0"),
    (["--method", "static"], "use --method int8 or int4"),
    (["--method", "int4", "--calib", "x"], "--calib do(es) not apply to --method int4"),
])
def test_bad_llm_quantize_requests_are_one_line(tiny_llm, tmp_path, args, message):
    ckpt = tiny_llm[0]
    result = runner.invoke(app, ["quantize", str(ckpt), "--out", str(tmp_path / "q"), *args])
    assert_one_line_error(result, 2, message)
    assert leftovers(tmp_path, "q") == []


def test_an_llm_method_on_another_model_is_one_line(digits_checkpoint, tmp_path):
    result = runner.invoke(app, ["quantize", str(digits_checkpoint), "--method", "int4", "--out", str(tmp_path / "q")])
    assert_one_line_error(result, 2, "is for language models imported from GGUF")


def test_bench_prompt_past_the_context_is_one_line(tiny_llm):
    result = runner.invoke(app, ["bench", str(tiny_llm[2]), "--prompt-tokens", "200", "--new-tokens", "100"])
    assert_one_line_error(result, 2, "do not fit")


def test_the_step_statistics_are_the_median_processes(tiny_llm):
    """p50 of the result is the median of the per-step times the worker reported (hand-computed)."""
    from edgekit.llm.bench import _result, llm_models

    model = llm_models([tiny_llm[2]])[0]
    steps = [1.0, 3.0, 2.0, 10.0, 4.0]
    runs = [{"decode_tps": tps, "prefill_tps": 100.0, "ttft_ms": 5.0, "cold_ttft_ms": 9.0, "load_s": 0.1,
             "peak_rss_mb": 200.0 + tps, "rss_before_mb": 20.0, "context": 256, "step_ms": steps}
            for tps in (30.0, 10.0, 20.0)]
    result = _result(model, runs, 1, 16, 6, None)
    assert result.timing.p50 == statistics.median(steps) == 3.0
    assert result.settings["llm"]["decode_tps"] == {"median": 20.0, "min": 10.0, "max": 30.0}
    assert result.memory.peak_rss == 220.0


def test_a_program_artifact_is_not_exported_again(tiny_llm, tmp_path):
    result = runner.invoke(app, ["export", str(tiny_llm[2]), "--out", str(tmp_path / "e")])
    assert_one_line_error(result, 2, "already holds a language model's executorch program")
    assert leftovers(tmp_path, "e") == []


def test_a_program_with_the_fused_kernels_is_not_bundled(tiny_llm, tmp_path):
    result = runner.invoke(app, ["bundle", str(tiny_llm[1]), "--target", "rpi4", "--out", str(tmp_path / "b")])
    assert_one_line_error(result, 2, "again with --kernels portable")
    assert leftovers(tmp_path, "b") == []


# ---- on the board: edgekit-run generate, bundles, verify --emulate (the int4 program uses portable kernels)

def _host_runner():
    from edgekit.native.build import build_runner
    from edgekit.native.toolchain import host_arch

    return build_runner(host_arch())


def _run_native(*args):
    import subprocess

    return subprocess.run([str(_host_runner().binary), *map(str, args)], capture_output=True, text=True, timeout=600)


def _greedy(lm, prompt, n):
    from edgekit.llm.generation import generate_cached

    return list(generate_cached(lm, prompt, n, stop_ids=()))


def test_the_native_runner_decodes_the_python_runtimes_tokens(tiny_llm):
    """``edgekit-run generate`` (C++, no Python) on the int4 program: the same greedy ids as the
    ExecuTorch Python runtime on the same program, a prompt longer than one prefill slice included."""
    int4 = tiny_llm[2]
    details = json.loads((int4 / "manifest.json").read_text())["files"][0]["details"]
    assert details["kernels"] == "portable"
    prompt = PROMPT * 20  # 160 ids: two prefill calls of at most 128
    want = _greedy(_open(int4, "executorch"), prompt, 24)
    done = _run_native("generate", int4 / "model.pte", "--prompt-ids", ",".join(map(str, prompt)), "--context", 256,
                       "--max-new-tokens", 24)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["tokens"] == want and doc["prompt_tokens"] == 160
    assert doc["peak_rss_mb"] > 0 and doc["decode_tokens_per_s"] > 0


def test_the_portable_fp32_program_decodes_what_the_float_checkpoint_decodes(tiny_llm, tmp_path):
    """The float model exported with portable kernels decodes what the float checkpoint decodes."""
    _cli("export", tiny_llm[0], "--out", tmp_path / "fp32p")
    model = _float_module(tiny_llm[0]).eval()
    from edgekit.llm.cached import torch_cached

    want = _greedy(torch_cached(model, tiny_llm[0], "checkpoint"), PROMPT, 16)
    done = _run_native("generate", tmp_path / "fp32p" / "model.pte", "--prompt-ids", ",".join(map(str, PROMPT)),
                       "--context", 256, "--max-new-tokens", 16, "--expect-ids", ",".join(map(str, want)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("PASS: the first 16 greedy tokens")


def test_a_near_tie_passes_and_a_real_difference_fails(tiny_llm):
    """--expect-ids: where the reply leaves the expected ids, they are fed one by one; a pick that
    beats the expected id by at most --near-tie logits passes (another CPU's rounding), more fails."""
    from edgekit.llm.cached import program_cached

    int4 = tiny_llm[2]
    details = json.loads((int4 / "manifest.json").read_text())["files"][0]["details"]
    lm = program_cached(int4 / "model.pte", details, threads=1)
    want = _greedy(lm, PROMPT, 4)
    logits = lm.feed_all(PROMPT + want[:1], 0)[-1]
    runner_up = int(logits.topk(2).indices[1])
    gap = float(logits[want[1]] - logits[runner_up])
    expected = [want[0], runner_up]  # the host's second choice at position 1
    base = ["generate", int4 / "model.pte", "--prompt-ids", ",".join(map(str, PROMPT)), "--context", 256,
            "--max-new-tokens", 2, "--expect-ids", ",".join(map(str, expected))]
    loose = _run_native(*base, "--near-tie", f"{gap * 1.01 + 1e-4:.6f}")
    assert loose.returncode == 0 and loose.stdout.splitlines()[-1].startswith("PASS: greedy token 1"), loose.stdout
    doc = json.loads(loose.stdout.splitlines()[0])
    assert doc["teacher_forced"]["agree"] == 1 and doc["teacher_forced"]["max_logit_gap"] == pytest.approx(gap, abs=1e-3)
    strict = _run_native(*base, "--near-tie", f"{gap * 0.5:.6f}")
    assert strict.returncode == 1 and strict.stdout.splitlines()[-1].startswith("FAIL:")


@pytest.mark.parametrize("args, code, message", [
    (["--context", "256"], 2, "--prompt-ids is required"),
    (["--prompt-ids", "1,2", "--context", "0"], 2, "--context must be between 1"),
    (["--prompt-ids", "1,99999", "--context", "256"], 2, "outside the program's vocabulary"),
    (["--prompt-ids", "1,2;touch x", "--context", "256"], 2, "invalid int value"),
    (["--prompt-ids", ",".join(["1"] * 250), "--context", "256", "--max-new-tokens", "16"], 2, "do not fit the context"),
    (["--prompt-ids", "1,2", "--context", "256", "--expect-ids", "7,7,7", "--max-new-tokens", "2"], 2, "--expect-ids must hold"),
])
def test_bad_generate_arguments_are_one_line(tiny_llm, args, code, message):
    done = _run_native("generate", tiny_llm[2] / "model.pte", *args)
    assert done.returncode == code and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], done.stderr


def test_the_native_runner_picks_the_first_largest_logit_and_refuses_nan(tmp_path):
    """``edgekit-run generate`` over a program whose logits are a table row per id (a vocabulary of
    301, not a multiple of the runner's four running maxima): the first id of the largest logit,
    ties and the last id included, and one ``Error:`` line where a row holds NaN."""
    import torch

    from edgekit.formats import executorch

    vocab = 301
    table = torch.zeros(vocab, vocab)
    table[1, 123] = table[1, 200] = 5.0  # a tie: the first wins
    table[2, vocab - 1] = 7.0  # the last id, past the last group of four
    table[3, 0] = 1.0  # the first id
    table[4, 17] = float("nan")
    table[4, 40] = 9.0

    class Table(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", table)

        def forward(self, tokens, input_pos):
            return self.table[tokens] + input_pos.unsqueeze(0).unsqueeze(-1).float() * 0

    length = torch.export.Dim("tokens", min=1, max=8)
    exported = torch.export.export(Table(), (torch.zeros(1, 2, dtype=torch.long), torch.arange(2)),
                                   dynamic_shapes=({1: length}, {0: length}), strict=False)
    executorch.lower(exported, tmp_path / "table.pte", {})

    def first_pick(prompt_id):
        return _run_native("generate", tmp_path / "table.pte", "--prompt-ids", prompt_id, "--context", 8,
                           "--max-new-tokens", 1)

    for prompt_id, want in ((1, 123), (2, vocab - 1), (3, 0)):
        done = first_pick(prompt_id)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["tokens"] == [want]
    done = first_pick(4)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == ["Error: the program's logits hold NaN"]


@pytest.fixture(scope="module")
def llm_bundle(tiny_llm, tmp_path_factory):
    out = tmp_path_factory.mktemp("llm-bundle") / "rpi4"
    _cli("bundle", tiny_llm[2], "--target", "rpi4", "--out", out)
    return out


def test_an_llm_bundle_carries_the_hosts_greedy_ids(tiny_llm, llm_bundle):
    import numpy as np

    from edgekit.llm.generation import encode_prompt
    from edgekit.llm.lm_runtime import load_llm_text
    from edgekit.formats.artifacts import load_manifest

    info = json.loads((llm_bundle / "bundle.json").read_text())
    folder, manifest = load_manifest(tiny_llm[2])
    prompt = encode_prompt(load_llm_text(folder, manifest), info["llm"]["prompt"], None, None, "test")
    assert info["llm"]["prompt_ids"] == prompt  # through the chat template
    assert info["llm"]["expected_ids"] == _greedy(_open(tiny_llm[2], "executorch"), prompt, 16)
    assert info["host_check"]["tokens_equal"] and info["host_check"]["tokens"] == info["llm"]["expected_ids"]
    assert info["runtime"]["name"] == "executorch-native" and info["native"]["arch"] == "aarch64"
    with np.load(llm_bundle / "reference.npz") as data:
        assert data["expected_ids"].tolist() == info["llm"]["expected_ids"]
    script = (llm_bundle / "run.sh").read_text()
    assert "--expect-ids " + ",".join(map(str, info["llm"]["expected_ids"])) in script
    assert not any(name.endswith(".py") for name in os.listdir(llm_bundle))  # nothing for a Python on the board


def test_verify_emulate_decodes_the_hosts_tokens_on_aarch64(llm_bundle, tmp_path):
    report = tmp_path / "verify.json"
    result = runner.invoke(app, ["verify", str(llm_bundle), "--emulate", "--json", str(report)])
    assert result.exit_code == 0, result.output
    doc = json.loads(report.read_text())
    expected = json.loads((llm_bundle / "bundle.json").read_text())["llm"]["expected_ids"]
    assert doc["passed"] and doc["emulation"]["machine"] == "aarch64"
    assert doc["emulation"]["tokens"] == expected
    entry = doc["emulation"]["entry_point"]
    if entry is not None:  # as root with the cached rootfs (CI): run.sh check in a root without Python
        assert entry["ok"] and entry["verdict"].startswith("PASS") and not entry["python_in_root"]


def test_an_llm_bundle_whose_ids_were_changed_fails_verify(tiny_llm, llm_bundle, tmp_path):
    from corpus.hostile import rehash_sums

    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(llm_bundle, bad, symlinks=True)
    info = json.loads((bad / "bundle.json").read_text())
    from edgekit.formats.artifacts import load_manifest
    from edgekit.llm.cached import open_cached

    # from token 3 on, the id the host's program rates lowest: no CPU's rounding gets there
    want = info["llm"]["expected_ids"]
    folder, manifest = load_manifest(tiny_llm[2])
    logits = open_cached(folder, manifest, "executorch", 1).feed_all(info["llm"]["prompt_ids"] + want[:3], 0)
    want[3] = int(logits[-1].argmin())
    (bad / "bundle.json").write_text(json.dumps(info))
    rehash_sums(bad)
    result = runner.invoke(app, ["verify", str(bad), "--emulate"])
    assert result.exit_code == 1 and "with the expected ids fed" in result.output and "FAIL" in result.output


@pytest.mark.parametrize("value", [["1", "2"], [1, -2], "1,2;touch pwned", [True], []])
def test_an_llm_bundle_with_hostile_ids_is_one_line(llm_bundle, tmp_path, value):
    from corpus.hostile import rehash_sums

    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(llm_bundle, bad, symlinks=True)
    info = json.loads((bad / "bundle.json").read_text())
    info["llm"]["prompt_ids"] = value
    (bad / "bundle.json").write_text(json.dumps(info))
    rehash_sums(bad)
    result = runner.invoke(app, ["verify", str(bad), "--emulate"])
    assert_one_line_error(result, 2, "llm.prompt_ids must be a list of 1 to")
    assert not (tmp_path / "pwned").exists()


def test_the_prompt_and_the_decode_steps_are_counted_apart_on_the_boards_core(llm_bundle):
    """``edgekit-run generate`` marks its prompt and its decode steps for the counting plugin (issue 34):
    one window each; the prompt's count does not depend on how many steps follow it, to the instruction;
    the ids decoded under the plugin are the host's (bundle.json)."""
    from edgekit.emulate import EmulationError
    from edgekit.emulate.bundle import open_bundle
    from edgekit.llm.counts import count_generate
    from edgekit.emulate.icount_plugin import find_header

    try:
        find_header()
    except EmulationError:
        pytest.skip("needs QEMU's plugin header (bash edgekit/emulate/plugin/fetch_header.sh; .ci/setup does)")
    bundle = open_bundle(llm_bundle)
    expected = json.loads((llm_bundle / "bundle.json").read_text())["llm"]["expected_ids"]
    two, six = (count_generate(bundle, "cortex-a72", steps=steps) for steps in (2, 6))
    assert two["tokens"] == expected[:3] and six["tokens"] == expected[:7]
    assert two["prefill"] == six["prefill"] and two["prefill"]["total"] > 0
    assert six["decode"]["total"] > two["decode"]["total"] > 0
    # one decode step costs about the same at positions a few tokens apart
    assert six["per_decoded_token"] == pytest.approx(two["per_decoded_token"], rel=0.1)
    assert two["per_prompt_token"] == two["prefill"]["total"] / len(bundle.info["llm"]["prompt_ids"])


def test_a_decode_step_costs_what_the_cells_filled_cost_on_the_boards_core(llm_bundle):
    """The int4 program attends to the cells filled so far (key_pos), not to the whole cache: on the
    Pi 4's core a decode step after a 200-id prompt costs more instructions than one after 8 ids
    (measured 1.24x; a program that attends to all 256 cells costs the same at both)."""
    from edgekit.emulate import EmulationError
    from edgekit.emulate.bundle import open_bundle
    from edgekit.emulate.icount_plugin import find_header
    from edgekit.llm.counts import count_generate

    try:
        find_header()
    except EmulationError:
        pytest.skip("needs QEMU's plugin header (bash edgekit/emulate/plugin/fetch_header.sh; .ci/setup does)")
    bundle = open_bundle(llm_bundle)
    short, long = PROMPT, PROMPT * 25
    counts = {len(ids): count_generate(bundle, "cortex-a72", steps=2, prompt_ids=ids) for ids in (short, long)}
    assert counts[200]["per_decoded_token"] > 1.1 * counts[8]["per_decoded_token"]
