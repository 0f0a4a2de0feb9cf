"""The one table of limits (bundle/contract/limits.py): defaults, derived budgets, environment overrides."""

from __future__ import annotations

import inspect

import pytest

from bundle.contract.limits import DEFAULT_LIMITS, SETTINGS, Limits, env_name, limits_from_env
from bundle.sql import compare as sql_compare
from bundle.sql import extract as sql_extract
from bundle.sql import gold_results


def test_every_setting_is_a_field_with_a_unit_and_a_meaning():
    assert [s.name for s in SETTINGS] == [f for f in Limits.__dataclass_fields__]
    assert all(s.unit and s.meaning and getattr(DEFAULT_LIMITS, s.name) == s.default for s in SETTINGS)


@pytest.mark.parametrize("function, parameter, setting", [
    (sql_extract.extract, "max_chars", "max_completion_chars"),
    (sql_extract.extract_sql, "max_chars", "max_completion_chars"),
    (sql_compare.value_key, "digits", "float_digits"),
    (sql_compare.normalize_rows, "digits", "float_digits"),
    (sql_compare.bag_shape, "digits", "float_digits"),
    (gold_results.compute, "digits", "float_digits"),
    (sql_compare.Budget, "max_cells", "compare_max_cells"),
])
def test_parameter_defaults_come_from_the_table(function, parameter, setting):
    assert inspect.signature(function).parameters[parameter].default == getattr(DEFAULT_LIMITS, setting)


@pytest.mark.parametrize("gold_steps, budget", [
    (0, 20_000_000), (10_000_000, 20_000_000), (10_000_001, 20_000_002), (15_604_000, 31_208_000),
])
def test_the_budget_is_the_larger_of_the_floor_and_a_multiple_of_the_gold(gold_steps, budget):
    assert DEFAULT_LIMITS.budget_steps(gold_steps) == budget


@pytest.mark.parametrize("name, raw, value", [
    ("max_rows", "50", 50), ("max_rows", " 50_000 ", 50_000), ("wall_guard_s", "2.5", 2.5),
    ("wall_guard_s", "3", 3.0), ("budget_floor_steps", "100000000", 100_000_000),
])
def test_valid_overrides(name, raw, value):
    assert getattr(limits_from_env({env_name(name): raw}), name) == value


@pytest.mark.parametrize("name, raw", [
    ("max_rows", "50.7"), ("max_rows", "0.5"), ("max_rows", "5e7"), ("max_rows", "0"), ("max_rows", "-3"),
    ("max_rows", "lots"), ("max_rows", ""), ("wall_guard_s", "nan"), ("wall_guard_s", "inf"),
    ("wall_guard_s", "-1"), ("float_digits", "12.0"),
])
def test_invalid_overrides_name_the_variable_and_are_never_rounded(name, raw):
    with pytest.raises(ValueError) as raised:
        limits_from_env({env_name(name): raw})
    assert env_name(name) in str(raised.value) and "unset it" in str(raised.value)


def test_limits_in_code_are_checked_too():
    with pytest.raises(ValueError, match="max_rows must be a positive int"):
        DEFAULT_LIMITS.replace(max_rows=2.5)
    with pytest.raises(ValueError, match="wall_guard_s"):
        Limits(wall_guard_s=0)
