"""Budgets: unit parsing, validation, project files and the flag > project file > target precedence."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgekit.core.errors import InputFileError, UsageError
from edgekit.gates.budgets import (
    METRIC_BY_KEY,
    METRICS,
    Budget,
    Budgets,
    find_project_file,
    load_project_budgets,
    parse_limit,
    parse_regression,
    resolve_budgets,
    result_names,
)
from edgekit.core.targets import BUDGET_KEYS, load_target


@pytest.mark.parametrize(
    ("metric", "text", "limit", "unit"),
    [
        ("size", "4MB", 4.0, "MB"),
        ("size", "4", 4.0, "MB"),
        ("size", 4, 4.0, "MB"),
        ("size", 4.5, 4.5, "MB"),
        ("size", "512KiB", 0.5, "MB"),
        ("size", "512KB", 0.5, "MB"),
        ("size", "4 mb", 4.0, "MB"),
        ("size", "4MiB", 4.0, "MB"),
        ("size", "1048576B", 1.0, "MB"),
        ("peak_rss", "768MB", 768.0, "MB"),
        ("peak_rss", "1GiB", 1024.0, "MB"),
        ("peak_rss", "1.5GB", 1536.0, "MB"),
        ("p99", "20ms", 20.0, "ms"),
        ("p99", "0.02s", 20.0, "ms"),
        ("p99", "20", 20.0, "ms"),
        ("p50", "500us", 0.5, "ms"),
        ("p50", "500µs", 0.5, "ms"),
        ("p50", "2e1ms", 20.0, "ms"),
        ("p50", ".5s", 500.0, "ms"),
        ("accuracy_drop", "1.0", 1.0, "pt"),
        ("accuracy_drop", "1pt", 1.0, "pt"),
        ("accuracy_drop", "1 pts", 1.0, "pt"),
        ("accuracy_drop", "0.5%", 0.5, "%"),
        ("accuracy_drop", "0", 0.0, "pt"),
        ("max_accuracy_drop", 1, 1.0, "pt"),  # a budget key works as well as a metric name
    ],
)
def test_parse_limit_units(metric, text, limit, unit):
    got, got_unit = parse_limit(metric, text)
    assert got == pytest.approx(limit)
    assert got_unit == unit


def test_512kib_is_half_a_megabyte_and_20ms_is_002s():
    assert parse_limit("size", "512KiB")[0] == 0.5
    assert parse_limit("p99", "0.02s")[0] == pytest.approx(parse_limit("p99", "20ms")[0])


@pytest.mark.parametrize(
    ("metric", "value", "fragment"),
    [
        ("size", "4XB", "unknown unit 'XB'"),
        ("size", "4ms", "unknown unit 'ms'"),
        ("p99", "20MB", "unknown unit 'MB'"),
        ("accuracy_drop", "1ms", "unknown unit"),
        ("size", "-1", "negative"),
        ("size", -1, "negative"),
        ("size", "nan", "cannot read"),
        ("size", float("nan"), "not a finite number"),
        ("size", float("inf"), "not a finite number"),
        ("size", "1e400", "not a finite number"),
        ("size", "", "cannot read"),
        ("size", "four", "cannot read"),
        ("size", "4 4MB", "cannot read"),
        ("size", True, "not a number"),
        ("size", None, "not a number"),
        ("size", [4], "not a number"),
        ("size", "0", "zero"),
        ("p50", 0, "zero"),
    ],
)
def test_bad_limits_raise_usage_error_naming_value_and_units(metric, value, fragment):
    with pytest.raises(UsageError) as err:
        parse_limit(metric, value, where="--max-x")
    text = str(err.value)
    assert fragment in text
    assert text.startswith("--max-x")


def test_unknown_unit_error_lists_the_allowed_units():
    with pytest.raises(UsageError, match=r"units: B, KB, KiB, MB, MiB, GB, GiB; a bare number means MB"):
        parse_limit("size", "4 parsecs")
    with pytest.raises(UsageError, match=r"us, µs, ms, s"):
        parse_limit("p99", "4h")


_SPELLINGS = [(name, spelling, canon, factor) for name, m in METRICS.items() for spelling, (canon, factor) in m.units.items()]


@given(
    case=st.sampled_from(_SPELLINGS),
    number=st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False),
    upper=st.booleans(),
    space=st.booleans(),
)
def test_numbers_with_units_round_trip(case, number, upper, space):
    metric, spelling, canon, factor = case
    written = f"{number!r}{' ' if space else ''}{spelling.upper() if upper else spelling}"
    limit, unit = parse_limit(metric, written)
    assert unit == canon
    assert limit == pytest.approx(number * factor, rel=1e-12)
    # a bare number is in the metric's default unit
    assert parse_limit(metric, repr(number)) == (pytest.approx(number), METRICS[metric].unit)


_GARBAGE = st.one_of(
    st.text(max_size=20),
    st.text(alphabet="0123456789.eE+-%kKmMgGiIbBsSuµptP ", max_size=12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)


@given(metric=st.sampled_from(sorted(METRICS)), value=_GARBAGE)
def test_garbage_raises_usage_error_never_anything_else(metric, value):
    try:
        limit, unit = parse_limit(metric, value)
    except UsageError:
        return
    assert math.isfinite(limit) and limit >= 0
    assert unit in METRICS[metric].canonical_units


@given(value=_GARBAGE)
def test_regression_garbage_raises_usage_error_only(value):
    try:
        fraction = parse_regression(value)
    except UsageError:
        return
    assert math.isfinite(fraction) and fraction >= 0


@pytest.mark.parametrize(("value", "fraction"), [("10%", 0.10), (0.10, 0.10), ("0.1", 0.10), ("0%", 0.0), ("150%", 1.5), (1, 1.0)])
def test_parse_regression(value, fraction):
    assert parse_regression(value) == pytest.approx(fraction)


@pytest.mark.parametrize(("value", "fragment"), [("10", "ambiguous"), ("-5%", "negative"), ("10ms", "unknown unit"), ("x", "cannot read")])
def test_parse_regression_errors(value, fragment):
    with pytest.raises(UsageError, match=fragment):
        parse_regression(value, "--max-regression")


def test_metrics_cover_every_target_budget_key():
    assert tuple(METRIC_BY_KEY) == BUDGET_KEYS


def test_budget_validates_itself():
    with pytest.raises(UsageError, match="unit"):
        Budget("size", 4.0, "ms", "flag")
    with pytest.raises(UsageError, match="above zero"):
        Budget("size", -1.0, "MB", "flag")
    with pytest.raises(UsageError, match="finite"):
        Budget("p50", math.nan, "ms", "flag")
    with pytest.raises(UsageError, match="unknown budget"):
        Budget("speed", 1.0, "ms", "flag")
    assert Budget("max_size_mb", 4, "MB", "flag").metric == "size"  # keys normalise to metric names


def test_result_names_most_specific_first():
    assert result_names("out/a/model.onnx", "int8") == ("int8", "model.onnx", "model", "out/a/model.onnx")
    assert result_names("model.onnx") == ("model.onnx", "model")


# -- precedence -------------------------------------------------------------------------------------


def _by_metric(budgets: tuple[Budget, ...]) -> dict[str, Budget]:
    return {b.metric: b for b in budgets}


def test_target_budgets_are_read_with_their_source():
    rpi4 = load_target("rpi4")
    got = _by_metric(Budgets.from_target("rpi4").for_model())
    assert {METRICS[m].key: b.limit for m, b in got.items()} == rpi4.budgets
    assert {b.source for b in got.values()} == {"target rpi4"}


def test_flag_overrides_target_and_keeps_the_rest(tmp_path):
    budgets = resolve_budgets("rpi4", overrides={"max_size_mb": "5MB", "max_p99_ms": None}, search_dir=tmp_path)
    got = _by_metric(budgets.for_model(["int8"]))
    assert (got["size"].limit, got["size"].source) == (5.0, "flag")
    assert (got["p99"].limit, got["p99"].source) == (20.0, "target rpi4")


def test_precedence_flag_over_model_table_over_project_file_over_target(tmp_path):
    (tmp_path / "edgekit.toml").write_text(
        "[budgets]\n"
        'max_size_mb = "3MB"\n'
        'max_p99_ms = "25ms"\n'
        "[budgets.int8-static-onnx]\n"
        "max_size_mb = 2\n"
        'max_p99_ms = "0.03s"\n'
        '[budgets."model.onnx"]\n'
        "max_p99_ms = 40\n"
    )
    budgets = resolve_budgets("rpi4", overrides={"max_p50_ms": "10"}, search_dir=tmp_path)
    plain = _by_metric(budgets.for_model(result_names("other.onnx", "fp32")))
    assert (plain["size"].limit, plain["size"].source) == (3.0, "edgekit.toml")
    assert (plain["p99"].limit, plain["p99"].source) == (25.0, "edgekit.toml")
    assert (plain["peak_rss"].limit, plain["peak_rss"].source) == (768.0, "target rpi4")
    assert (plain["p50"].limit, plain["p50"].source) == (10.0, "flag")

    scoped = _by_metric(budgets.for_model(result_names("out/model.onnx", "int8-static-onnx")))
    assert (scoped["size"].limit, scoped["size"].source) == (2.0, "edgekit.toml [budgets.int8-static-onnx]")
    assert scoped["p99"].limit == 30.0  # the variant table beats the file-name table

    by_file = _by_metric(budgets.for_model(result_names("x/model.onnx", "fp32")))
    assert by_file["p99"].limit == 40.0
    assert by_file["p99"].source == 'edgekit.toml [budgets."model.onnx"]'

    flagged = resolve_budgets("rpi4", overrides={"max_size_mb": 9}, search_dir=tmp_path)
    assert _by_metric(flagged.for_model(result_names("m.onnx", "int8-static-onnx")))["size"].source == "flag"


def test_pyproject_tool_table_is_found_and_edgekit_toml_wins(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.edgekit.budgets]\nmax_size_mb = "1MB"\n')
    assert find_project_file(tmp_path) == tmp_path / "pyproject.toml"
    got = _by_metric(resolve_budgets(search_dir=tmp_path).for_model())
    assert (got["size"].limit, got["size"].source) == (1.0, "pyproject.toml")
    (tmp_path / "edgekit.toml").write_text("[budgets]\nmax_size_mb = 2\n")
    assert find_project_file(tmp_path) == tmp_path / "edgekit.toml"


def test_pyproject_without_edgekit_table_is_ignored_unless_named(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert find_project_file(tmp_path) is None
    assert not resolve_budgets(search_dir=tmp_path)
    with pytest.raises(InputFileError, match=r"no \[tool.edgekit.budgets\] table"):
        resolve_budgets(config_path=tmp_path / "pyproject.toml")


def test_current_directory_is_searched(tmp_path, monkeypatch):
    (tmp_path / "edgekit.toml").write_text("[budgets]\nmax_p50_ms = 7\n")
    monkeypatch.chdir(tmp_path)
    assert _by_metric(resolve_budgets().for_model())["p50"].limit == 7.0
    assert not resolve_budgets(discover=False)


def test_unknown_key_in_project_file_lists_allowed_keys(tmp_path):
    path = tmp_path / "edgekit.toml"
    path.write_text("[budgets]\nmax_sise_mb = 4\n")
    with pytest.raises(InputFileError) as err:
        load_project_budgets(path)
    assert "max_sise_mb" in str(err.value)
    assert ", ".join(BUDGET_KEYS) in str(err.value)
    path.write_text("[budgets.int8]\nmax_latency = 4\n")
    with pytest.raises(InputFileError, match=r"unknown key 'max_latency' in \[budgets.int8\]"):
        load_project_budgets(path)


def test_bad_values_in_project_file_name_the_file(tmp_path):
    path = tmp_path / "ci.toml"
    path.write_text('[budgets]\nmax_p99_ms = "20 parsecs"\n')
    with pytest.raises(UsageError, match=r"ci.toml: budgets.max_p99_ms: unknown unit"):
        load_project_budgets(path)
    path.write_text("[budgets]\nmax_p99_ms = true\n")
    with pytest.raises(UsageError, match="not a number"):
        load_project_budgets(path)
    path.write_text("[budgets.a.b]\nmax_p99_ms = 1\n")
    with pytest.raises(InputFileError, match="nested too deeply"):
        load_project_budgets(path)


def test_malformed_or_missing_project_file(tmp_path):
    path = tmp_path / "edgekit.toml"
    path.write_text("[budgets\nmax_size_mb = 4\n")
    with pytest.raises(InputFileError, match="not valid TOML"):
        load_project_budgets(path)
    with pytest.raises(InputFileError, match="not found"):
        load_project_budgets(tmp_path / "nope.toml")
    path.write_text("[other]\nx = 1\n")
    with pytest.raises(InputFileError, match=r"no \[budgets\] table"):
        load_project_budgets(path)


def test_overrides_reject_unknown_keys_and_name_the_flag():
    with pytest.raises(UsageError, match="unknown budget 'max_speed'"):
        Budgets.from_mapping({"max_speed": 1})
    with pytest.raises(UsageError, match=r"^--max-p99-ms: unknown unit"):
        Budgets.from_mapping({"max_p99_ms": "20 minutes"})
