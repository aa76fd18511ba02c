"""Property-based tests of the parsers that read what users type and the files they download:
whatever the input, each parser returns a valid value or raises edgekit's own error for bad
input, never anything else (a crash would be an internal error with exit code 1)."""

from __future__ import annotations

import copy
import json
import math
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from edgekit.core.errors import InputFileError, UsageError

CORPUS = Path(__file__).resolve().parent / "corpus"
REPO = Path(__file__).resolve().parent.parent
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON-like values, nested: what a hand-edited or hostile file can hold.
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=12)


def _paths(obj, prefix=()):
    """Every (path, value) in a nested dict/list."""
    yield prefix, obj
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from _paths(value, prefix + (index,))


@st.composite
def mutated(draw, base):
    """``base`` with one value replaced, one key dropped or one key added, somewhere inside."""
    doc = copy.deepcopy(base)
    paths = [p for p, _ in _paths(doc)]
    path = draw(st.sampled_from(paths))
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if not path:
        return draw(JSON) if action == "replace" else doc
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if action == "replace":
        parent[key] = draw(JSON)
    elif action == "drop" and isinstance(parent, dict):
        del parent[key]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=8))] = draw(JSON)
    return doc


# ---------------------------------------------------------------------------------------------
# input shapes: runner.parse_shape and `edgekit bench --shape`

NAMES = st.text(alphabet=st.characters(blacklist_characters="=", blacklist_categories=("Cs", "Zs", "Cc")),
                min_size=1, max_size=12).filter(lambda s: s.strip() == s and s)


@SETTINGS
@given(text=st.text(max_size=30))
def test_parse_shape_returns_positive_dims_or_value_error(text):
    from edgekit.board.inputs import parse_shape

    try:
        name, dims = parse_shape(text)
    except ValueError as exc:
        assert str(exc).startswith("malformed shape") and "\n" not in str(exc)
        return
    assert name and name == name.strip() and "=" not in name
    assert dims and all(isinstance(d, int) and d > 0 for d in dims)


@SETTINGS
@given(name=NAMES, dims=st.lists(st.integers(min_value=1, max_value=10**6), min_size=1, max_size=6),
       upper=st.booleans())
def test_parse_shape_round_trips(name, dims, upper):
    from edgekit.board.inputs import parse_shape

    text = f"{name}={('X' if upper else 'x').join(map(str, dims))}"
    assert parse_shape(text) == (name, tuple(dims))


@SETTINGS
@given(texts=st.lists(st.text(max_size=20), max_size=3))
def test_cli_shape_option_raises_usage_error_only(texts):
    from edgekit.cli.bench import _parse_shapes

    try:
        shapes = _parse_shapes(texts)
    except UsageError as exc:
        assert str(exc).startswith("--shape") and "\n" not in str(exc)
        return
    assert len(shapes) == len(texts) and all(all(d > 0 for d in dims) for dims in shapes.values())


# ---------------------------------------------------------------------------------------------
# budgets and units (parse_limit / parse_regression garbage: tests/gates/test_gates_budgets.py)

BUDGET_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10**30), max_value=10**30),
    st.text(alphabet="0123456789.eE+-%kKmMgGiIbBsSuµpt ", max_size=10), st.booleans(), st.none(),
    st.lists(st.integers(), max_size=2),
)


@SETTINGS
@given(values=st.dictionaries(st.sampled_from(["max_size_mb", "max_p50_ms", "max_p99_ms", "max_peak_rss_mb",
                                               "max_accuracy_drop", "max_speed", ""]), BUDGET_VALUES, max_size=4))
def test_budget_flags_raise_usage_error_only(values):
    from edgekit.gates.budgets import Budgets

    try:
        budgets = Budgets.from_mapping(values)
    except UsageError:
        return
    for budget in budgets.entries:
        assert math.isfinite(budget.limit) and budget.limit >= 0


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # a TOML basic string


