"""The functions a query may call (bundle/sql/functions.py): only deterministic ones, each charged
for the work it does, and the charged ones giving exactly what SQLite's own functions give."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.sql import functions as sql_functions
from bundle.sql import guard as sql_guard
from bundle.verify import verify

# One call of every function a query may call, with arguments that exercise it.
EXAMPLES = {
    "abs": "abs(-3.5)", "coalesce": "coalesce(NULL, 'x')", "ifnull": "ifnull(NULL, 2)", "iif": "iif(1 > 2, 'a', 'b')",
    "likelihood": "likelihood(1 = 1, 0.5)", "likely": "likely(2)", "unlikely": "unlikely(3)", "max": "max(1, 'a', 2.5)",
    "min": "min(1, 'a', 2.5)", "nullif": "nullif(1, 1)", "round": "round(2.5678, 2)", "typeof": "typeof(1.5)",
    "unicode": "unicode('é')", "zeroblob": "hex(zeroblob(3))", "avg": "(SELECT avg(x) FROM v)",
    "count": "(SELECT count(x) FROM v)", "group_concat": "(SELECT group_concat(x, '-') FROM v)",
    "sum": "(SELECT sum(x) FROM v)", "total": "(SELECT total(x) FROM v)",
    "row_number": "(SELECT group_concat(r) FROM (SELECT row_number() OVER (ORDER BY x) AS r FROM v))",
    "rank": "(SELECT group_concat(r) FROM (SELECT rank() OVER (ORDER BY x % 2) AS r FROM v))",
    "dense_rank": "(SELECT group_concat(r) FROM (SELECT dense_rank() OVER (ORDER BY x % 2) AS r FROM v))",
    "percent_rank": "(SELECT group_concat(r) FROM (SELECT percent_rank() OVER (ORDER BY x) AS r FROM v))",
    "cume_dist": "(SELECT group_concat(r) FROM (SELECT cume_dist() OVER (ORDER BY x) AS r FROM v))",
    "ntile": "(SELECT group_concat(r) FROM (SELECT ntile(2) OVER (ORDER BY x) AS r FROM v))",
    "lag": "(SELECT group_concat(r) FROM (SELECT lag(x) OVER (ORDER BY x) AS r FROM v))",
    "lead": "(SELECT group_concat(r) FROM (SELECT lead(x, 1, 0) OVER (ORDER BY x) AS r FROM v))",
    "first_value": "(SELECT group_concat(r) FROM (SELECT first_value(x) OVER (ORDER BY x) AS r FROM v))",
    "last_value": "(SELECT group_concat(r) FROM (SELECT last_value(x) OVER (ORDER BY x) AS r FROM v))",
    "nth_value": "(SELECT group_concat(r) FROM (SELECT nth_value(x, 2) OVER (ORDER BY x) AS r FROM v))",
    "length": "length('héllo')", "lower": "lower('ÀbC')", "upper": "upper('àbc')", "hex": "hex('é')",
    "quote": "quote('it''s')", "char": "char(72, 105)", "substr": "substr('hello', -3, 2)",
    "substring": "substring('hello', 2)", "like": "'Hello' LIKE 'h%O'", "glob": "'Hello' GLOB 'H*[l]o'",
    "instr": "instr('hello', 'll')", "replace": "replace('banana', 'an', 'AN')", "trim": "trim('xxhixx', 'x')",
    "ltrim": "ltrim('  hi')", "rtrim": "rtrim('hi!!', '!')", "date": "date('2020-02-28', '+2 days')",
    "time": "time('12:34:56', '+1 hour')", "datetime": "datetime(1700000000, 'unixepoch')",
    "julianday": "julianday('2000-01-01')", "strftime": "strftime('%Y-%j', '2021-03-04')",
}
WITH_VALUES = "WITH v(x) AS (VALUES (3), (1), (2), (5)) SELECT "
ROOT = Path(__file__).resolve().parents[1]


def test_every_callable_function_has_an_example():
    assert set(EXAMPLES) == set(sql_functions.CALLABLE)


def test_allowed_and_refused_are_apart():
    assert not sql_functions.CALLABLE & sql_functions.REFUSED


@pytest.fixture
def db(fixture_dbs):
    yield str(fixture_dbs["pets_club"])
    sql_guard.forget_connections()


def _run(db: str, expression: str) -> tuple:
    raw = sql_guard.run_query(db, WITH_VALUES + expression, DEFAULT_LIMITS, budget_steps=10**7, wall_s=60)
    return raw.rows[0][0], raw.steps


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_allowed_function_answers_the_same_twice(db, name):
    first = _run(db, EXAMPLES[name])
    sql_guard.forget_connections()  # a fresh connection, a fresh side connection
    assert _run(db, EXAMPLES[name]) == first  # the value and the work counted


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_allowed_function_answers_the_same_in_another_process(db, name):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from bundle.sql import guard as sql_guard; "
            "from bundle.contract.limits import DEFAULT_LIMITS as L; "
            "r = sql_guard.run_query(sys.argv[2], sys.argv[3], L, budget_steps=10**7, wall_s=60); "
            "print(repr((r.rows[0][0], r.steps)))")
    done = subprocess.run([sys.executable, "-c", code, str(ROOT), db, WITH_VALUES + EXAMPLES[name]],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == repr(_run(db, EXAMPLES[name]))


@pytest.mark.parametrize("name", sorted(sql_functions.CHARGED))
def test_charged_functions_give_exactly_what_sqlite_gives(db, name):
    plain = sqlite3.connect(":memory:")
    expected = plain.execute(WITH_VALUES + EXAMPLES[name]).fetchone()[0]
    assert _run(db, EXAMPLES[name])[0] == expected


EDGE_ARGUMENTS = ["NULL", "1", "-2.5", "1e300", "'é'", "''", "x'00ff'", "'%'", "'a_b'", "3.0"]


def _plain_answer(plain: sqlite3.Connection, call: str) -> object:
    """SQLite's own (type, quoted value) of ``call``; the error's kind where it fails; "error" where
    the value is text that is not UTF-8, which a charged function cannot hand back (docs/bundle.md)."""
    try:
        kind, quoted, raw = plain.execute(f"SELECT typeof({call}), quote({call}), {call}").fetchone()
    except sqlite3.Error:
        return "error"
    if kind == b"text":
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return "error"
    return kind, quoted


@pytest.mark.parametrize("name, arity", [(n, a) for n, (arities, _k) in sorted(sql_functions.CHARGED.items())
                                         for a in arities if a in (1, 2)])
def test_charged_functions_match_sqlite_on_edge_arguments(db, name, arity):
    plain = sqlite3.connect(":memory:")
    plain.text_factory = bytes
    for args in ([a] for a in EDGE_ARGUMENTS) if arity == 1 else ([a, b] for a in EDGE_ARGUMENTS for b in EDGE_ARGUMENTS[:5]):
        call = f"{name}({', '.join(args)})"
        expected = _plain_answer(plain, call)
        try:
            raw = sql_guard.run_query(db, f"SELECT typeof({call}), quote({call})", DEFAULT_LIMITS,
                                      budget_steps=10**7, wall_s=60)
            got: object = tuple(v.encode() if isinstance(v, str) else v for v in raw.rows[0])
        except sql_guard.QueryFailed as failed:
            got = "error" if failed.kind in ("error", "forbidden") else failed.kind
        assert got == expected, call


def _other_builtins() -> list[tuple[str, int]]:
    """(name, an arity SQLite accepts) of this SQLite's functions a query may not call."""
    rows = sqlite3.connect(":memory:").execute("SELECT name, narg FROM pragma_function_list").fetchall()
    keywords = {"current_date", "current_time", "current_timestamp"}  # called without parentheses
    return sorted({(n, max(a, 1) if a < 0 else a) for n, a in rows
                   if n.lower() not in sql_functions.CALLABLE and n.isidentifier() and n.lower() not in keywords})


