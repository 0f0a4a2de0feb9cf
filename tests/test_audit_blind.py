"""The blind near-miss families (harness/audit/nearmiss/blind.py, blind_edits.py): each family's edit, the interface shared
with harness/audit/nearmiss/families.py, that no blind near miss is one the existing families make, and that every one
prepares and runs on its database (the sample's, and with $SPIDER_DATA every dev gold's)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import sqlglot

from conftest import sample_rows
from harness.audit.nearmiss import blind, families
from harness.audit.nearmiss.blind import ALL, DESCRIPTIONS, NEEDS_DATABASE, near_misses
from harness.audit.nearmiss.context import Context, generate
from harness.audit.nearmiss.families import NearMiss

# (family, database of the embedded sample or None, gold, a near miss the family must give).
CASES = [
    ("equals_as_contains", None, "SELECT name FROM Owner WHERE city = 'Lyon'",
     "SELECT name FROM Owner WHERE city LIKE '%Lyon%'"),
    ("equals_as_contains", None, "SELECT name FROM Owner WHERE city != 'Lyon'",
     "SELECT name FROM Owner WHERE NOT city LIKE '%Lyon%'"),
    ("nocase_compare", None, "SELECT name FROM Owner WHERE city = 'Lyon'",
     "SELECT name FROM Owner WHERE LOWER(city) = 'lyon'"),
    ("text_titlecased", None, "SELECT name FROM Pet WHERE species = 'dog'", "SELECT name FROM Pet WHERE species = 'Dog'"),
    ("text_titlecased", None, "SELECT name FROM Owner WHERE city IN ('lyon', 'brno')",
     "SELECT name FROM Owner WHERE city IN ('Lyon', 'brno')"),
    ("date_truncated", None, "SELECT name FROM Pet WHERE born > '2019-06-01 10:00:00'",
     "SELECT name FROM Pet WHERE born > '2019-06-01'"),
    ("date_truncated", None, "SELECT name FROM Pet WHERE born BETWEEN '2019-06-01' AND '2020-01-01'",
     "SELECT name FROM Pet WHERE born BETWEEN '2019' AND '2020-01-01'"),
    ("range_to_equality", None, "SELECT city FROM Owner GROUP BY city HAVING count(*) >= 2",
     "SELECT city FROM Owner GROUP BY city HAVING COUNT(*) = 2"),
    ("or_precedence", None, "SELECT name FROM Pet WHERE weight > 10 AND (species = 'dog' OR species = 'cat')",
     "SELECT name FROM Pet WHERE weight > 10 AND species = 'dog' OR species = 'cat'"),
    ("or_precedence", None, "SELECT name FROM Pet WHERE weight > 10 AND species = 'dog' OR species = 'cat'",
     "SELECT name FROM Pet WHERE weight > 10 AND (species = 'dog' OR species = 'cat')"),
    ("where_to_having", None, "SELECT species, count(*) FROM Pet WHERE weight > 3 GROUP BY species",
     "SELECT species, COUNT(*) FROM Pet GROUP BY species HAVING weight > 3"),
    ("group_added", None, "SELECT count(*) FROM Pet WHERE species = 'dog'",
     "SELECT COUNT(*) FROM Pet WHERE species = 'dog' GROUP BY species"),
    ("aggregate_unwrapped", None, "SELECT species, max(weight) FROM Pet GROUP BY species",
     "SELECT species, weight FROM Pet GROUP BY species"),
    ("avg_integer_division", None, "SELECT avg(age) FROM Owner", "SELECT SUM(age) / COUNT(*) FROM Owner"),
    ("aggregate_rounded", None, "SELECT avg(age) FROM Owner", "SELECT ROUND(AVG(age), 2) FROM Owner"),
    ("distinct_outside_count", None, "SELECT count(DISTINCT species) FROM Pet", "SELECT DISTINCT COUNT(species) FROM Pet"),
    ("in_as_join", None, "SELECT name FROM Owner WHERE owner_id IN (SELECT owner_id FROM Pet WHERE species = 'dog')",
     "SELECT Owner.name FROM Owner JOIN Pet ON Owner.owner_id = Pet.owner_id WHERE Pet.species = 'dog'"),
    ("in_as_join", None, "SELECT T1.name FROM Owner AS T1 WHERE T1.owner_id IN (SELECT T1.owner_id FROM Pet AS T1)",
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS S1 ON T1.owner_id = S1.owner_id"),  # the clashing alias renamed
    ("not_in_as_join", None,
     "SELECT name FROM Owner WHERE owner_id NOT IN (SELECT owner_id FROM Pet WHERE species = 'cat')",
     "SELECT Owner.name FROM Owner JOIN Pet ON Owner.owner_id = Pet.owner_id WHERE NOT (Pet.species = 'cat')"),
    ("not_in_as_join", None, "SELECT name FROM Owner WHERE owner_id NOT IN (SELECT owner_id FROM Pet)",
     "SELECT Owner.name FROM Owner JOIN Pet ON Owner.owner_id <> Pet.owner_id"),
    ("not_in_as_not_exists", None, "SELECT name FROM Owner WHERE owner_id NOT IN (SELECT owner_id FROM Pet)",
     "SELECT Owner.name FROM Owner WHERE NOT EXISTS(SELECT 1 FROM Pet WHERE Pet.owner_id = Owner.owner_id)"),
    ("in_as_equals", None, "SELECT name FROM Owner WHERE owner_id IN (SELECT owner_id FROM Pet WHERE species = 'dog')",
     "SELECT name FROM Owner WHERE owner_id = (SELECT owner_id FROM Pet WHERE species = 'dog')"),
    ("in_as_equals", None, "SELECT name FROM Owner WHERE owner_id NOT IN (SELECT owner_id FROM Pet)",
     "SELECT name FROM Owner WHERE owner_id <> (SELECT owner_id FROM Pet)"),
    ("join_as_in", None,
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species = 'dog'",
     "SELECT T1.name FROM Owner AS T1 WHERE T1.owner_id IN (SELECT T2.owner_id FROM Pet AS T2 WHERE T2.species = 'dog')"),
    ("key_hardcoded", "pets_club",
     "SELECT count(*) FROM Pet AS T1 JOIN Owner AS T2 ON T1.owner_id = T2.owner_id WHERE T2.name = 'Chen Wei'",
     "SELECT COUNT(*) FROM Pet AS T1 WHERE T1.owner_id = 3"),  # Chen Wei's owner_id on the sample
    ("except_as_not_in", None,
     "SELECT name FROM Owner EXCEPT SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id",
     "SELECT name FROM Owner WHERE NOT name IN (SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 "
     "ON T1.owner_id = T2.owner_id)"),
    ("intersect_as_in", None, "SELECT city FROM Owner WHERE age > 40 INTERSECT SELECT city FROM Owner WHERE age < 30",
     "SELECT city FROM Owner WHERE age > 40 AND city IN (SELECT city FROM Owner WHERE age < 30)"),
    ("not_in_as_except", None, "SELECT name FROM Owner WHERE owner_id NOT IN (SELECT owner_id FROM Pet)",
     "SELECT name FROM Owner EXCEPT SELECT name FROM Owner WHERE owner_id IN (SELECT owner_id FROM Pet)"),
    ("and_as_intersect", None, "SELECT name FROM Pet WHERE species = 'dog' AND weight > 10",
     "SELECT name FROM Pet WHERE weight > 10 INTERSECT SELECT name FROM Pet WHERE species = 'dog'"),
    ("or_as_union", None, "SELECT name FROM Pet WHERE species = 'dog' OR weight > 10",
     "SELECT name FROM Pet WHERE species = 'dog' UNION SELECT name FROM Pet WHERE weight > 10"),
    ("join_condition_dropped", None,
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species = 'fish'",
     "SELECT T1.name FROM Owner AS T1, Pet AS T2 WHERE T2.species = 'fish'"),
    ("column_table_swapped", "pets_club",
     "SELECT T2.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T1.city = 'Lyon'",
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T1.city = 'Lyon'"),
    ("join_on_ids", "pets_club",
     "SELECT T2.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T1.city = 'Lyon'",
     "SELECT T2.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.pet_id WHERE T1.city = 'Lyon'"),
    ("subquery_filter_shared", None,
     "SELECT name FROM Pet WHERE species = 'dog' AND weight > (SELECT avg(weight) FROM Pet)",
     "SELECT name FROM Pet WHERE species = 'dog' AND weight > (SELECT AVG(weight) FROM Pet WHERE species = 'dog')"),
    ("subquery_filter_shared", None,
     "SELECT name FROM Pet WHERE weight > (SELECT avg(weight) FROM Pet WHERE species = 'dog')",
     "SELECT name FROM Pet WHERE weight > (SELECT AVG(weight) FROM Pet WHERE species = 'dog') AND species = 'dog'"),
    ("constant_answer", "pets_club", "SELECT count(*) FROM Pet WHERE species = 'dog'", "SELECT 4"),
    ("constant_answer", "pets_club", "SELECT name FROM Owner WHERE city = 'Lyon' ORDER BY age",
     "SELECT 'Chen Wei' UNION ALL SELECT 'Alice Martin'"),
]


def _database(fixture_dbs: dict[str, Path], db_id: str | None) -> Path | None:
    return fixture_dbs[db_id] if db_id else None


def _runs(conn: sqlite3.Connection, sql: str) -> bool:
    try:
        conn.execute(sql).fetchall()
    except sqlite3.Error:
        return False
    return True


@pytest.mark.parametrize("family, db_id, gold, expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_family_makes_its_edit(fixture_dbs, family, db_id, gold, expected):
    found = near_misses(gold, _database(fixture_dbs, db_id), families=[family])
    assert expected in [m.sql for m in found]
    assert all(m.family == family and m.note for m in found)


def test_every_family_is_tested_and_described():
    assert {c[0] for c in CASES} == set(ALL)
    assert list(DESCRIPTIONS) == list(ALL) and all(DESCRIPTIONS.values())
    assert set(NEEDS_DATABASE) <= set(ALL)
    assert {c[0] for c in CASES if c[1]} == set(NEEDS_DATABASE)


def test_at_least_25_families_none_named_as_an_existing_one():
    assert len(ALL) >= 25 and len(set(ALL)) == len(ALL)
    assert not set(ALL) & set(families.ALL)


@pytest.mark.parametrize("family, db_id, gold, expected", [c for c in CASES if c[1]],
                         ids=[f"{c[0]} without a database" for c in CASES if c[1]])
def test_what_reads_the_database_is_not_made_without_one(family, db_id, gold, expected):
    assert near_misses(gold, None, families=[family]) == []


@pytest.mark.parametrize("family, db_id, gold, expected", [c for c in CASES if not c[1]],
                         ids=[f"{c[0]} on the sample" for c in CASES if not c[1]])
def test_what_needs_no_database_runs_on_the_sample(fixture_dbs, family, db_id, gold, expected):
    """The cases' golds name the sample's pets_club tables: their edits run there (Pet has no ``born``)."""
    found = [m.sql for m in near_misses(gold, fixture_dbs["pets_club"], families=[family])]
    assert (expected in found) == ("born" not in gold)


def test_the_interface_is_the_families_one():
    found = near_misses("SELECT name FROM emp WHERE dept = 'IT'", families=["equals_as_contains", "nocase_compare"])
    assert found == [
        NearMiss("equals_as_contains", "SELECT name FROM emp WHERE dept LIKE '%IT%'", "dept = 'IT' -> dept LIKE '%IT%'"),
        NearMiss("nocase_compare", "SELECT name FROM emp WHERE LOWER(dept) = 'it'", "dept = 'IT' -> LOWER(dept) = 'it'")]
    with pytest.raises(ValueError, match="unknown blind near-miss families"):
        near_misses("SELECT 1", families=["boundary"])  # an existing family is not a blind one
    assert near_misses("There are 4 teams.") == []


@pytest.mark.parametrize("family, gold", [
    ("text_titlecased", "SELECT name FROM Owner WHERE city = 'F'"),  # its capital is its upper case
    ("text_titlecased", "SELECT name FROM Owner WHERE name LIKE '%an%'"),  # LIKE ignores case
    ("and_as_intersect", "SELECT count(*) FROM Pet WHERE species = 'dog' AND weight > 10"),  # one row of counts
    ("or_as_union", "SELECT name FROM Pet WHERE species = 'dog' OR weight > 10 ORDER BY name"),
    ("join_as_in", "SELECT T1.name, T2.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id"),
    ("join_as_in", "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id "
                   "WHERE T1.age > T2.weight"),  # a condition on both tables
    ("group_added", "SELECT species, count(*) FROM Pet WHERE weight > 3 GROUP BY species"),
    ("aggregate_unwrapped", "SELECT max(weight) FROM Pet"),  # no GROUP BY: one row over all
    ("subquery_filter_shared", "SELECT name FROM Owner WHERE city = 'Lyon' AND age > "
                               "(SELECT avg(age) FROM Owner WHERE city = 'Porto')"),  # already filtered on city
])
def test_edits_outside_a_family_s_scope_are_not_made(fixture_dbs, family, gold):
    assert near_misses(gold, fixture_dbs["pets_club"], families=[family]) == []


def test_a_join_on_its_declared_key_keeps_it_and_equated_columns_are_not_swapped(fixture_dbs):
    gold = "SELECT T1.city FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species = 'cat'"
    swapped = [m.sql for m in near_misses(gold, fixture_dbs["pets_club"], families=["column_table_swapped"])]
    assert not any("T2.owner_id = T2.owner_id" in s or "T1.city" not in s for s in swapped)
    ids = [m.sql for m in near_misses(gold, fixture_dbs["pets_club"], families=["join_on_ids"])]
    assert ids and not any("ON T1.owner_id = T2.owner_id" in s for s in ids)


def test_no_duplicates_none_equal_to_the_gold_same_output_twice(fixture_dbs):
    golds = [(row["query"], fixture_dbs[row["db_id"]]) for split in ("train", "validation") for row in sample_rows(split)]
    golds += [(gold, _database(fixture_dbs, db_id)) for _f, db_id, gold, _e in CASES]
    for gold, db in golds:
        first = near_misses(gold, db)
        assert first == near_misses(gold, db)
        sqls = [m.sql for m in first]
        assert len(sqls) == len(set(sqls))
        tree = sqlglot.parse_one(gold.strip().rstrip(";"), read="sqlite")
        assert gold.strip() not in sqls and generate(tree) not in sqls
        order = [ALL.index(m.family) for m in first]
        assert order == sorted(order)


def test_a_family_gives_the_same_whichever_others_are_asked_for(fixture_dbs):
    for row in sample_rows("train")[::3]:
        db = fixture_dbs[row["db_id"]]
        every = near_misses(row["query"], db)
        for family in ALL:
            assert near_misses(row["query"], db, families=[family]) == [m for m in every if m.family == family]


def _made(gold: str, db: Path | None) -> set[str]:
    """Every SQL the blind families' edits write of ``gold``, before near_misses leaves out the existing ones."""
    tree = sqlglot.parse_one(gold.strip().rstrip(";"), read="sqlite")
    ctx = Context(db)
    try:
        return {generate(t) or "" for name in ALL for _note, t in blind._FAMILIES[name][1](tree, ctx)}
    finally:
        ctx.close()


