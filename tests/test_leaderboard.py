"""The leaderboards' rules beside the bundle's (bundle/sql/leaderboard.py): Spider's official execution
match and BIRD's set rule, each value hand-computed, the reasons they differ from the bundle's verdict,
and the bench family that holds the official column beside the official code."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
from pathlib import Path

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.sql import leaderboard as lb
from bundle.sql import verdict as verdict_mod
from harness.bench import leaderboard as bench_leaderboard
from harness.bench.evaluator import Evaluator

# --- the official text ------------------------------------------------------------------------------


@pytest.mark.parametrize("sql, expected", [
    ("SELECT DISTINCT a FROM t", "SELECT  a FROM t"),
    ("select count(Distinct a) from t", "select count( a) from t"),
    ("SELECT a FROM t WHERE b = 'distinct' -- distinct\n", "SELECT a FROM t WHERE b = 'distinct' -- distinct\n"),
    ('SELECT "distinct", distinct_name FROM t', 'SELECT "distinct", distinct_name FROM t'),
    ("SELECT a FROM t WHERE b > = 3 AND c ! = 2", "SELECT a FROM t WHERE b >= 3 AND c != 2"),
    ("SELECT YEAR(CURDATE()) - age FROM t", "SELECT 2020- age FROM t"),
    ("SELECT a FROM t; DROP TABLE t", "SELECT a FROM t"),
])
def test_the_official_text_is_the_first_statement_with_distinct_out(sql, expected):
    assert lb.official_text(sql) == expected


# --- the official comparison, hand-computed ---------------------------------------------------------


@pytest.mark.parametrize("gold, pred, ordered, expected", [
    ([], [], True, True),  # two empty results are equal
    ([(1,)], [], False, False),
    ([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], False, True),  # columns in any order, rows as a bag
    ([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], True, False),  # ordered: rows in the gold's order
    ([(1, "a"), (2, "b")], [("a", 1), ("b", 2)], True, True),
    ([(1,), (1,), (2,)], [(1,), (2,), (2,)], False, False),  # a bag: the counts count
    ([(1,), (2,)], [(1.0,), (2,)], False, True),  # 1 == 1.0, as Python compares them
    ([("1",)], [(1,)], False, False),  # text is not a number
    ([(0.1 + 0.2,)], [(0.3,)], False, False),  # no rounding
    ([(1, 2)], [(1,)], False, False),  # widths differ
    ([(1, 1, 2), (1, 2, 2)], [(2, 1, 1), (2, 2, 1)], False, True),  # columns 0 and 2 swapped
    ([(1, 2, 3, 4, 5)], [(5, 4, 3, 2, 1)], True, True),  # wider than 3: orders pruned by the values, still found
])
def test_the_official_comparison(gold, pred, ordered, expected):
    assert lb.official_equal(gold, pred, ordered=ordered) is expected


@pytest.mark.parametrize("gold, pred, expected", [
    ([(1,), (1,), (2,)], [(2,), (1,)], True),  # a set: duplicates do not count
    ([(1, "a")], [("a", 1)], False),  # columns in their order
    ([], [], True),
    ([(None,)], [], False),
])
def test_bird_s_rule_compares_sets_of_rows(gold, pred, expected):
    assert lb.bird_equal(gold, pred) is expected


def test_the_column_orders_tried_are_bounded_by_counted_cells():
    # Seven columns of 0s and 1s: every order of the columns is allowed by the values (7! of them),
    # and none matches: the gold's two pairs of 1s are apart, the answer's overlap.
    unit = [tuple(int(i == j) for j in range(7)) for i in range(7)]
    gold = unit + [(1, 1, 0, 0, 0, 0, 0), (0, 0, 1, 1, 0, 0, 0)]
    pred = unit + [(1, 1, 0, 0, 0, 0, 0), (0, 1, 1, 0, 0, 0, 0)]
    with pytest.raises(Exception, match="compare_max_cells"):
        lb.official_equal(gold, pred, ordered=False, cells=lb._Cells(100_000))
    assert lb.official_equal(gold, pred, ordered=False) is False  # unbounded, it ends (and says no)
    assert lb.official_equal(gold, pred[:-1] + [(0, 0, 0, 0, 0, 1, 1)], ordered=False) is True


# --- the verdicts on a database, with the reasons -----------------------------------------------------


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("leaderboard") / "pets.sqlite"
    with sqlite3.connect(path) as c:
        c.executescript("""
            CREATE TABLE pet(id INTEGER PRIMARY KEY, kind TEXT, age INTEGER, weight REAL);
            INSERT INTO pet VALUES (1, 'cat', 3, 4.5), (2, 'dog', 5, 20.0), (3, 'cat', 1, 3.25), (4, 'fish', 1, 0.1);
        """)
    c.close()
    return str(path)


def judged(database: str, sql: str, gold: str, **verdict: object) -> lb.Comparable:
    """The two rules' verdicts on ``sql``, the bundle's verdict taken as computed (or as given)."""
    found = verdict_mod.verify(sql, gold, database, is_sql=True)
    fields = {"score": found.score, "original_score": found.original_score, "decided_on": found.decided_on,
              "outcome": found.outcome, **verdict}
    return lb.comparable(sql, gold, database, DEFAULT_LIMITS, gold_steps=found.gold_steps, **fields)[:4]


def test_an_answer_every_rule_accepts_or_refuses_has_no_reason(database):
    gold = "SELECT kind FROM pet WHERE age > 2"
    assert judged(database, "SELECT kind FROM pet WHERE age >= 3", gold) == (1.0, 1.0, None, None)
    assert judged(database, "SELECT kind FROM pet", gold) == (0.0, 0.0, None, None)
    assert judged(database, "SELECT nope FROM pet", gold) == (0.0, 0.0, None, None)
    assert lb.comparable(None, gold, database, DEFAULT_LIMITS, gold_steps=10, score=0.0, original_score=0.0,
                         decided_on="original", outcome="no_query") == (0.0, 0.0, None, None, None)


def test_distinct_left_out_is_the_official_rule_s_reason(database):
    # The gold lists each kind once; an answer with the cat twice: the bundle and BIRD's set differ
    # (BIRD: a set, so it accepts: duplicates), the official rule takes DISTINCT out of the gold.
    got = judged(database, "SELECT kind FROM pet", "SELECT DISTINCT kind FROM pet")
    assert got == (1.0, 1.0, lb.DISTINCT, lb.DUPLICATES)


def test_row_order_and_columns_and_values_are_named(database):
    # Ordered in a subquery only: the official text holds "order by", so it compares in order.
    gold = "SELECT kind FROM (SELECT kind FROM pet ORDER BY age)"
    assert judged(database, "SELECT kind FROM pet ORDER BY id", gold) == (0.0, 1.0, lb.ROW_ORDER, None)
    # Columns swapped: the bundle and the official rule accept; BIRD compares columns in their order.
    assert judged(database, "SELECT age, kind FROM pet", "SELECT kind, age FROM pet") == (1.0, 0.0, None, lb.COLUMN_ORDER)
    # A float the bundle rounds (12 digits) and the official code does not.
    gold = "SELECT sum(weight) FROM pet WHERE kind = 'cat'"
    got = judged(database, "SELECT 7.750000000000001", gold)
    assert got == (0.0, 0.0, lb.VALUES, lb.VALUES)


def test_a_neighbour_and_the_search_and_a_second_statement_are_named(database):
    gold = "SELECT count(*) FROM pet"
    assert judged(database, "SELECT 4", gold, score=0.0, original_score=1.0,
                  decided_on="neighbour 2 of pets") == (1.0, 1.0, lb.NEIGHBOUR, lb.NEIGHBOUR)
    assert judged(database, "SELECT 4", gold, score=0.0, original_score=1.0,
                  decided_on="search: value 3 of pet.kind") == (1.0, 1.0, lb.SEARCH, lb.SEARCH)
    got = judged(database, "SELECT count(*) FROM pet; SELECT 1", gold)
    assert got == (1.0, 1.0, lb.SECOND_STATEMENT, lb.SECOND_STATEMENT)


def test_a_gold_that_fails_is_not_run_under_either_rule(database):
    got = lb.comparable("SELECT 1", "SELECT nope FROM pet", database, DEFAULT_LIMITS, gold_steps=100, score=0.0,
                        original_score=0.0, decided_on="original", outcome="mismatch")
    assert got[:4] == (None, None, lb.NOT_RUN, lb.NOT_RUN) and got.answer is not None  # the answer ran


# --- the grader's fields, through grade and the bundle -----------------------------------------------


def test_the_grader_gives_both_rules_beside_its_verdict(bundle_env):
    from bundle import grader
    gold = "SELECT DISTINCT T1.first_name FROM Professionals AS T1"  # a sample gold's shape is enough here
    graded = grader.grade(output="SELECT 1", expected="SELECT count(*) FROM Owner")
    assert graded["official_score"] == graded["bird_score"] == graded["score"] == 0.0
    assert graded["official_differs"] is None and graded["bird_differs"] is None
    assert gold  # the fields exist on every graded answer
    right = grader.grade(output="SELECT count(*) FROM Owner", expected="SELECT count(*) FROM Owner")
    assert right["official_score"] == right["bird_score"] == 1.0
    # The answer's key: the same rows, the same key, whatever the text; other rows, another.
    again = grader.grade(output="SELECT count(1) FROM Owner", expected="SELECT count(*) FROM Owner")
    assert right["answer"] == again["answer"] and len(right["answer"]) == 16
    assert graded["answer"] not in (None, right["answer"])
    assert grader.grade(output="SELECT nope FROM Owner", expected="SELECT count(*) FROM Owner")["answer"] is None


# --- the bench family ---------------------------------------------------------------------------------

FAKE = """
import sqlite3
CALLS = []
def eval_exec_match(db, p_str, g_str, plug_value, keep_distinct, progress_bar_for_each_datapoint):
    CALLS.append(p_str)
    run = lambda q: sorted(sqlite3.connect(db).execute(q).fetchall(), key=repr)
    try:
        return int(run(p_str) == run(g_str))
    except sqlite3.Error:
        return 0
