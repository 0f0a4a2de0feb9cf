"""The audit's catalogue: sqlparse edits of a gold, the degenerate answers, and SQL literals."""

from __future__ import annotations

import json
import sqlite3

import pytest
import sqlparse
from hypothesis import given
from hypothesis import strategies as st

from harness.audit.catalogue import POLICY_NAMES, GoldRows, candidates, literal
from harness.audit.sqledit import Query, tokenize

GOLD = ("SELECT DISTINCT T1.name FROM singer AS T1 JOIN sic AS T2 ON T1.id = T2.sid "
        "WHERE T2.year BETWEEN 2014 AND 2015 AND T1.age > 30 ORDER BY T1.age LIMIT 3")

EDITS = [
    ("SELECT DISTINCT loses its DISTINCT", "SELECT DISTINCT a FROM t", Query.without_distinct, ["SELECT a FROM t"]),
    ("a DISTINCT inside count() is one more site", "SELECT DISTINCT a, count(DISTINCT b) FROM t GROUP BY a",
     Query.without_distinct, ["SELECT a, count(DISTINCT b) FROM t GROUP BY a",
                              "SELECT DISTINCT a, count(b) FROM t GROUP BY a"]),
    ("the WHERE of a subquery is a site of its own", "SELECT a FROM t WHERE b IN (SELECT c FROM u WHERE d = 1)",
     lambda q: q.without_clause("WHERE"), ["SELECT a FROM t", "SELECT a FROM t WHERE b IN (SELECT c FROM u)"]),
    ("a keyword inside a string or a quoted name is no clause", "SELECT \"where\" FROM t WHERE x = 'a WHERE b'",
     lambda q: q.without_clause("WHERE"), ["SELECT \"where\" FROM t"]),
    ("LIMIT goes with its OFFSET", "SELECT a FROM t ORDER BY a LIMIT 2 OFFSET 1", lambda q: q.without_clause("LIMIT"),
     ["SELECT a FROM t ORDER BY a"]),
    ("GROUP BY goes with its HAVING", "SELECT a FROM t GROUP BY a HAVING count(*) > 1 ORDER BY a",
     lambda q: q.without_clause("GROUP BY"), ["SELECT a FROM t ORDER BY a"]),
    ("ORDER BY goes, its LIMIT stays", "SELECT a FROM t ORDER BY b DESC LIMIT 1", lambda q: q.without_clause("ORDER BY"),
     ["SELECT a FROM t LIMIT 1"]),
    ("every key of an ORDER BY turns around", "SELECT a FROM t ORDER BY b ASC, c, d DESC", Query.order_flipped,
     ["SELECT a FROM t ORDER BY b DESC, c DESC, d ASC"]),
    ("count(DISTINCT x) becomes count(*)", "SELECT count(DISTINCT a) FROM t", Query.count_star, ["SELECT count(*) FROM t"]),
    ("comparisons of WHERE and HAVING turn, the join's ON stays", "SELECT a FROM t JOIN u ON t.i = u.i WHERE b >= 2 "
     "GROUP BY a HAVING count(*) != 1", Query.comparisons_flipped,
     ["SELECT a FROM t JOIN u ON t.i = u.i WHERE b <= 2 GROUP BY a HAVING count(*) != 1",
      "SELECT a FROM t JOIN u ON t.i = u.i WHERE b >= 2 GROUP BY a HAVING count(*) = 1"]),
    ("BETWEEN keeps its AND when a condition is dropped", GOLD, Query.conditions_dropped,
     [GOLD.replace("T2.year BETWEEN 2014 AND 2015 AND ", ""), GOLD.replace(" AND T1.age > 30", "")]),
    ("a WHERE with OR has no condition to drop", "SELECT a FROM t WHERE b = 1 OR c = 2 AND d = 3",
     Query.conditions_dropped, []),
    ("each joined table can go, never the first", GOLD, Query.joins_dropped,
     [GOLD.replace(" JOIN sic AS T2 ON T1.id = T2.sid", "")]),
    ("max and min, sum and avg swap, keeping the case", "SELECT MAX(a), sum(b) FROM t", Query.aggregates_swapped,
     ["SELECT MIN(a), sum(b) FROM t", "SELECT MAX(a), avg(b) FROM t"]),
    ("a string's spaces are kept as they are", "SELECT a FROM t WHERE b = 'x  y'  AND c = 1", Query.conditions_dropped,
     ["SELECT a FROM t WHERE c = 1", "SELECT a FROM t WHERE b = 'x  y'"]),
]


@pytest.mark.parametrize("gold, edit, expected", [e[1:] for e in EDITS], ids=[e[0] for e in EDITS])
def test_an_edit_gives_one_rewrite_per_site(gold, edit, expected):
    assert edit(Query(gold)) == expected


def test_the_tables_a_query_reads_are_found_at_every_depth():
    query = Query('SELECT a FROM t AS x JOIN "u" ON x.i = u.i WHERE a IN (SELECT b FROM v), w')
    assert query.from_tables(0) == ["t", "u"]
    assert query.from_tables(None) == ["t", "u", "v"]