def test_the_blind_families_differ_from_the_existing_ones_by_construction(fixture_dbs):
    golds = [(row["query"], fixture_dbs[row["db_id"]]) for split in ("train", "validation") for row in sample_rows(split)]
    golds += [(gold, fixture_dbs["pets_club"]) for _f, _db, gold, _e in CASES if "born" not in gold]
    made = 0
    for gold, db in golds:
        existing = {m.sql for m in families.near_misses(gold, db)}
        mine = _made(gold, db)
        made += len(mine)
        assert not mine & existing, gold
    assert made > 100


def test_every_near_miss_of_the_sample_runs_on_its_database(fixture_dbs):
    made = set()
    for split in ("train", "validation"):
        for row in sample_rows(split):
            db = fixture_dbs[row["db_id"]]
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                for miss in near_misses(row["query"], db):
                    assert _runs(conn, miss.sql), (row["query"], miss)
                    made.add(miss.family)
    assert len(made) >= 8  # the sample's golds are simple: a few families at least


def test_a_near_miss_an_existing_family_makes_of_the_gold_is_left_to_it(fixture_dbs):
    gold = "SELECT name FROM Owner WHERE city IN ('porto', 'brno')"
    titled = "SELECT name FROM Owner WHERE city IN ('Porto', 'brno')"
    assert titled in [m.sql for m in near_misses(gold, None, families=["text_titlecased"])]
    # on the sample, 'Porto' is the next value of city after 'porto': text_replaced's near miss
    assert titled in [m.sql for m in families.near_misses(gold, fixture_dbs["pets_club"], families=["text_replaced"])]
    assert titled not in [m.sql for m in near_misses(gold, fixture_dbs["pets_club"], families=["text_titlecased"])]


