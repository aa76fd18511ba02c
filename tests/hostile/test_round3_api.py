"""Round three: plug-ins that fail or register garbage, and the Python API's front door.

A plug-in is a real package in a temporary folder with a ``.dist-info`` declaring its entry point,
put on PYTHONPATH of a real ``edgekit`` process (as tests/formats/test_plugin_format.py does).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.core.errors import EdgekitError, UsageError

EDGEKIT = [sys.executable, "-m", "edgekit"]


def _plugin(root: Path, body: str, group: str = "edgekit.formats", name: str = "toyplug") -> dict:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(body)
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\ntoy = {name}\n")
    return {**os.environ, "PYTHONPATH": str(root)}


def _run(args, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([*EDGEKIT, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from edgekit.train.config import TrainConfig
    from edgekit.train.loop import train

    out = tmp_path_factory.mktemp("ck") / "checkpoint"
    train(TrainConfig(epochs=1, seed=0), out)
    return out


RAISING = {
    "exit0": "raise SystemExit(0)",
    "exit-text": "import sys\nsys.exit('bye')",
    "generator-exit": "raise GeneratorExit()",
    "value-error": "raise ValueError('broken\\nsecond line')",
    "import-error": "import no_such_module_anywhere_xyz",
}


@pytest.mark.parametrize("group", ["edgekit.formats", "edgekit.quantize_routes"])
@pytest.mark.parametrize("case", sorted(RAISING))
def test_a_plugin_failing_on_import_is_one_line_and_exit_2_and_nothing_written(case, group, checkpoint, tmp_path):
    env = _plugin(tmp_path / "plug", RAISING[case], group)
    # every command that touches the format table loads the formats group (export, info, any artifact
    # read); quantize loads the routes group too
    commands = ([["quantize", str(checkpoint), "--method", "dynamic", "-o", str(tmp_path / "q")]]
                if group == "edgekit.quantize_routes" else
                [["export", str(checkpoint), "-o", str(tmp_path / "out")], ["info", str(checkpoint)]])
    for args in commands:
        result = _run(args, env, tmp_path)
        lines = [line for line in result.stderr.splitlines() + result.stdout.splitlines() if line.strip()]
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr.lower()
        assert lines[-1].startswith("Error: the ") and "plug-in 'toy' (toyplug) does not load" in lines[-1], lines
        assert "second line" not in result.stderr
        assert not (tmp_path / "out").exists() and not (tmp_path / "q").exists()


@pytest.mark.parametrize("case", sorted(RAISING)[:2])
def test_help_and_version_stay_working_and_light_with_a_broken_plugin(case, tmp_path):
    env = _plugin(tmp_path / "plug", RAISING[case])
    for args in (["--help"], ["--version"], ["export", "--help"]):
        result = _run(args, env, tmp_path)
        assert result.returncode == 0, (args, result.stderr)


GARBAGE = {
    "not-a-format": ("register('toy')", "takes an edgekit.formats.Format"),
    "name-clash": ("import dataclasses\nfrom edgekit.formats import onnx\n"
                   "register(dataclasses.replace(onnx.FORMAT, files=Files('m.toy', ('.toy',))))",
                   "the name 'onnx' is already"),
    "suffix-clash": ("register(Format('toy', Files('m.toy', ('.onnx',)), Host('toyplug'), Board('r')))",
                     "the suffix '.onnx' is already"),
    "path-file-name": ("register(Format('toy', Files('../m.toy', ('.toy',)), Host('toyplug'), Board('r')))",
                       "not a plain file name"),
    "list-suffixes": ("register(Format('toy', Files('m.toy', ['.toy']), Host('toyplug'), Board('r')))",
                      "files.suffixes"),
    "bad-name": ("register(Format('Toy Format', Files('m.toy', ('.toy',)), Host('toyplug'), Board('r')))",
                 "not a lowercase word"),
    "nan-footprint": ("register(Format('toy', Files('m.toy', ('.toy',)), Host('toyplug'), "
                      "Board('r', footprint_mb=float('nan'))))", "board.footprint_mb"),
    "dict-host": ("register(Format('toy', Files('m.toy', ('.toy',)), {'backend': 'x'}, Board('r')))",
                  "host is a dict"),
    "bool-preference": ("register(Format('toy', Files('m.toy', ('.toy',)), Host('toyplug'), Board('r', preference=True)))",
                        "board.preference"),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_a_plugin_registering_garbage_is_refused_in_one_line(case, checkpoint, tmp_path):
    body, words = GARBAGE[case]
    env = _plugin(tmp_path / "plug", "from edgekit.formats import Board, Files, Format, Host, register\n" + body)
    result = _run(["export", str(checkpoint), "-o", str(tmp_path / "out")], env, tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the format plug-in 'toy'") and words in last, last
    assert not (tmp_path / "out").exists()


ROUTE_GARBAGE = {
    "route-config-not-class": ("from edgekit.api import route\n@route('static', 'onnx')\ndef f(job, config): return []",
                               "is not a class"),
    "route-not-callable": ("from edgekit.api import StaticConfig, route\nroute(StaticConfig, 'onnx')(3)", "is not a function"),
    "route-clash": ("from edgekit.api import StaticConfig, route\nimport edgekit.quantize.routes.onnx\n"
                    "@route(StaticConfig, 'onnx')\ndef static(job, config): return []", "is already that route"),
    "method-garbage": ("from edgekit.api import register_method\nregister_method('static')", "takes an edgekit Method"),
    "method-clash": ("from edgekit.api import Method, register_method\nimport dataclasses\n"
                     "@dataclasses.dataclass(frozen=True)\nclass Mine: pass\nregister_method(Method('static', Mine))",
                     "the name is already"),
}


@pytest.mark.parametrize("case", sorted(ROUTE_GARBAGE))
def test_a_quantize_plugin_registering_garbage_is_refused_in_one_line(case, checkpoint, tmp_path):
    body, words = ROUTE_GARBAGE[case]
    env = _plugin(tmp_path / "plug", body, "edgekit.quantize_routes")
    result = _run(["quantize", str(checkpoint), "--method", "dynamic", "-o", str(tmp_path / "q")], env, tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the quantize plug-in 'toy'") and words in last, last
    assert not (tmp_path / "q").exists()


# -- the Python API's front door ------------------------------------------------------------------
NOT_A_PATH = [None, 3, 1.5, ["a"], {"a": 1}, b"bytes"]
NOT_A_BOOL = ["yes", 1, None, 0.0]


def _calls(ck, out):
    from edgekit import api

    for bad in NOT_A_PATH:
        yield "export", f"source={bad!r}", lambda bad=bad: api.export(bad, out)
        yield "export", f"out={bad!r}", lambda bad=bad: api.export(ck, bad)
        yield "quantize", f"out={bad!r}", lambda bad=bad: api.quantize(ck, api.DynamicConfig(), bad)
        yield "train", f"out={bad!r}", lambda bad=bad: api.train(api.TrainConfig(epochs=1), bad)
        yield "load_manifest", f"path={bad!r}", lambda bad=bad: api.load_manifest(bad)
        yield "bench", f"paths={bad!r}", lambda bad=bad: api.bench(bad)
        yield "gate", f"results={bad!r}", lambda bad=bad: api.gate(bad, "rpi4")
    for bad in NOT_A_BOOL:
        yield "export", f"force={bad!r}", lambda bad=bad: api.export(ck, out, force=bad)
        yield "quantize", f"force={bad!r}", lambda bad=bad: api.quantize(ck, api.DynamicConfig(), out, force=bad)
        yield "load_manifest", f"verify={bad!r}", lambda bad=bad: api.load_manifest(ck, verify=bad)
    for bad in [True, "1", float("nan"), float("inf"), -math.inf, [1]]:
        yield "quantize", f"max_drop={bad!r}", lambda bad=bad: api.quantize(ck, api.DynamicConfig(), out, max_drop=bad)
        yield "gate", f"min_delta_ms={bad!r}", lambda bad=bad: api.gate([], "rpi4", min_delta_ms=bad)
    for bad in [True, "4", 2.0, float("nan"), None]:
        yield "bench", f"warmup={bad!r}", lambda bad=bad: api.bench(ck, warmup=bad)
        yield "bench", f"batch={bad!r}", lambda bad=bad: api.bench(ck, batch=bad)
        if bad is not None:
            yield "export", f"opset={bad!r}", lambda bad=bad: api.export(ck, out, opset=bad)
    for bad in [3, {"a": 1}, ["rpi4"]]:
        yield "export", f"target={bad!r}", lambda bad=bad: api.export(ck, out, target=bad)
        yield "quantize", f"target={bad!r}", lambda bad=bad: api.quantize(ck, api.DynamicConfig(), out, bad)
        yield "load_target", f"{bad!r}", lambda bad=bad: api.load_target(bad)
    for bad in [3, "x"]:
        yield "quantize", f"progress={bad!r}", lambda bad=bad: api.quantize(ck, api.DynamicConfig(), out, progress=bad)
        yield "run_pipeline", f"config={bad!r}", lambda bad=bad: api.run_pipeline(bad)
        yield "train", f"config={bad!r}", lambda bad=bad: api.train(bad, out)
    yield "quantize", "too many arguments", lambda: api.quantize(ck, api.DynamicConfig(), out, "rpi4", 4, 5)


def test_public_functions_refuse_wrong_types_with_an_edgekit_error_before_writing(checkpoint, tmp_path):
    out = tmp_path / "out"
    failures = []
    count = 0
    for function, case, call in _calls(checkpoint, out):
        count += 1
        try:
            call()
            failures.append(f"{function}({case}): accepted")
        except EdgekitError as exc:
            assert isinstance(exc, (UsageError, EdgekitError))
            if "argument" in str(exc) and case.split("=")[0] in ("force", "max_drop", "warmup", "batch", "opset"):
                assert function in str(exc) and case.split("=")[0] in str(exc), str(exc)
        except BaseException as exc:  # noqa: BLE001 - the point: anything else is a finding
            failures.append(f"{function}({case}): {type(exc).__name__}: {exc}")
        assert not out.exists(), f"{function}({case}) wrote {out}"
    assert count > 60
    assert not failures, "\n".join(failures)


def test_the_front_door_message_names_argument_value_and_what_is_allowed(checkpoint, tmp_path):
    from edgekit import api

    with pytest.raises(UsageError, match=r"export\(\) argument force must be true or false \(a bool\), got 'yes' \(str\)"):
        api.export(checkpoint, tmp_path / "o", force="yes")
    with pytest.raises(UsageError, match=r"quantize\(\) argument max_drop must be a number or None, got nan"):
        api.quantize(checkpoint, api.DynamicConfig(), tmp_path / "o", max_drop=float("nan"))
    with pytest.raises(UsageError, match=r"bench\(\) argument warmup must be an integer, got True"):
        api.bench(checkpoint, warmup=True)
    with pytest.raises(UsageError, match=r"export\(\) argument source must be a string or a path"):
        api.export(None, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_import_edgekit_api_stays_light():
    code = "import sys, edgekit.api; print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.parametrize("option, value", [("--epochs", "99999999999999999999999"), ("--epochs", "10000001"),
                                           ("--max-steps", "1" + "0" * 30), ("--batch-size", "1" + "0" * 20),
                                           ("--workers", "1" + "0" * 20)])
def test_train_counts_past_any_real_run_are_refused_before_training(option, value, tmp_path):
    # found by the numeric sweep: --epochs 1e22 was accepted and trained until killed
    result = _run(["train", option, value, "--out", str(tmp_path / "x")], dict(os.environ), tmp_path)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and "(at most 10000000)" in last and "Traceback" not in result.stderr
    assert not (tmp_path / "x").exists()
