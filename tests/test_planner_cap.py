"""The query planner's work bounded before it is spent (bundle/sql/planner.py, issue 38): the tables each
FROM clause joins are read from the text and weighed (the cube of each clause's tables, flattened),
and a query over ``max_join_weight`` is refused before SQLite prepares it. Nothing here reads a clock:
what is checked is the count, and that nothing ran."""

from __future__ import annotations

import json

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.sql import guard as sql_guard
from bundle.sql import planner as sql_planner
from bundle.verify import verify


def self_join(copies: int) -> str:
    """The issue's join: course_arrange's three key columns, each tied by `=` to two other copies."""
    terms = [f"t{i}.{c} = t{(i + step) % copies}.{c}" for i in range(copies)
             for c in ("Course_ID", "Teacher_ID", "Grade") for step in (1, 2)]
    return ("SELECT count(*) FROM " + ", ".join(f"course_arrange AS t{i}" for i in range(copies))
            + " WHERE " + " AND ".join(terms))


def natural(copies: int) -> str:
    return "SELECT count(*) FROM " + " NATURAL JOIN ".join(["course_arrange"] * copies)


@pytest.mark.parametrize("sql, weight", [
    ("SELECT 1", 0),
    ("SELECT name FROM singer", 1),
    ("SELECT * FROM a JOIN b ON a.x = b.x LEFT OUTER JOIN c USING (y), d", 64),
    ("SELECT * FROM a NATURAL JOIN b CROSS JOIN c", 27),
    ("SELECT * FROM a WHERE x IN (SELECT x FROM b, c)", 1 + 8),  # a subquery outside FROM: a clause of its own
    ("SELECT * FROM a JOIN b ON b.x = (SELECT max(x) FROM c, d)", 8 + 8),  # a join condition's subquery too
    ("SELECT * FROM a, (SELECT * FROM b JOIN c) AS s", 27 + 8),  # flattened into its reader: 3 tables
    ("SELECT * FROM a, (b JOIN c)", 27),  # a parenthesised join list
    ("SELECT * FROM (SELECT x FROM b UNION ALL SELECT x FROM c, d)", 27 + 1 + 8),  # every arm added
    ("WITH w AS (SELECT * FROM b, c) SELECT * FROM a, w, w AS v", 125 + 2 * 8),  # a body copied at each reference
    ('WITH "W"(x) AS (SELECT 1 FROM b, c) SELECT * FROM a, [w]', 27 + 8),  # quoting and ASCII case as SQLite reads
    ("SELECT a IS NOT DISTINCT FROM b FROM t", 1),  # DISTINCT FROM is an operator, not a clause
    ("SELECT 'from a, b, c' FROM t -- FROM x, y", 1),  # strings and comments
    ("SELECT * FROM json_each('[1]'), t", 8),  # a table-valued function is a table
], ids=["no from", "one table", "four joined", "natural and cross", "in a subquery", "in a join condition",
        "subquery in from", "parenthesised join", "compound subquery", "cte twice", "quoted cte", "distinct from",
        "strings and comments", "table-valued function"])
def test_the_weight_is_read_as_sqlite_reads_the_text(sql, weight):
    assert sql_planner.weight(sql) == weight


def test_the_weight_grows_as_the_cube_of_one_clause():
    assert [sql_planner.weight(natural(n)) for n in (2, 8, 10, 11, 64)] == [8, 512, 1_000, 1_331, 64 ** 3]
    assert sql_planner.weight(natural(64), limit=2_000) > 2_000  # counting may stop past the limit


@pytest.fixture
def course_teach(spider_dir) -> str:
    path = spider_dir / "database" / "course_teach" / "course_teach.sqlite"
    if not path.is_file():
        pytest.skip(f"{path} not found: the issue's database is Spider's course_teach")
    yield str(path)
    sql_guard.forget_connections()


@pytest.mark.parametrize("sql", [self_join(64), natural(64), self_join(11),
                                 f"SELECT count(*) FROM teacher WHERE ({self_join(64)}) >= 0",
                                 f"SELECT count(*) FROM teacher WHERE ({natural(64)}) >= 0"],
                         ids=["64-way self-join", "64 natural joins", "11-way self-join", "a right answer hiding one",
                              "a right answer hiding 64 natural joins"])
def test_the_issues_joins_are_refused_before_they_are_prepared(course_teach, sql):
    verdict = verify(sql, "SELECT count(*) FROM teacher", course_teach, is_sql=True)
    assert (verdict.outcome, verdict.score) == ("prediction_over_cap", 0.0), verdict.detail
    assert "weigh more than max_join_weight (1,000" in verdict.detail and not verdict.steps  # nothing ran


def test_a_join_within_the_weight_still_runs(course_teach):
    sql = self_join(10)
    assert sql_planner.weight(sql) == 1_000 and sql_planner.weight(f"SELECT ({sql}) >= 0") == 1_000
    assert verify(sql, sql.replace("count(*)", "count(t0.Grade)"), course_teach, is_sql=True).outcome == "match"
    # the same join read through a subquery in FROM counts twice (it may be flattened into its reader): refused
    assert sql_planner.weight(f"SELECT * FROM ({sql})") == 2_000


def test_a_second_statement_too_costly_to_plan_is_still_a_second_statement(course_teach):
    verdict = verify("SELECT count(*) FROM teacher;\n" + natural(64), "SELECT count(*) FROM teacher", course_teach)
    assert verdict.outcome == "forbidden" and "several statements" in verdict.detail


def test_no_spider_gold_nears_the_weight(spider_dir):
    golds = [row["query"] for name in ("dev.json", "train_spider.json", "train_others.json")
             if (spider_dir / name).is_file() for row in json.loads((spider_dir / name).read_text(encoding="utf-8"))]
    if not golds:
        pytest.skip(f"no Spider questions in {spider_dir}")
    heaviest = max(sql_planner.weight(g) for g in golds)
    assert heaviest <= DEFAULT_LIMITS.max_join_weight // 4, heaviest  # docs/bundle.md gives 250
