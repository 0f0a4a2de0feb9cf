"""The near-miss families (harness/audit/nearmiss/families.py): each family's edit, determinism, the held-out split, and
that every near miss prepares and runs on its database (the sample's, and with $SPIDER_DATA every dev gold's)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
import sqlglot

from conftest import sample_rows
from harness.audit.nearmiss import families
from harness.audit.nearmiss.context import generate
from harness.audit.nearmiss.families import ALL, DESCRIPTIONS, HELD_OUT, NEEDS_DATABASE, TUNING, NearMiss, near_misses

# (family, database of the embedded sample or None, gold, a near miss the family must give).
CASES = [
    ("boundary", None, "SELECT name FROM Owner WHERE age < 40", "SELECT name FROM Owner WHERE age <= 40"),
    ("equality_to_range", None, "SELECT name FROM Owner WHERE age = 29", "SELECT name FROM Owner WHERE age >= 29"),
    ("comparison_reversed", None, "SELECT name FROM Owner WHERE age >= 40", "SELECT name FROM Owner WHERE age <= 40"),
    ("having_boundary", None, "SELECT city FROM Owner GROUP BY city HAVING count(*) > 1",
     "SELECT city FROM Owner GROUP BY city HAVING COUNT(*) >= 1"),
    ("condition_negated", None, "SELECT name FROM Pet WHERE species = 'dog'",
     "SELECT name FROM Pet WHERE NOT (species = 'dog')"),
    ("conjunct_dropped", None, "SELECT name FROM Pet WHERE species = 'dog' AND weight > 10",
     "SELECT name FROM Pet WHERE species = 'dog'"),
    ("where_dropped", None, "SELECT name FROM Pet WHERE species = 'dog' AND weight > 10", "SELECT name FROM Pet"),
    ("nested_condition_dropped", None,
     "SELECT name FROM Owner WHERE owner_id IN (SELECT owner_id FROM Pet WHERE species = 'cat')",
     "SELECT name FROM Owner WHERE owner_id IN (SELECT owner_id FROM Pet)"),
    ("disjunct_dropped", None, "SELECT name FROM Pet WHERE species = 'dog' OR species = 'cat'",
     "SELECT name FROM Pet WHERE species = 'cat'"),
    ("and_or_swapped", None, "SELECT name FROM Pet WHERE species = 'dog' AND weight > 10",
     "SELECT name FROM Pet WHERE species = 'dog' OR weight > 10"),
    ("number_shifted", None, "SELECT name FROM Owner WHERE age > 40", "SELECT name FROM Owner WHERE age > 41"),
    ("number_neighbour", "pets_club", "SELECT name FROM Owner WHERE age > 40",
     "SELECT name FROM Owner WHERE age > 42"),  # the ages are 29, 34, 42, 51, 63
    ("text_replaced", "pets_club", "SELECT name FROM Pet WHERE species = 'dog'",
     "SELECT name FROM Pet WHERE species = 'fish'"),  # the species after 'dog' in SQLite's order
    ("text_case_changed", None, "SELECT name FROM Pet WHERE species = 'Dog'",
     "SELECT name FROM Pet WHERE species = 'dog'"),
    ("literal_quoted", None, "SELECT title FROM Book WHERE year = 2011", "SELECT title FROM Book WHERE year = '2011'"),
    ("between_strict", None, "SELECT name FROM Pet WHERE weight BETWEEN 3 AND 5",
     "SELECT name FROM Pet WHERE (weight > 3 AND weight < 5)"),
    ("like_pattern", None, "SELECT name FROM Owner WHERE name LIKE '%an%'",
     "SELECT name FROM Owner WHERE name LIKE 'an%'"),
    ("like_equals_swapped", None, "SELECT name FROM Owner WHERE city LIKE '%Lyon%'",
     "SELECT name FROM Owner WHERE city = 'Lyon'"),
    ("in_negated", None, "SELECT name FROM Owner WHERE owner_id NOT IN (SELECT owner_id FROM Pet)",
     "SELECT name FROM Owner WHERE owner_id IN (SELECT owner_id FROM Pet)"),
    ("exists_negated", None,
     "SELECT name FROM Owner AS T1 WHERE EXISTS (SELECT 1 FROM Pet AS T2 WHERE T2.owner_id = T1.owner_id)",
     "SELECT name FROM Owner AS T1 WHERE NOT EXISTS(SELECT 1 FROM Pet AS T2 WHERE T2.owner_id = T1.owner_id)"),
    ("null_test_negated", None, "SELECT name FROM Owner WHERE city IS NULL",
     "SELECT name FROM Owner WHERE NOT city IS NULL"),
    ("subquery_value", "pets_club", "SELECT name FROM Owner WHERE age > (SELECT avg(age) FROM Owner)",
     "SELECT name FROM Owner WHERE age > 41.333333333333336"),
    ("subquery_value", "pets_club", "SELECT name FROM Owner WHERE owner_id NOT IN (SELECT owner_id FROM Pet)",
     "SELECT name FROM Owner WHERE NOT owner_id IN (1, 2, 3, 4, 6, 5)"),
    ("count_star", None, "SELECT count(*) FROM Pet WHERE species = 'dog'",
     "SELECT COUNT(species) FROM Pet WHERE species = 'dog'"),
    ("count_distinct", None, "SELECT count(DISTINCT species) FROM Pet", "SELECT COUNT(*) FROM Pet"),
    ("count_distinct", None, "SELECT count(*) FROM Pet WHERE species = 'dog'",
     "SELECT COUNT(DISTINCT species) FROM Pet WHERE species = 'dog'"),
    ("count_distinct", "pets_club", "SELECT count(*) FROM Owner WHERE city = 'Lyon'",
     "SELECT COUNT(DISTINCT age) FROM Owner WHERE city = 'Lyon'"),  # a column the gold never names (csu_1's Year)
    ("aggregate_distinct", None, "SELECT sum(weight) FROM Pet", "SELECT SUM(DISTINCT weight) FROM Pet"),
    ("select_distinct", None, "SELECT DISTINCT species FROM Pet", "SELECT species FROM Pet"),
    ("select_distinct", None, "SELECT species FROM Pet", "SELECT DISTINCT species FROM Pet"),
    ("extreme_swapped", None, "SELECT max(weight) FROM Pet", "SELECT MIN(weight) FROM Pet"),
    ("aggregate_swapped", None, "SELECT avg(weight) FROM Pet", "SELECT SUM(weight) FROM Pet"),
    ("order_flipped", None, "SELECT name FROM Pet ORDER BY weight DESC LIMIT 1",
     "SELECT name FROM Pet ORDER BY weight ASC LIMIT 1"),
    ("order_dropped", None, "SELECT name FROM Pet ORDER BY weight DESC LIMIT 1", "SELECT name FROM Pet LIMIT 1"),
    ("order_key_changed", "pets_club", "SELECT name FROM Pet ORDER BY weight DESC LIMIT 1",
     "SELECT name FROM Pet ORDER BY pet_id DESC LIMIT 1"),
    ("limit_added", None, "SELECT name FROM Pet ORDER BY weight DESC",
     "SELECT name FROM Pet ORDER BY weight DESC LIMIT 1"),
    ("limit_dropped", None, "SELECT name FROM Pet ORDER BY weight DESC LIMIT 1 OFFSET 2",
     "SELECT name FROM Pet ORDER BY weight DESC"),
    ("limit_changed", None, "SELECT name FROM Pet ORDER BY weight DESC LIMIT 3",
     "SELECT name FROM Pet ORDER BY weight DESC LIMIT 3 OFFSET 1"),
    ("group_key_changed", "pets_club",
     "SELECT T1.name, count(*) FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id GROUP BY T1.owner_id",
     "SELECT T1.name, COUNT(*) FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id GROUP BY T1.name"),
    ("group_dropped", None, "SELECT city, count(*) FROM Owner GROUP BY city HAVING count(*) > 1",
     "SELECT city, COUNT(*) FROM Owner"),
    ("having_dropped", None, "SELECT city, count(*) FROM Owner GROUP BY city HAVING count(*) > 1",
     "SELECT city, COUNT(*) FROM Owner GROUP BY city"),
    ("join_dropped", None,
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.owner_id > 2",
     "SELECT T1.name FROM Owner AS T1 WHERE T1.owner_id > 2"),
    ("join_added", "pets_club", "SELECT count(*) FROM Owner WHERE age > 30",
     "SELECT COUNT(*) FROM Owner JOIN Pet ON Owner.owner_id = Pet.owner_id WHERE age > 30"),
    ("left_join", None, "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id",
     "SELECT T1.name FROM Owner AS T1 LEFT JOIN Pet AS T2 ON T1.owner_id = T2.owner_id"),
    ("join_key_swapped", "school_sports", "SELECT T1.name FROM Team AS T1 JOIN Game AS T2 ON T1.team_id = T2.home_team",
     "SELECT T1.name FROM Team AS T1 JOIN Game AS T2 ON T1.team_id = T2.away_team"),
    ("column_swapped", "pets_club", "SELECT name FROM Owner WHERE age > 40", "SELECT city FROM Owner WHERE age > 40"),
    ("operands_swapped", None, "SELECT home_score - away_score FROM Game", "SELECT away_score - home_score FROM Game"),
    ("operator_changed", None, "SELECT home_score + away_score FROM Game", "SELECT home_score - away_score FROM Game"),
    ("set_operation_swapped", None,
     "SELECT name FROM Owner WHERE age > 40 EXCEPT SELECT name FROM Owner WHERE city = 'Porto'",
     "SELECT name FROM Owner WHERE city = 'Porto' EXCEPT SELECT name FROM Owner WHERE age > 40"),
    ("condition_column_swapped", "pets_club", "SELECT name FROM Pet WHERE weight > 10",
     "SELECT name FROM Pet WHERE pet_id > 10"),  # numbers for a number; never a text column
    ("aggregate_column_swapped", "pets_club", "SELECT avg(weight) FROM Pet", "SELECT AVG(birth_year) FROM Pet"),
    ("in_list_shrunk", None, "SELECT name FROM Pet WHERE species IN ('dog', 'cat')",
     "SELECT name FROM Pet WHERE species IN ('cat')"),
    ("argmax_as_subquery", None,
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species = 'dog' "
     "ORDER BY T2.weight LIMIT 1",
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species = 'dog' "
     "AND T2.weight = (SELECT MIN(T2.weight) FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id "
     "WHERE T2.species = 'dog')"),
    ("extreme_as_order_limit", None,
     "SELECT name FROM Pet WHERE species = 'dog' AND weight = (SELECT min(weight) FROM Pet WHERE species = 'dog')",
     "SELECT name FROM Pet WHERE species = 'dog' ORDER BY weight ASC LIMIT 1"),
    ("set_operation_as_condition", None,
     "SELECT name FROM Owner WHERE age > 40 INTERSECT SELECT name FROM Owner WHERE city = 'Porto'",
     "SELECT name FROM Owner WHERE age > 40 AND city = 'Porto'"),
    ("set_operation_as_condition", None,
     "SELECT name FROM Owner WHERE age > 40 EXCEPT SELECT name FROM Owner WHERE city = 'Porto'",
     "SELECT name FROM Owner WHERE age > 40 AND NOT (city = 'Porto')"),
    ("set_side_dropped", None,
     "SELECT name FROM Owner WHERE age > 40 INTERSECT SELECT name FROM Owner WHERE city = 'Porto'",
     "SELECT name FROM Owner WHERE city = 'Porto'"),
]


def _database(fixture_dbs: dict[str, Path], db_id: str | None) -> Path | None:
    return fixture_dbs[db_id] if db_id else None


def test_every_family_has_a_case_and_a_description():
    assert {family for family, *_ in CASES} == set(ALL)
    assert set(DESCRIPTIONS) == set(ALL) and all(DESCRIPTIONS.values())
    assert len(ALL) >= 30 and len(set(ALL)) == len(ALL)


@pytest.mark.parametrize("family, db_id, gold, expected", CASES, ids=[f"{c[0]}: {c[2]}" for c in CASES])
def test_family_gives_its_edit(fixture_dbs, family, db_id, gold, expected):
    found = near_misses(gold, _database(fixture_dbs, db_id), families=[family])
    assert expected in [m.sql for m in found]
    assert all(m.family == family and m.note for m in found)


@pytest.mark.parametrize("family, db_id, gold, expected", [c for c in CASES if c[1]],
                         ids=[f"{c[0]} without a database" for c in CASES if c[1]])
def test_what_reads_the_database_is_not_made_without_one(family, db_id, gold, expected):
    without = near_misses(gold, None, families=[family])
    if family in NEEDS_DATABASE:
        assert without == []
    else:
        assert expected not in [m.sql for m in without]


def test_the_others_need_no_database():
    assert {c[0] for c in CASES if not c[1]} == set(ALL) - set(NEEDS_DATABASE)


def test_the_note_says_what_changed():
    (miss,) = near_misses("SELECT name FROM emp WHERE salary < 50000", families=["boundary"])
    assert miss == NearMiss("boundary", "SELECT name FROM emp WHERE salary <= 50000",
                            "salary < 50000 -> salary <= 50000")


def test_a_text_in_double_quotes_is_read_as_the_text_it_is(fixture_dbs):
    found = near_misses('SELECT name FROM Pet WHERE species = "dog"', fixture_dbs["pets_club"],
                        families=["text_replaced"])
    assert "SELECT name FROM Pet WHERE species = 'cat'" in [m.sql for m in found]


def test_an_edit_that_does_not_run_on_the_database_is_dropped(fixture_dbs):
    gold = "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species = 'cat'"
    without = [m.sql for m in near_misses(gold, None, families=["join_dropped"])]
    assert without == ["SELECT T1.name FROM Owner AS T1 WHERE T2.species = 'cat'"]  # no database: not checked
    assert near_misses(gold, fixture_dbs["pets_club"], families=["join_dropped"]) == []


def test_same_output_twice_no_duplicates_none_equal_to_the_gold(fixture_dbs):
    for split in ("train", "validation"):
        for row in sample_rows(split):
            first = near_misses(row["query"], fixture_dbs[row["db_id"]])
            assert first == near_misses(row["query"], fixture_dbs[row["db_id"]])
            sqls = [m.sql for m in first]
            assert len(sqls) == len(set(sqls))
            assert row["query"] not in sqls
            order = [ALL.index(m.family) for m in first]
            assert order == sorted(order)


def test_families_choose_and_unknown_names_are_refused():
    gold = "SELECT name FROM Pet WHERE weight > 10 ORDER BY weight LIMIT 2"
    every = near_misses(gold)
    chosen = near_misses(gold, families=["limit_changed", "boundary"])
    assert chosen == [m for m in every if m.family in ("limit_changed", "boundary")]
    with pytest.raises(ValueError, match="unknown near-miss families"):
        near_misses(gold, families=["no_such_family"])


def test_a_family_gives_the_same_near_misses_whichever_others_are_asked_for(fixture_dbs):
    for split in ("train", "validation"):
        for row in sample_rows(split)[::4]:
            db = fixture_dbs[row["db_id"]]
            every = near_misses(row["query"], db)
            for family in ALL:
                assert near_misses(row["query"], db, families=[family]) == [m for m in every if m.family == family]


def test_a_gold_sqlglot_cannot_read_gives_nothing():
    assert near_misses("There are 4 teams.") == []


def test_held_out_is_a_fixed_third_chosen_by_the_seed():
    recomputed = tuple(n for n in ALL if hashlib.sha256(
        ("spider-scoring-near-miss-families:2026-12-02" + n).encode()).digest()[0] < 86)
    assert HELD_OUT == recomputed
    assert TUNING == tuple(n for n in ALL if n not in HELD_OUT)
    assert 0.25 <= len(HELD_OUT) / len(ALL) <= 0.42  # about a third (decided per name, see families.held_out)


def _runs(conn: sqlite3.Connection, sql: str) -> bool:
    try:
        conn.execute(sql).fetchall()
    except sqlite3.Error:
        return False
    return True


def test_every_near_miss_of_the_sample_runs_on_its_database(fixture_dbs):
    made = set()
    for split in ("train", "validation"):
        for row in sample_rows(split):
            db = fixture_dbs[row["db_id"]]
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                for miss in near_misses(row["query"], db):
                    assert _runs(conn, miss.sql), (row["query"], miss)
                    made.add(miss.family)
    assert len(made) >= 20  # the sample's golds exercise most families


# The three sets' dev-gold tests share one worker: a set's near misses of a gold are made once a
# process (harness/audit/nearmiss/context.remembered), and each set asks the ones before it for theirs.
@pytest.mark.xdist_group("near-misses-of-the-dev-golds")
@pytest.mark.real_data
@pytest.mark.slow
def test_every_near_miss_of_every_dev_gold_runs(spider_dir):
    items = json.loads((spider_dir / "dev.json").read_text(encoding="utf-8"))
    total = 0
    for item in items:
        db = spider_dir / "database" / item["db_id"] / f"{item['db_id']}.sqlite"
        if not db.is_file():
            continue  # wta_1: absent from this project's copy of Spider (docs/disputed-golds.md)
        found = near_misses(item["query"], db)
        total += len(found)
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            for miss in found:
                assert _runs(conn, miss.sql), (item["query"], miss)
        assert len({m.sql for m in found}) == len(found)
    assert total >= 10 * len(items)  # many near misses a gold (about 16 on average)


@pytest.mark.parametrize("family, db_id, gold, absent", [
    ("condition_column_swapped", "pets_club", "SELECT name FROM Pet WHERE weight > 10",
     "SELECT name FROM Pet WHERE species > 10"),
    ("select_distinct", None, "SELECT count(*) FROM Pet", "SELECT DISTINCT COUNT(*) FROM Pet"),
    ("select_distinct", None, "SELECT name FROM Owner AS T1 WHERE EXISTS (SELECT 1 FROM Pet)",
     "SELECT name FROM Owner AS T1 WHERE EXISTS(SELECT DISTINCT 1 FROM Pet)"),
    ("set_operation_as_condition", None,
     "SELECT name FROM Owner WHERE age > 40 INTERSECT SELECT name FROM Pet WHERE species = 'dog'",
     "SELECT name FROM Owner WHERE age > 40 AND species = 'dog'"),
    ("comparison_reversed", None, "SELECT T1.name FROM Owner AS T1, Pet AS T2 WHERE T1.owner_id = T2.owner_id",
     "SELECT T1.name FROM Owner AS T1, Pet AS T2 WHERE T1.owner_id <> T2.owner_id"),
], ids=["a text column for a number", "DISTINCT on one row", "DISTINCT in EXISTS", "INTERSECT of two tables",
        "a join key reversed"])
def test_edits_that_change_nothing_or_make_no_sense_are_not_made(fixture_dbs, family, db_id, gold, absent):
    found = [m.sql for m in near_misses(gold, _database(fixture_dbs, db_id), families=[family])]
    assert absent not in found


def test_the_gold_written_back_by_sqlglot_is_the_gold():
    """An edit is the only change: the gold as sqlglot writes it, unedited, is never a near miss, and the
    near misses of a gold differ from that text (measured on every train and dev gold: the same rows)."""
    gold = 'SELECT count(*) FROM singer WHERE country = "France" AND age != 30'
    own = "SELECT COUNT(*) FROM singer WHERE country = \"France\" AND age <> 30"
    found = [m.sql for m in near_misses(gold)]
    assert own not in found and found


def test_the_docs_table_lists_every_family_with_its_part():
    page = (Path(__file__).resolve().parent.parent / "docs" / "audit.md").read_text(encoding="utf-8")
    page = page.split("## Near misses", 1)[1].split("\n## ", 1)[0]
    for name in ALL:
        part = "held out" if name in HELD_OUT else "tuning"
        assert f"| `{name}` | " in page and f" | {part} | " in page.split(f"| `{name}` | ", 1)[1].split("\n", 1)[0]


@pytest.mark.real_data
@pytest.mark.slow
def test_sqlglot_writes_every_dev_gold_back_to_the_same_rows(spider_dir):
    """What makes a near miss one edit: the gold as sqlglot writes it, unedited, returns the gold's rows
    (in order where the gold orders them) on its database."""
    items = json.loads((spider_dir / "dev.json").read_text(encoding="utf-8"))
    checked = 0
    for item in items:
        db = spider_dir / "database" / item["db_id"] / f"{item['db_id']}.sqlite"
        if not db.is_file():
            continue  # wta_1: absent from this project's copy of Spider
        own = generate(sqlglot.parse_one(item["query"], read="sqlite"))
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            conn.text_factory = lambda b: b.decode("utf-8", "replace")
            try:
                gold_rows = conn.execute(item["query"]).fetchall()
            except sqlite3.Error:
                continue  # a gold that does not run on its own database (none in dev; one in train)
            own_rows = conn.execute(own).fetchall()
        if "order by" not in item["query"].lower():
            gold_rows, own_rows = sorted(map(repr, gold_rows)), sorted(map(repr, own_rows))
        assert own_rows == gold_rows, (item["query"], own)
        checked += 1
    assert checked >= 900


def test_the_module_names_its_seed():
    assert families.HELD_OUT_SEED == "spider-scoring-near-miss-families:2026-12-02"
