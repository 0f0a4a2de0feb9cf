"""Spider difficulty levels: hand-counted cases, and Spider's own levels on its dev set."""

from __future__ import annotations

import collections
import json

import pytest

from harness.report.difficulty import Counts, DifficultyError, count_components, difficulty, level_of

# (sql, component1, component2, others, level): counts worked out by hand from the rules in
# harness/difficulty.py's docstring.
CASES = [
    ("SELECT count(*) FROM singer", 0, 0, 0, "easy", "a bare aggregate is easy"),
    ("SELECT name FROM singer WHERE age > 30", 1, 0, 0, "easy", "one WHERE condition is easy"),
    ("select  count(*)\nfrom singer ;", 0, 0, 0, "easy", "case, newlines and a semicolon do not matter"),
    ("SELECT name FROM t WHERE age BETWEEN 20 AND 30", 1, 0, 0, "easy",
     "BETWEEN's AND does not make a second condition"),
    ("SELECT name, age FROM singer", 0, 0, 1, "medium", "two selected columns count once"),
    ("SELECT name FROM singer WHERE age > 30 AND country = 'France'", 1, 0, 1, "medium",
     "two WHERE conditions count as others"),
    ("SELECT name FROM singer WHERE name LIKE '%a%'", 2, 0, 0, "medium", "LIKE is a component"),
    ("SELECT a FROM t WHERE x = 1 OR y = 2", 2, 0, 1, "medium", "OR is a component, and two conditions"),
    ("SELECT T1.name FROM a AS T1 JOIN b AS T2 ON T1.id = T2.id WHERE T2.x = 1", 2, 0, 0, "medium",
     "a JOIN counts one per extra table"),
    ("SELECT name FROM a, b WHERE a.id = b.id", 2, 0, 0, "medium", "a comma join counts like JOIN"),
    ("SELECT name FROM t WHERE x = 1 GROUP BY name ORDER BY name", 3, 0, 0, "hard",
     "three components are hard"),
    ("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)", 1, 1, 0, "hard",
     "one nested query with little else is hard"),
    ("SELECT name FROM a UNION SELECT name FROM b", 0, 1, 0, "hard", "a set operation is nested"),
    ("SELECT name FROM a INTERSECT SELECT name FROM b EXCEPT SELECT name FROM c", 0, 1, 0, "hard",
     "a chain of set operations counts once, as Spider's parse nests the rest"),
    ("SELECT name FROM t WHERE id IN (SELECT id FROM u UNION SELECT id FROM v)", 1, 1, 0, "hard",
     "a set operation inside a sub-query is not the outer query's"),
    ("SELECT x FROM (SELECT a AS x FROM t) WHERE x > 1", 1, 0, 0, "easy",
     "a sub-query in FROM is a table, not a nested query"),
    ("SELECT T2.name, count(*) FROM concert AS T1 JOIN stadium AS T2 ON T1.id = T2.id "
     "GROUP BY T1.stadium_id ORDER BY count(*) DESC LIMIT 1", 4, 0, 2, "extra",
     "join, group, order and limit: extra"),
    ("SELECT name FROM t WHERE id NOT IN (SELECT id FROM u)", 1, 1, 0, "hard",
     "NOT IN: one nested query; the negation alone is one 'aggregation'"),
    ("SELECT count(*) FROM t WHERE id NOT IN (SELECT id FROM u)", 1, 1, 1, "extra",
     "Spider's rules read a negated WHERE condition as an aggregation: with count(*) that is two"),
    ("SELECT city FROM owner GROUP BY city HAVING count(*) > 1", 1, 0, 0, "easy",
     "Spider's rules do not count HAVING's own aggregate"),
    ("SELECT name, count(*) FROM t GROUP BY name HAVING count(*) > 1 AND sum(x) > 2", 1, 0, 2, "medium",
     "each AND joining HAVING conditions counts as an aggregation"),
    ("SELECT max(a), min(a) FROM t", 0, 0, 2, "medium", "two aggregates and two columns"),
    ("SELECT name FROM t ORDER BY sum(a) - sum(b) DESC", 1, 0, 1, "medium",
     "ORDER BY counts each aggregate of its expression"),
    ("SELECT a, b FROM t GROUP BY a, b", 1, 0, 2, "medium", "two GROUP BY columns count as others"),
]