def test_an_edit_that_does_not_run_on_the_database_is_dropped(fixture_dbs):
    gold = "SELECT name FROM Pet WHERE born > '2019-06-01 10:00:00'"  # Pet has no column born
    assert near_misses(gold, None, families=["date_truncated"])
    assert near_misses(gold, fixture_dbs["pets_club"], families=["date_truncated"]) == []


# The three sets' dev-gold tests share one worker: a set's near misses of a gold are made once a
# process (harness/audit/nearmiss/context.remembered), and each set asks the ones before it for theirs.
@pytest.mark.xdist_group("near-misses-of-the-dev-golds")
@pytest.mark.real_data
@pytest.mark.slow
def test_every_blind_near_miss_of_every_dev_gold_runs_and_none_is_an_existing_one(spider_dir):
    items = json.loads((spider_dir / "dev.json").read_text(encoding="utf-8"))
    seen: set[tuple[str, str]] = set()
    made: dict[str, int] = {}
    for item in items:
        db = spider_dir / "database" / item["db_id"] / f"{item['db_id']}.sqlite"
        if not db.is_file() or (item["db_id"], item["query"]) in seen:
            continue  # wta_1 may be absent from a copy of Spider (docs/disputed-golds.md)
        seen.add((item["db_id"], item["query"]))
        found = near_misses(item["query"], db)
        sqls = [m.sql for m in found]
        assert len(set(sqls)) == len(sqls) and item["query"].strip() not in sqls
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            for miss in found:
                assert _runs(conn, miss.sql), (item["query"], miss)
                made[miss.family] = made.get(miss.family, 0) + 1
        if len(seen) % 4 == 0:
            existing = {m.sql for m in families.near_misses(item["query"], db)}
            assert not _made(item["query"], db) & existing, item["query"]
    assert len(made) >= 24, sorted(set(ALL) - set(made))  # date_truncated and or_precedence: train's golds only
    assert sum(made.values()) >= 3 * len(seen)


def test_the_module_is_independent_of_the_existing_families_list():
    """Only NearMiss and the shared tree helpers come from the existing modules: no family of theirs is called."""
    text = Path(blind.__file__).read_text(encoding="utf-8") + Path(blind.__file__).with_name(
        "blind_edits.py").read_text(encoding="utf-8")
    for module in ("nearstructure", "nearshapes", "nearvalues"):
        assert f"harness.audit.{module}" not in text