TOML_SCALARS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(2**63), max_value=2**63 - 1),
                         st.text(alphabet="0123456789.eE+-%kKmMgGiBsuµpt ", max_size=10), st.booleans(),
                         st.lists(st.integers(min_value=0, max_value=9), max_size=2))
BUDGET_KEYS = st.sampled_from(["max_size_mb", "max_p99_ms", "max_peak_rss_mb", "max_accuracy_drop", "speed"])


@SETTINGS
@given(top=st.dictionaries(BUDGET_KEYS, TOML_SCALARS, max_size=4),
       per_model=st.dictionaries(st.sampled_from(["int8-static-onnx", "model.onnx", "x"]),
                                 st.dictionaries(BUDGET_KEYS, TOML_SCALARS, max_size=3), max_size=2))
def test_project_budget_files_raise_edgekit_errors_only(top, per_model):
    from edgekit.gates.budgets import load_project_budgets

    lines = ["[budgets]"] + [f"{k} = {_toml_value(v)}" for k, v in top.items()]
    for model, table in per_model.items():
        lines += [f'[budgets."{model}"]'] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    text = "\n".join(lines) + "\n"
    tomllib.loads(text)  # the generator writes valid TOML: the parser under test gets past it
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "edgekit.toml"
        path.write_text(text, encoding="utf-8")
        try:
            budgets = load_project_budgets(path)
        except (UsageError, InputFileError):
            return
    for budget in budgets.entries:
        assert math.isfinite(budget.limit) and budget.limit >= 0


# ---------------------------------------------------------------------------------------------
# target profiles

RPI4 = tomllib.loads((REPO / "targets" / "rpi4.toml").read_text())


@SETTINGS
@given(data=st.one_of(JSON, st.dictionaries(st.sampled_from(["name", "cpu", "runtime", "budgets", "description", "x"]),
                                             JSON, max_size=5)))
def test_parse_target_on_random_data_raises_input_file_error_only(data):
    from edgekit.core.targets import parse_target

    try:
        parse_target(data, "random.toml")
    except InputFileError as exc:
        assert str(exc).startswith("random.toml") and "\n" not in str(exc)


@SETTINGS
@given(data=mutated(RPI4))
def test_parse_target_on_edited_profiles_raises_input_file_error_only(data):
    from edgekit.core.targets import parse_target

    try:
        target = parse_target(data, "edited.toml")
    except InputFileError:
        return
    assert target.ram_mb > 0 and target.threads > 0 and target.cores > 0
    assert all(math.isfinite(v) and v > 0 for v in target.budgets.values())


# ---------------------------------------------------------------------------------------------
# manifests


def _good_manifest() -> dict:
    return {
        "schema": "edgekit.manifest", "schema_version": 1, "kind": "export",
        "model": {"name": "digits-cnn", "config": {"width": 16}},
        "inputs": [{"name": "input", "shape": [None, 1, 8, 8], "dtype": "float32", "dynamic_axes": {"0": "batch"},
                    "value_range": None}],
        "outputs": ["logits"],
        "files": [{"path": "model.onnx", "format": "onnx", "sha256": "0" * 64, "bytes": 5, "precision": "fp32",
                   "metrics": {}, "details": {}}],
        "task": {"type": "classification"}, "quantization": None, "metrics": {}, "parent": None,
        "target": "rpi4", "versions": {}, "created": "",
    }


GOOD_MANIFEST = _good_manifest()


@SETTINGS
@given(data=st.one_of(JSON, mutated(GOOD_MANIFEST)))
def test_manifest_from_dict_raises_input_file_error_only(data):
    from edgekit.formats.artifacts import Manifest

    try:
        manifest = Manifest.from_dict(data, "m.json")
    except InputFileError as exc:
        assert str(exc).startswith("m.json") and "\n" not in str(exc)
        return
    for entry in manifest.files:
        assert not Path(entry.path).is_absolute() and ".." not in Path(entry.path).parts
    manifest.to_dict()  # what was accepted can be written back