@pytest.mark.parametrize("sql, c1, c2, others, level", [pytest.param(*c[:5], id=c[5]) for c in CASES])
def test_hand_counted_levels(sql, c1, c2, others, level):
    assert count_components(sql) == Counts(c1, c2, others)
    assert difficulty(sql) == level


@pytest.mark.parametrize("counts, level", [
    pytest.param(Counts(1, 0, 0), "easy", id="one component"),
    pytest.param(Counts(1, 0, 2), "medium", id="up to two others with one component"),
    pytest.param(Counts(2, 0, 1), "medium", id="two components and one other"),
    pytest.param(Counts(2, 0, 2), "extra", id="two components and two others fit no hard rule"),
    pytest.param(Counts(2, 0, 3), "hard", id="many others with few components"),
    pytest.param(Counts(3, 0, 2), "hard", id="three components"),
    pytest.param(Counts(4, 0, 0), "extra", id="four components"),
    pytest.param(Counts(0, 1, 0), "hard", id="one nested query alone"),
    pytest.param(Counts(0, 2, 0), "extra", id="two nested queries"),
    pytest.param(Counts(2, 1, 0), "extra", id="a nested query with two components"),
])
def test_level_boundaries(counts, level):
    assert level_of(counts) == level


@pytest.mark.parametrize("sql", [
    pytest.param("", id="empty"),
    pytest.param("DROP TABLE t", id="not a query"),
    pytest.param("SELECT (a FROM t", id="unbalanced parenthesis"),
    pytest.param("SELECT a) FROM t", id="closing parenthesis too many"),
])
def test_unreadable_sql_raises(sql):
    with pytest.raises(DifficultyError):
        difficulty(sql)


# -- Spider's own levels ---------------------------------------------------------------------------
# Spider's dev.json carries each gold's parse tree ("sql"). These functions apply the published
# hardness rules to that tree, as the official evaluation does; the module under test never sees it.
def _tree_counts(sql: dict) -> Counts:
    conds = sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]
    joiners = sql["from"]["conds"][1::2] + sql["where"][1::2] + sql["having"][1::2]
    c1 = sum(bool(sql[k]) for k in ("where", "groupBy", "orderBy")) + (sql["limit"] is not None)
    c1 += max(len(sql["from"]["table_units"]) - 1, 0) + joiners.count("or") + sum(c[1] == 9 for c in conds)
    c2 = sum(isinstance(c[3], dict) + isinstance(c[4], dict) for c in conds)
    c2 += sum(sql[k] is not None for k in ("intersect", "except", "union"))

    def aggregated(units: list) -> int:  # the official reading: first element differs from 0
        return sum(1 for u in units if u[0] != 0)

    aggs = aggregated(sql["select"][1]) + aggregated(sql["where"][::2]) + aggregated(sql["groupBy"])
    if sql["orderBy"]:
        aggs += aggregated([v[1] for v in sql["orderBy"][1] if v[1]] + [v[2] for v in sql["orderBy"][1] if v[2]])
    aggs += aggregated(sql["having"])
    others = (aggs > 1) + (len(sql["select"][1]) > 1) + (len(sql["where"]) > 1) + (len(sql["groupBy"]) > 1)
    return Counts(c1, c2, others)


@pytest.mark.real_data
def test_every_spider_dev_query_gets_spiders_own_level(spider_dir):
    rows = json.loads((spider_dir / "dev.json").read_text(encoding="utf-8"))
    wrong = [(r["query"], difficulty(r["query"]), level_of(_tree_counts(r["sql"])))
             for r in rows if difficulty(r["query"]) != level_of(_tree_counts(r["sql"]))]
    assert wrong == []
    # the per-level counts Spider's evaluation script prints for the dev set
    counts = collections.Counter(difficulty(r["query"]) for r in rows)
    assert counts == {"easy": 248, "medium": 446, "hard": 174, "extra": 166}


@pytest.mark.real_data
def test_every_spider_train_query_is_classified(spider_dir):
    rows = json.loads((spider_dir / "train_spider.json").read_text(encoding="utf-8"))
    levels = collections.Counter(difficulty(r["query"]) for r in rows)
    assert sum(levels.values()) == len(rows) and set(levels) == {"easy", "medium", "hard", "extra"}