@pytest.mark.parametrize("name, arity", _other_builtins())
def test_every_other_function_of_this_sqlite_is_forbidden(db, name, arity):
    verdict = verify(f"SELECT {name}({', '.join(['1'] * arity)})", "SELECT 1", db, is_sql=True)
    assert (verdict.outcome, verdict.score) == ("forbidden", 0.0), verdict.detail


@pytest.mark.parametrize("name", sorted(sql_functions.REFUSED - {"current_date", "current_time", "current_timestamp"}))
def test_refused_names_are_forbidden_whether_or_not_this_sqlite_has_them(db, name):
    verdict = verify(f"SELECT {name}(1, 2)", "SELECT 1", db, is_sql=True)
    assert verdict.outcome == "forbidden", verdict.detail


@pytest.mark.parametrize("sql", [
    "SELECT date('now')", "SELECT date('NOW', '+1 day')", "SELECT date()", "SELECT time(' now ')",
    "SELECT datetime(0, 'unixepoch', 'localtime')", "SELECT julianday('2020-01-01', 'utc')",
    "SELECT strftime('%s', 'now')", "SELECT CURRENT_DATE", "SELECT current_time", "SELECT random()",
    "SELECT randomblob(2)", "SELECT sqlite_version()", "SELECT value FROM json_each('[1]')",
], ids=lambda s: s[7:40])
def test_the_clock_randomness_and_the_build_are_forbidden(db, sql):
    verdict = verify(sql, "SELECT 1", db, is_sql=True)
    assert (verdict.outcome, verdict.score) == ("forbidden", 0.0), verdict.detail


