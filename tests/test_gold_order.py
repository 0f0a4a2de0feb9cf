"""Gold results with order: ORDER BY keys read from SQLite, ties grouped, LIMIT cutting a tie (sql/gold_results.py)."""

from __future__ import annotations

import sqlite3

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.sql import functions as sql_functions
from bundle.sql import gold_results
from bundle.sql import guard as sql_guard
from bundle.sql import text as sql_text
from bundle.verify import gold_result, gold_shape, verify

SCRIPT = """
CREATE TABLE p(id INTEGER PRIMARY KEY, name TEXT, team TEXT, points INTEGER, height REAL);
INSERT INTO p VALUES (1,'Ava','red',120,1.7),(2,'Ben','red',95,1.8),(3,'Cleo','blue',40,1.6),
 (4,'Dev','blue',120,1.9),(5,'Eli','green',15,1.8),(6,'Finn','green',0,1.5),(7,'Gus','red',60,1.8);
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("order") / "p.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(SCRIPT)
    yield str(path)
    sql_guard.forget_connections()


def segments(shape):
    return [(s.start, s.end, None if s.pool is None else sorted(v[0][1] for v in s.pool)) for s in shape.segments]


def test_unordered_gold_is_one_bag(db):
    shape = gold_shape("SELECT name FROM p", db)
    assert not shape.ordered and segments(shape) == [(0, 7, None)]


def test_ties_on_an_unselected_key_are_grouped(db):
    shape = gold_shape("SELECT name FROM p ORDER BY height", db)
    # heights 1.5, 1.6, 1.7, 1.8 x3, 1.9
    assert shape.ordered and segments(shape) == [(0, 1, None), (1, 2, None), (2, 3, None), (3, 6, None), (6, 7, None)]


def test_key_given_by_ordinal_and_by_alias(db):
    by_ordinal = gold_shape("SELECT team, count(*) FROM p GROUP BY team ORDER BY 2 DESC", db)
    by_alias = gold_shape("SELECT team, count(*) AS n FROM p GROUP BY team ORDER BY n DESC", db)
    assert segments(by_ordinal) == segments(by_alias) == [(0, 1, None), (1, 3, None)]


def test_limit_cutting_a_tie_keeps_every_member(db):
    shape = gold_shape("SELECT name FROM p ORDER BY points DESC LIMIT 1", db)
    assert segments(shape) == [(0, 1, ["Ava", "Dev"])]
    for name in ("Ava", "Dev"):
        assert verify(f"SELECT '{name}'", "SELECT name FROM p ORDER BY points DESC LIMIT 1", db).outcome == "match"
    assert verify("SELECT 'Ben'", "SELECT name FROM p ORDER BY points DESC LIMIT 1", db).outcome == "mismatch"


def test_limit_not_cutting_a_tie_is_exact(db):
    shape = gold_shape("SELECT name FROM p ORDER BY points DESC LIMIT 2", db)
    assert segments(shape) == [(0, 2, None)]


def test_offset_and_limit_window(db):
    # points desc: 120,120,95,60,40,15,0 -> offset 1 cuts the first tie from the other side.
    shape = gold_shape("SELECT name FROM p ORDER BY points DESC LIMIT 2 OFFSET 1", db)
    assert segments(shape) == [(0, 1, ["Ava", "Dev"]), (1, 2, None)]
    comma_form = gold_shape("SELECT name FROM p ORDER BY points DESC LIMIT 1, 2", db)
    assert segments(comma_form) == segments(shape)


def test_distinct_with_unselected_key_falls_back_to_strict_order(db):
    shape = gold_shape("SELECT DISTINCT team FROM p ORDER BY height", db)
    assert shape.ordered
    assert all(s.end - s.start == 1 and s.pool is None for s in shape.segments)


def test_compound_ordered_by_a_result_column(db):
    shape = gold_shape("SELECT name FROM p WHERE team = 'red' UNION SELECT name FROM p WHERE points > 100 ORDER BY 1",
                       db)
    assert shape.ordered and [s.end - s.start for s in shape.segments] == [1] * len(shape.rows)


def test_order_inside_a_subquery_does_not_count(db):
    shape = gold_shape("SELECT name FROM (SELECT name FROM p ORDER BY points LIMIT 3)", db)
    assert not shape.ordered


def test_json_round_trip_keeps_pools_blobs_and_steps(db):
    gold = gold_result("SELECT name, x'00ff', NULL FROM p ORDER BY points DESC LIMIT 1", db)
    again = gold_results.from_json(gold_results.to_json(gold))
    assert again == gold and gold.steps >= 0


def test_a_stored_result_without_steps_is_not_used(db):
    # Bundles built before step budgets: the gold runs again to learn its steps.
    stored = gold_results.to_json(gold_result("SELECT name FROM p", db))
    del stored["steps"]
    assert gold_results.from_json(stored) is None


@pytest.mark.parametrize("sql, terms, limit, offset", [
    ("SELECT a FROM t ORDER BY a DESC, b COLLATE nocase ASC LIMIT 3", ("a", "b"), 3, 0),
    ("SELECT a FROM t ORDER BY max(a, b) NULLS LAST LIMIT 5 OFFSET 2", ("max(a, b)",), 5, 2),
    ("SELECT a FROM t ORDER BY a LIMIT 2, 9", ("a",), 9, 2),
    ("SELECT a FROM t ORDER BY a LIMIT (SELECT 1)", ("a",), None, 0),
    ("SELECT a FROM t WHERE a IN (SELECT a FROM u ORDER BY a LIMIT 1)", (), None, 0),
    ("SELECT count(*) OVER (ORDER BY a) FROM t", (), None, 0),
], ids=["two keys", "function key", "comma limit", "expression limit", "subquery order", "window order"])
def test_outer_clause_analysis(sql, terms, limit, offset):
    clauses = sql_text.outer_clauses(sql)
    assert (clauses.order_terms, clauses.limit, clauses.offset) == (terms, limit, offset)


def test_gold_runs_with_the_gold_budget(db):
    slow = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    with pytest.raises(sql_guard.QueryFailed) as failed:
        gold_shape(slow, db, DEFAULT_LIMITS.replace(gold_max_steps=200_000))
    # Stopped at the first count over the budget: the compile charge plus 200 units of 1,000 steps.
    compile_steps = sql_functions.compile_charge(slow, DEFAULT_LIMITS.charge_base_steps)
    assert failed.value.kind == sql_guard.OVER_BUDGET and failed.value.steps == 200_000 + compile_steps