@SETTINGS
@given(data=st.one_of(JSON, mutated(GOOD_MANIFEST)), raw=st.booleans(), content=st.binary(max_size=8))
def test_load_manifest_on_random_json_raises_input_file_error_only(data, raw, content):
    from edgekit.formats.artifacts import load_manifest

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "art"
        root.mkdir()
        (root / "model.onnx").write_bytes(content)
        try:
            text = json.dumps(data)
        except ValueError:
            return
        (root / "manifest.json").write_text(text if not raw else text[: len(text) // 2], encoding="utf-8")
        try:
            load_manifest(root)
        except InputFileError:
            pass


# ---------------------------------------------------------------------------------------------
# bench documents

GOOD_BENCH = json.loads((CORPUS / "bench" / "good.json").read_text())


@SETTINGS
@given(doc=st.one_of(JSON, mutated(GOOD_BENCH)))
def test_bench_documents_raise_input_file_error_only(doc):
    from edgekit.records.result import from_document

    try:
        results = from_document(doc, "bench.json")
    except InputFileError as exc:
        assert str(exc).startswith("bench.json") and "\n" not in str(exc)
        return
    for result in results:  # what a gate compares is a real, finite measurement
        timing = result.timing
        assert all(math.isfinite(getattr(timing, k)) and getattr(timing, k) >= 0
                   for k in ("p50", "p90", "p95", "p99", "mean", "std", "min", "max", "load", "first_run"))
        assert timing.runs >= 1 and result.model.bytes >= 0 and math.isfinite(result.memory.peak_rss)
        assert result.accuracy_drop_points is None or math.isfinite(result.accuracy_drop_points)
        result.to_dict()


# ---------------------------------------------------------------------------------------------
# host strings, ssh options and remote paths

SHELL_SPECIALS = set(" \t\n;|&$`'\"\\<>(){}*?!#~^")


@SETTINGS
@given(text=st.one_of(st.text(max_size=40), st.from_regex(r"[a-z_][a-z0-9_.-]{0,8}@[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True)))
def test_host_strings_parse_or_raise_usage_error(text):
    from edgekit.remote.hosts import parse_host

    try:
        host = parse_host(text)
    except UsageError as exc:
        assert "\n" not in str(exc).strip()
        return
    assert not host.destination.startswith("-")
    assert not (set(host.destination) & SHELL_SPECIALS), host.destination
    assert all(c.isprintable() for c in host.destination)
    assert parse_host(host.text) == host


@SETTINGS
@given(user=st.from_regex(r"[a-z_][a-z0-9_-]{0,15}", fullmatch=True),
       labels=st.lists(st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True), min_size=1, max_size=4))
def test_plain_user_at_hostname_is_accepted(user, labels):
    from edgekit.remote.hosts import parse_host

    assume(not labels[-1].isdigit())
    host = parse_host(f"{user}@{'.'.join(labels)}")
    assert host.destination == f"{user}@{'.'.join(labels)}"


@SETTINGS
@given(text=st.text(max_size=40))
def test_ssh_options_and_remote_paths_raise_usage_error_only(text):
    from edgekit.remote.hosts import check_remote_path, parse_ssh_option

    try:
        option = parse_ssh_option(text)
        key, _, value = option.partition("=")
        assert key.isalnum() and value and all(c.isprintable() for c in value)
    except UsageError:
        pass
    try:
        assert check_remote_path(text, "--remote-dir") == text
        assert "\x00" not in text and "\n" not in text and not text.startswith("-")
    except UsageError:
        pass


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
@settings(max_examples=60, deadline=None)
@given(args=st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                             max_size=12), max_size=4))
def test_remote_command_quoting_keeps_every_argument_literal(args):
    """What sshd does with the command line (hands it to the login shell as one string) gives the
    script back exactly the arguments edgekit passed, whatever characters they hold."""
    from edgekit.remote.ssh import command

    with tempfile.TemporaryDirectory() as folder:
        line = command('for a in "$@"; do printf "%s\\0" "$a"; done', *args)
        proc = subprocess.run(["sh", "-c", line], cwd=folder, capture_output=True, check=True)
        assert proc.stdout.decode("utf-8", "surrogateescape").split("\x00")[:-1] == args
        assert list(Path(folder).iterdir()) == []  # nothing ran that could create a file


# ---------------------------------------------------------------------------------------------
# generated manifests and target files: read, or one InputFileError; names that reach files and
# READMEs stay plain tokens

JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                      st.text(max_size=12))
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                              st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                          max_leaves=20)
GOOD_FILE = {"path": "model.onnx", "format": "onnx", "sha256": "0" * 64, "bytes": 10}
MANIFEST_FIELDS = {
    "schema": st.sampled_from(["edgekit.manifest", "other"]),
    "schema_version": st.one_of(st.just(1), JSON_LEAF),
    "kind": st.one_of(st.sampled_from(["checkpoint", "quantized", "export"]), JSON_LEAF),
    "model": st.one_of(st.fixed_dictionaries({"name": st.text(max_size=20)}), JSON_VALUE),
    "inputs": st.one_of(st.just([{"name": "input", "shape": [None, 1, 8, 8], "dtype": "float32",
                                  "dynamic_axes": {"0": "batch"}}]), JSON_VALUE),
    "outputs": st.one_of(st.just(["logits"]), JSON_VALUE),
    "files": st.one_of(st.just([GOOD_FILE]), st.lists(st.fixed_dictionaries(
        {k: st.one_of(st.just(v), JSON_LEAF) for k, v in GOOD_FILE.items()}), max_size=2), JSON_VALUE),
    "target": st.one_of(st.none(), st.text(max_size=12), JSON_LEAF),
}