def _function_charge(db: str, expression: str) -> int:
    """The steps one call of ``expression`` was charged: the query's, less its compile charge and its one cell's."""
    fixed = sql_functions.compile_charge(WITH_VALUES + expression, DEFAULT_LIMITS.charge_base_steps)
    return _run(db, expression)[1] - fixed - sql_functions.CELL_STEPS


def test_a_charged_call_counts_its_work(db):
    base, per_step = DEFAULT_LIMITS.charge_base_steps, DEFAULT_LIMITS.charge_bytes_per_step
    cheap = _function_charge(db, "length('ab')")
    costly = _function_charge(db, f"length('{'a' * 240}')")
    assert cheap == base + 2 // per_step and costly == base + 240 // per_step


def test_a_search_pays_for_every_pair_it_may_compare(db):
    per_step = DEFAULT_LIMITS.charge_bytes_per_step
    steps = _function_charge(db, f"instr('{'a' * 200}', '{'a' * 99}b')")
    assert steps == DEFAULT_LIMITS.charge_base_steps + 201 * 101 * 4 // per_step


def test_values_and_records_are_capped(db):
    cap = DEFAULT_LIMITS.max_cell_bytes
    fits = verify(f"SELECT length(hex(zeroblob({cap // 2 - 8})))", "SELECT 1", db, is_sql=True)
    too_big = verify(f"SELECT length(hex(zeroblob({cap})))", "SELECT 1", db, is_sql=True)
    assert fits.outcome == "mismatch" and too_big.outcome == "prediction_over_cap"


def test_a_costly_function_per_row_is_over_budget_not_slow(db):
    limits = DEFAULT_LIMITS.replace(budget_floor_steps=1_000_000)
    sql = ("WITH RECURSIVE n(i, s) AS (SELECT 1, replace(hex(zeroblob(240)), '0', 'a') UNION ALL "
           "SELECT i + 1, s FROM n) SELECT count(*) FROM n WHERE s || i LIKE '%' || substr(s, 1, 200) || 'b'")
    verdict = verify(sql, "SELECT 1", db, is_sql=True, limits=limits)
    assert verdict.outcome == "prediction_over_budget"
    # Stopped within one call's charge (text <= 488 bytes, pattern 202) and one reporting unit of the budget.
    call = DEFAULT_LIMITS.charge_base_steps + 489 * 203 * 4 // DEFAULT_LIMITS.charge_bytes_per_step
    assert 1_000_000 < verdict.steps <= 1_000_000 + call + DEFAULT_LIMITS.progress_steps
