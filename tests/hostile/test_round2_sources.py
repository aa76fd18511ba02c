"""Issue 19, round two: model sources (edgekit/sources/model_source.py, the zoo under edgekit/models/).

1. Sizes: an ``hf:`` config with 4,194,304 layers, ``--set n_layers=1000000`` and their kin (heads,
   experts, vocabulary, sequence length, feed-forward size, nested ``text_config``) fit any memory
   estimate and used to build for minutes: each is refused before anything is built, naming the
   size, in seconds.
2. ``package.module:factory``: a function that needs arguments (``os:system``), a standard-library
   or built-in function, a class that is no ``nn.Module``, something not callable, a factory that
   returns a non-Module, raises (even ``SystemExit``), or prints: one ``Error:`` line each, exit 2,
   nothing the user's code printed on the terminal, nothing called with arguments.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corpus.hostile import assert_one_line_error, child_pids, leftovers, snapshot
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
HF_BASE = {"model_type": "bert", "vocab_size": 100, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 1,
           "intermediate_size": 4, "max_position_embeddings": 16}
SECONDS = 60  # the refusal takes a few; building what is refused took minutes


def _edgekit(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "edgekit", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"edgekit {' '.join(args)[:120]} ran past {SECONDS} s: the size was not refused before building")
    return done, time.monotonic() - started


def _one_line(done: subprocess.CompletedProcess, code: int, fragment: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, (done.returncode, done.stderr[-1500:])
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr[-1500:]
    assert "internal error" not in lines[0] and "Traceback" not in done.stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


HF_CASES = [
    ("layers-4194304", {"num_hidden_layers": 4_194_304}, "num_hidden_layers = 4194304: more layers than any model has"),
    ("nested-text-config-layers", {"text_config": {"num_hidden_layers": 100_000}}, "text_config.num_hidden_layers"),
    ("experts", {"num_experts": 1_000_000}, "more experts"),
    ("heads", {"num_attention_heads": 2048}, "more heads"),
    ("vocabulary", {"vocab_size": 1 << 22}, "more vocabulary"),
    ("positions", {"max_position_embeddings": 1 << 22}, "more sequence length"),
    ("feed-forward", {"intermediate_size": 1 << 20}, "more feed-forward size"),
    ("decoder-layers", {"decoder_layers": 500_000}, "decoder_layers"),
]


@pytest.mark.parametrize("extra, fragment", [pytest.param(c[1], c[2], id=c[0]) for c in HF_CASES])
def test_hf_sizes_are_bounded_before_building(tmp_path, extra, fragment):
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.json").write_text(json.dumps({**HF_BASE, **extra}))
    before = snapshot(work)
    done, took = _edgekit(["quantize", "hf:config.json", "--method", "dynamic", "--out", "out"], work)
    _one_line(done, 2, fragment)
    assert leftovers(work, "out") == [] and snapshot(work) == before


ZOO_CASES = [
    ("transformer-layers", ["--model", "transformer-lm", "--set", "n_layers=1000000", "--set", "d_model=8", "--set", "n_heads=1"],
     "n_layers=1000000: more layers"),
    ("lstm-layers", ["--model", "lstm-lm", "--set", "num_layers=100000", "--set", "hidden_size=4", "--set", "embed_dim=4"],
     "num_layers=100000: more layers"),
    ("transformer-heads", ["--model", "transformer-lm", "--set", "n_heads=4096", "--set", "d_model=4096", "--set", "n_layers=1"],
     "n_heads=4096: more heads"),
    ("cnn-width", ["--set", "width=100000"], "width=100000: more width"),
]


@pytest.mark.parametrize("args, fragment", [pytest.param(c[1], c[2], id=c[0]) for c in ZOO_CASES])
def test_zoo_sizes_from_set_are_bounded_before_building(tmp_path, args, fragment):
    work = tmp_path / "work"
    work.mkdir()
    done, _ = _edgekit(["train", *args, "--max-steps", "1", "--out", "out"], work)
    _one_line(done, 2, fragment)
    assert list(work.iterdir()) == []


def test_a_manifests_model_config_is_bounded_too(digits_checkpoint, tmp_path):
    """A checkpoint artifact whose manifest asks for 100,000 channels: quantize and export refuse it."""
    work = tmp_path / "work"
    work.mkdir()
    import shutil

    folder = work / "ckpt"
    shutil.copytree(digits_checkpoint, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["model"]["config"]["width"] = 100_000
    (folder / "manifest.json").write_text(json.dumps(manifest))
    before = snapshot(work)
    for args in (["quantize", "ckpt", "--method", "dynamic", "--out", "out"], ["export", "ckpt", "--out", "out"]):
        done, _ = _edgekit(args, work)
        _one_line(done, 2, "width=100000: more width")
        assert leftovers(work, "out") == [] and snapshot(work) == before


# -- package.module:factory -----------------------------------------------------------------------

USER_MODULE = '''
import sys
from pathlib import Path

import torch

print("r2_usermods imported")  # a module that talks when imported

MARKER = Path("called-with-arguments")


def needs_args(command):
    MARKER.write_text(str(command))  # what os:system would have done with an argument
    return torch.nn.Linear(3, 3)


class NotModule:
    pass


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.layer(x)


class Factory:
    def __call__(self):
        return Net()


factory_object = Factory()
NOT_CALLABLE = 42


def returns_str():
    return "a model"


def raises():
    raise RuntimeError("boom\\nTraceback (most recent call last): a second line")


def prints_then_returns_int():
    print("chatty factory\\nwith lines")
    print("on stderr too", file=sys.stderr)
    return 5


def exits_zero():
    raise SystemExit(0)


def exits_three():
    sys.exit(3)


def talks_and_builds():
    print("building the model")
    return Net()
'''
BAD_IMPORT = 'print("about to fail")\nraise ValueError("broken at import\\nsecond line")\n'

FACTORY_CASES = [
    ("os-system", "os:system", "standard-library module 'os'"),
    ("os-getcwd", "os:getcwd", "standard-library module 'os'"),
    ("builtins-input", "builtins:input", "standard-library module 'builtins'"),
    ("pdb-set-trace", "pdb:set_trace", "standard-library module 'pdb'"),
    ("collections-class", "collections:OrderedDict", "standard-library"),
    ("needs-arguments", "r2_usermods:needs_args", "needs arguments (command)"),
    ("torch-class-needs-arguments", "torch.nn:Linear", "needs arguments (in_features, out_features)"),
    ("builtin-function", "torch:get_num_threads", "is a built-in function"),
    ("class-not-module", "r2_usermods:NotModule", "is a class (NotModule), not a model factory"),
    ("callable-object", "r2_usermods:factory_object", "a Factory, not a function"),
    ("not-callable", "r2_usermods:NOT_CALLABLE", "is not callable"),
    ("missing", "r2_usermods:nothing_here", "has no callable 'nothing_here'"),
    ("special-attribute", "r2_usermods:__dict__", "special attribute"),
    ("returns-str", "r2_usermods:returns_str", "returned str, not a torch.nn.Module"),
    ("raises", "r2_usermods:raises", "r2_usermods:raises raised RuntimeError: boom"),
    ("prints-and-returns-int", "r2_usermods:prints_then_returns_int", "returned int"),
    ("system-exit-0", "r2_usermods:exits_zero", "raised SystemExit: 0"),
    ("system-exit-3", "r2_usermods:exits_three", "raised SystemExit: 3"),
    ("import-raises", "r2_badimport:make", "importing r2_badimport for r2_badimport:make raised ValueError: broken at import"),
]


@pytest.fixture()
def user_code(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "r2_usermods.py").write_text(USER_MODULE)
    (work / "r2_badimport.py").write_text(BAD_IMPORT)
    for name in ("r2_usermods", "r2_badimport"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(work)
    yield work
    for name in ("r2_usermods", "r2_badimport"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("source, fragment", [pytest.param(c[1], c[2], id=c[0]) for c in FACTORY_CASES])
def test_a_factory_that_is_not_one_is_one_line_exit_2(user_code, source, fragment):
    before = snapshot(user_code)
    children = child_pids()
    result = runner.invoke(app, ["quantize", source, "--input-shape", "1x3", "--method", "dynamic", "--out", "out"])
    assert_one_line_error(result, 2, fragment)
    assert result.stdout == "", "the user's code printed on edgekit's output"
    assert "chatty" not in result.stderr and "about to fail" not in result.stderr and "imported" not in result.stderr
    assert "\n" not in result.stderr.strip(), result.stderr
    assert not (user_code / "called-with-arguments").exists(), "a factory was called with an argument"
    assert leftovers(user_code, "out") == [] and snapshot(user_code) == before
    assert child_pids() <= children


def test_a_factory_that_talks_still_builds_and_keeps_edgekits_output_clean(user_code):
    result = runner.invoke(app, ["quantize", "r2_usermods:talks_and_builds", "--input-shape", "1x3", "--method", "dynamic",
                                 "--format", "onnx", "--json", "--out", "out"])
    assert result.exit_code == 0, result.stderr
    assert "building the model" not in result.stdout and "imported" not in result.stdout
    json.loads(result.stdout)  # --json output stays one JSON document