@SETTINGS
@given(doc=st.fixed_dictionaries({}, optional=MANIFEST_FIELDS))
def test_generated_manifests_load_or_raise_one_input_error(doc):
    from edgekit.formats.artifacts import Manifest

    try:
        manifest = Manifest.from_dict(doc, "manifest.json")
    except InputFileError as exc:
        assert "\n" not in str(exc).strip()
        return
    for entry in manifest.files:  # every listed path stays inside the artifact folder
        for rel in entry.paths():
            assert not Path(rel).is_absolute() and ".." not in Path(rel).parts


TARGET_TEXT = st.one_of(st.text(max_size=20), st.from_regex(r"[a-z0-9-]{1,10}", fullmatch=True))


@SETTINGS
@given(name=TARGET_TEXT, description=st.text(max_size=30), core=TARGET_TEXT,
       cores=st.one_of(st.integers(-5, 2**40), st.floats(allow_nan=True)), threads=st.integers(-5, 2**20),
       ram=st.integers(-5, 2**40), platform=TARGET_TEXT, isa=st.lists(TARGET_TEXT, max_size=3))
def test_generated_target_files_parse_or_raise_one_input_error(name, description, core, cores, threads, ram, platform, isa):
    import re

    from edgekit.core.targets import parse_target

    data = {"name": name, "description": description,
            "cpu": {"arch": "aarch64", "core": core, "cores": cores, "ram_mb": ram, "isa": isa},
            "runtime": {"threads": threads, "quantized_engine": "qnnpack", "python_platform": platform}}
    try:
        target = parse_target(data, "board.toml")
    except InputFileError as exc:
        assert "\n" not in str(exc).strip()
        return
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,64}", target.name)  # safe in a file name, README or argv
    assert target.description.isprintable() and "\n" not in target.description
    assert all(re.fullmatch(r"[A-Za-z0-9._-]{1,64}", flag) for flag in target.isa)
    assert 0 < target.cores <= 1024 and 0 < target.threads <= 1024 and 0 < target.ram_mb <= 1 << 24