"""


def test_the_bench_family_counts_agreement_and_lists_the_pairs_apart(database, tmp_path, monkeypatch, capsys):
    spider = tmp_path / "spider"
    (spider / "database" / "pets").mkdir(parents=True)
    (spider / "database" / "pets" / "pets.sqlite").symlink_to(database)
    rows = [{"db_id": "pets", "query": "SELECT kind FROM pet WHERE age = 1"},
            {"db_id": "pets", "query": "SELECT DISTINCT kind FROM pet"}]
    (spider / "dev.json").write_text(json.dumps(rows))
    (tmp_path / "a.sql").write_text("SELECT kind FROM pet WHERE age < 2\nSELECT kind FROM pet\n")
    (tmp_path / "b.sql").write_text("SELECT 'fish'\nSELECT DISTINCT kind FROM pet\n")
    folder = tmp_path / "evaluator"
    folder.mkdir()
    (folder / "exec_eval.py").write_text(FAKE)
    (folder / "parse.py").write_text("")
    for name in ("exec_eval", "parse"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    f = bench_leaderboard.run(spider, [tmp_path / "a.sql", tmp_path / "b.sql"], Evaluator(folder), 10)
    # The fake keeps DISTINCT and compares sorted rows: on row 1 system a's answer (the cat twice)
    # is right for the official rule (DISTINCT out) and wrong for the fake: one pair apart.
    assert f["pairs"] == 4 and f["agree"] == 3 and f["share"] == 0.75
    assert [(d["system"], d["dev_row"], d["bundle"], d["official"]) for d in f["differ"]] == [("a", 1, 1.0, 0)]
    assert f["bundle_right"] == 3 and f["official_right"] == 2
    bench_leaderboard.print_figures(f)
    out = capsys.readouterr().out
    assert "3 agree (75.0000%; target 99.9%: NOT met)" in out and "apart: a dev row 1 (pets)" in out
    bench_leaderboard.print_figures(bench_leaderboard.run(spider, [], None, 10))
    assert "not measured: no predictions given" in capsys.readouterr().out


# --- beside the official code itself, when a checkout is at hand ---------------------------------------

CHECKOUT = os.environ.get("OFFICIAL_EVALUATOR", "")


@pytest.mark.skipif(not (Path(CHECKOUT) / "exec_eval.py").is_file(),
                    reason="no checkout of taoyds/test-suite-sql-eval: set OFFICIAL_EVALUATOR=DIR to hold the "
                           "comparison beside its result_eq")
def test_the_comparison_is_the_official_result_eq_on_random_results(monkeypatch):
    for name in ("exec_eval", "parse"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    official = Evaluator(CHECKOUT).module
    draw = random.Random(41)
    values = [0, 1, 1.0, 2, "1", "a", None, True]
    for _ in range(3000):
        width, rows = draw.randint(1, 5), draw.randint(0, 4)
        gold = [tuple(draw.choice(values) for _ in range(width)) for _ in range(rows)]
        pred = [tuple(r[j] for j in draw.sample(range(width), width)) for r in gold] if draw.random() < 0.5 else \
            [tuple(draw.choice(values) for _ in range(draw.choice([width, width, width + 1])))
             for _ in range(draw.choice([rows, rows + 1]))]
        draw.shuffle(pred) if draw.random() < 0.5 else None
        ordered = draw.random() < 0.5
        assert lb.official_equal(gold, pred, ordered=ordered) == official.result_eq(gold, pred, order_matters=ordered), \
            (gold, pred, ordered)


@pytest.mark.skipif(not (Path(CHECKOUT) / "exec_eval.py").is_file() or not os.environ.get("SPIDER_DATA"),
                    reason="no checkout of taoyds/test-suite-sql-eval (OFFICIAL_EVALUATOR=DIR) or no Spider (SPIDER_DATA)")
def test_distinct_is_taken_out_as_the_official_code_takes_it_out_of_every_spider_gold(monkeypatch):
    for name in ("exec_eval", "parse"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    Evaluator(CHECKOUT)
    official = sys.modules["parse"]
    spider = Path(os.environ["SPIDER_DATA"])
    golds = {r["query"] for name in ("dev.json", "train_spider.json") for r in json.loads((spider / name).read_text())}
    apart = [g for g in sorted(golds) if lb.remove_distinct(g) != official.remove_distinct(g)]
    assert len(golds) > 4000 and apart == []