SHAPES = [
    ("one value: its value, constants, the count of each table, an empty answer", GoldRows(1, ((6,),)),
     {"value": ["SELECT 6"], "constant": ["SELECT 0", "SELECT 1"],
      "table_count": ['SELECT count(*) FROM "singer"', 'SELECT count(*) FROM "sic"'], "empty": ["SELECT NULL WHERE 0"]}),
    ("one row of two columns: no table count", GoldRows(2, (("a", 1.5),)),
     {"value": ["SELECT 'a', 1.5"], "constant": ["SELECT 0, 0", "SELECT 1, 1"], "empty": ["SELECT NULL, NULL WHERE 0"]}),
    ("a few rows: written out as literals", GoldRows(1, (("a",), (None,))),
     {"literal_rows": ["SELECT 'a' UNION ALL SELECT NULL"], "empty": ["SELECT NULL WHERE 0"]}),
    ("no row, or a gold that failed: only the empty answer", GoldRows(3, None),
     {"empty": ["SELECT NULL, NULL, NULL WHERE 0"]}),
]


@pytest.mark.parametrize("rows, expected", [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_the_data_answers_follow_the_golds_rows(rows, expected):
    found = candidates("SELECT x FROM singer", rows, ["singer", "sic"])
    data = {p: [c.sql for c in found if c.policy == p] for p in ("value", "constant", "table_count", "literal_rows", "empty")}
    assert {p: v for p, v in data.items() if v} == expected


def test_the_gold_itself_is_never_a_candidate_however_it_is_quoted():
    found = candidates('SELECT count(*) FROM "Singer"', GoldRows(1, ((3,),)), ["singer", "sic"])
    assert [c.sql for c in found if c.policy == "table_count"] == ['SELECT count(*) FROM "sic"']
    assert all(c.policy in POLICY_NAMES for c in found)


def test_every_edit_policy_applies_to_a_gold_that_has_its_construct():
    found = {c.policy for c in candidates(GOLD, GoldRows(1, (("a",), ("b",))), ["singer", "sic"])}
    assert {"no_distinct", "no_where", "no_limit", "order_flipped", "no_join", "condition_dropped",
            "comparison_flipped", "no_order_by", "select_star", "literal_rows", "empty"} <= found


@given(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), st.text(), st.binary()))
def test_a_literal_reads_back_as_the_same_value(value):
    # The same value as the scorer compares it (numbers to float_digits): SQLite's own text-to-REAL
    # conversion is off by an ulp on some values near the subnormal range (6.029667074241733e-307).
    from bundle.sql.compare import value_key
    with sqlite3.connect(":memory:") as conn:
        got = conn.execute(f"SELECT {literal(value)}").fetchone()[0]
    assert value_key(got) == value_key(value) and type(got) is type(value)


def test_equivalent_rewrites_are_matched_by_database_and_gold_and_counted_when_not_paid():
    from harness.audit import rewrites
    from harness.audit.model import AuditRow
    from harness.emulator.calls import Call

    rows = [AuditRow("eval-00000", "eval", "pets", "SELECT count(*)  FROM pets;"), AuditRow("rl-00000", "rl", "zoo", "SELECT 1")]
    corpus = [{"db_id": "pets", "kind": "aliases", "gold": "SELECT count(*) FROM pets", "rewrite": "SELECT count(*) FROM pets AS p"},
              {"db_id": "pets", "kind": "join order", "gold": "SELECT count(*) FROM pets", "rewrite": "SELECT count(1) FROM pets"},
              {"db_id": "other", "kind": "aliases", "gold": "SELECT count(*) FROM pets", "rewrite": "SELECT 2"}]
    found = rewrites.matching(rows, corpus, {"rl": "reward", "eval": "grader"})
    assert [task[3] for task, _kind in found["eval"]] == ["SELECT count(*) FROM pets AS p", "SELECT count(1) FROM pets"]
    calls = {found["eval"][0][0]: Call(1.0, "scored"), found["eval"][1][0]: Call(0.0, "scored")}
    section = rewrites.section(found, calls, ("rl", "eval"))
    assert section["splits"] == {"rl": {"scored": 0, "rejected": 0}, "eval": {"scored": 2, "rejected": 1}}
    assert [r["rewrite"] for r in section["rejected"]] == ["SELECT count(1) FROM pets"]


def _grouped_tokens(sql: str) -> list[tuple[str, object]]:
    """The leaves of ``sqlparse.parse``'s first statement, grouping and all (what tokenize read before)."""
    parsed = sqlparse.parse(sql)
    return [(t.value, t.ttype) for t in parsed[0].flatten()] if parsed else []


def test_tokenize_without_grouping_gives_the_tokens_parse_gives(spider_dir):
    golds = sorted({row["query"] for row in json.loads((spider_dir / "dev.json").read_text())})
    texts = golds + [c.sql for gold in golds for c in candidates(gold, GoldRows(1, ((1,),)), ["t"])]
    texts += ["", ";", "SELECT 1; SELECT 2", "  -- a comment\n SELECT \"a\" FROM [b] WHERE x = 'y''z' ;"]
    assert len(texts) > 5000
    differ = [sql for sql in texts if [(t.text, t.ttype) for t in tokenize(sql)] != _grouped_tokens(sql)]
    assert not differ, differ[:3]
