"""The third, held-out set of near-miss families (harness/audit/nearmiss/blind2.py, blind2_edits.py): each family's edit,
that it changes the gold's meaning (a witness database keeping the schema's keys gives other rows), the interface
shared with harness/audit/nearmiss/families.py, that no near miss is one families.py or blind.py make, and that every one
prepares and runs on its database (the sample's, and with $SPIDER_DATA every dev gold's)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import sqlglot

from conftest import sample_rows
from harness.audit.nearmiss import blind, blind2, families
from harness.audit.nearmiss.blind2 import ALL, DESCRIPTIONS, NEEDS_DATABASE, near_misses
from harness.audit.nearmiss.context import Context, generate
from harness.audit.nearmiss.families import NearMiss

# A small database of the test's own: a TEXT column of numbers (rooms), dates, a composite key (street, number).
LETTINGS = """
CREATE TABLE Agent (agent_id INTEGER PRIMARY KEY, name TEXT NOT NULL, office TEXT);
CREATE TABLE Flat (flat_id INTEGER PRIMARY KEY, agent_id INTEGER REFERENCES Agent(agent_id), street TEXT NOT NULL,
  number TEXT NOT NULL, rooms TEXT, rent INTEGER, listed TEXT, furnished TEXT, UNIQUE (street, number));
CREATE TABLE Viewing (viewing_id INTEGER PRIMARY KEY, street TEXT, number TEXT, day TEXT, visitor TEXT,
  FOREIGN KEY (street, number) REFERENCES Flat(street, number));
INSERT INTO Agent VALUES (1, 'Ada Park', 'North'), (2, 'Ben Ode', 'South');
INSERT INTO Flat VALUES (1, 1, 'Elm Road', '2', '2', 900, '2021-03-15', 'T'), (2, 1, 'Elm Road', '4', '3', 1200, '2022-07-01', 'F'),
  (3, 2, 'Oak Lane', '2', '10', 2500, '2022-11-20', 'T'), (4, 2, 'Oak Lane', '9', '1', 700, '2023-01-05', 'F');
INSERT INTO Viewing VALUES (1, 'Elm Road', '2', '2023-02-01', 'kim'), (2, 'Oak Lane', '2', '2023-02-03', 'lee'),
  (3, 'Elm Road', '4', '2023-02-03', 'kim');
"""
# Rows added to a copy of the sample's pets_club that keep its keys and NOT NULLs: a second 'Chen Wei', NULLs and
# empty texts, ties, one value spelled two ways, an owner with pets of two species.
PETS_WITNESS = """
INSERT INTO Owner VALUES (7, 'Chen Wei', NULL, NULL), (8, 'Gus Ray', '', 40), (9, 'Ida Lund', 'Oslo', 77),
  (10, 'Jo Oyelaran', 'United States', 30), (11, 'Kai Moss', 'North Carolina', 50), (12, 'Lee Chan', 'Database', 31),
  (13, 'Mo Ali', 'Saint Malo', 45), (14, 'St Paul (Lyon)', 'Porto', 52), (15, 'St. Paul!', 'Porto', 58),
  (16, 'Nia Brandt', 'USA', 33), (17, 'Oz Quinn', 'NorthCarolina', 36), (18, 'Pia Roth', 'Data base', 47),
  (19, 'Rui Sousa', 'Saint-Malo', 39), (20, 'St. Paul (Lyon)!', 'Rome', 60),
  (21, 'Quy Tran', 'Leeds', 25);
INSERT INTO Pet VALUES (10, 7, 'Ghost', NULL, NULL, NULL), (11, 2, 'Rex', 'dog', 12.5, 2015), (12, 3, 'Kit', 'cat', 3.0, 2021),
  (13, 9, 'Ace', 'cats', 40.0, 2014), (14, 9, 'Bo', 'True', 1.0, 2013), (15, 10, 'Cy', 'puppy', 2.0, 2012),
  (16, 3, 'Dot', 'dog', 8.0, 2020), (17, 11, 'Eve', 'dogs', 9.0, NULL), (18, 12, 'Fay', 'fishes', 0.2, 2011),
  (19, 8, 'Gil', 'cat', 6.0, 2019), (20, 8, 'Hop', 'cat', 2.5, 2018), (21, 13, 'Ivy', 'goat', 20.0, 2017),
  (22, 8, 'Jet', 'puppies', 1.5, 2022);
"""
# A second copy of lettings with rows that tell its near misses from its golds.
LETTINGS_WITNESS = """
INSERT INTO Flat VALUES (5, 1, 'Ash Row', '1', NULL, 400, '2022-02-01', 'True');
"""

# (family, database: None, a sample's db_id or "lettings", gold, a near miss the family must give). Golds read
# pets_club's tables unless their database says otherwise.
CASES = [
    ("group_by_shown_column", "pets_club",
     "SELECT T2.name, count(*) FROM Pet AS T1 JOIN Owner AS T2 ON T1.owner_id = T2.owner_id GROUP BY T1.owner_id",
     "SELECT T2.name, COUNT(*) FROM Pet AS T1 JOIN Owner AS T2 ON T1.owner_id = T2.owner_id GROUP BY T2.name"),
    ("group_by_shown_column", None, "SELECT species, name, count(*) FROM Pet GROUP BY species",
     "SELECT species, name, COUNT(*) FROM Pet GROUP BY name"),
    ("group_by_selected_added", "pets_club", "SELECT species, name, count(*) FROM Pet GROUP BY species",
     "SELECT species, name, COUNT(*) FROM Pet GROUP BY species, name"),
    ("having_pushed_to_where", None, "SELECT species, sum(weight) FROM Pet GROUP BY species HAVING avg(weight) > 5",
     "SELECT species, SUM(weight) FROM Pet WHERE weight > 5 GROUP BY species"),
    ("above_average_as_having", None, "SELECT name FROM Pet WHERE weight > (SELECT avg(weight) FROM Pet)",
     "SELECT name FROM Pet GROUP BY name HAVING weight > AVG(weight)"),
    ("group_argmax_with_ties", None, "SELECT species FROM Pet GROUP BY species ORDER BY count(*) DESC LIMIT 1",
     "SELECT species FROM Pet GROUP BY species HAVING COUNT(*) = (SELECT COUNT(*) FROM Pet GROUP BY species "
     "ORDER BY COUNT(*) DESC LIMIT 1) ORDER BY COUNT(*) DESC"),
    ("key_column_shown", None, "SELECT species FROM Pet GROUP BY species ORDER BY count(*) DESC",
     "SELECT species, COUNT(*) FROM Pet GROUP BY species ORDER BY COUNT(*) DESC"),
    ("key_column_shown", None, "SELECT count(*) FROM Pet GROUP BY owner_id",
     "SELECT owner_id, COUNT(*) FROM Pet GROUP BY owner_id"),
    ("except_as_negated_join", None,
     "SELECT name FROM Owner EXCEPT SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id "
     "WHERE T2.species = 'dog'",
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species <> 'dog'"),
    ("except_as_negated_join", None, "SELECT owner_id FROM Owner EXCEPT SELECT owner_id FROM Pet",
     "SELECT T1.owner_id FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id <> T2.owner_id"),
    ("intersect_as_either", None,
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species = 'dog' "
     "INTERSECT SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species = 'cat'",
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species IN ('dog', 'cat')"),
    ("intersect_as_either", None, "SELECT city FROM Owner WHERE age > 40 INTERSECT SELECT city FROM Owner WHERE age < 30",
     "SELECT city FROM Owner WHERE (age > 40 OR age < 30)"),
    ("set_sides_on_one_join", None,
     "SELECT name FROM Owner WHERE city = 'Lyon' UNION SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 "
     "ON T1.owner_id = T2.owner_id WHERE T2.species = 'cat'",
     "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE (T1.city = 'Lyon' OR T2.species = 'cat')"),
    ("set_sides_on_one_join", None, "SELECT owner_id FROM Owner WHERE age > 40 INTERSECT SELECT owner_id FROM Pet",
     "SELECT T1.owner_id FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T1.age > 40"),
    ("join_condition_partial", "lettings",
     "SELECT T1.rent FROM Flat AS T1 JOIN Viewing AS T2 ON T1.street = T2.street AND T1.number = T2.number "
     "WHERE T2.visitor = 'kim'",
     "SELECT T1.rent FROM Flat AS T1 JOIN Viewing AS T2 ON T1.street = T2.street WHERE T2.visitor = 'kim'"),
    ("subquery_column_captured", "school_sports", "SELECT name FROM Team WHERE team_id NOT IN (SELECT home_team FROM Game)",
     "SELECT name FROM Team WHERE NOT team_id IN (SELECT team_id FROM Game)"),
    ("subquery_aggregate_dropped", None, "SELECT name FROM Pet WHERE weight > (SELECT max(weight) FROM Pet WHERE species = 'cat')",
     "SELECT name FROM Pet WHERE weight > (SELECT weight FROM Pet WHERE species = 'cat')"),
    ("argmax_over_all_rows", None,
     "SELECT T2.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T1.city = 'Lyon' "
     "ORDER BY T2.weight DESC LIMIT 1",
     "SELECT T2.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T1.city = 'Lyon' "
     "AND T2.weight = (SELECT MAX(weight) FROM Pet)"),
    ("top_n_with_ties", None, "SELECT name, weight FROM Pet ORDER BY weight DESC LIMIT 3",
     "SELECT name, weight FROM Pet WHERE weight IN (SELECT weight FROM Pet ORDER BY weight DESC LIMIT 3) ORDER BY weight DESC"),
    ("extreme_as_sorted_first", None, "SELECT min(birth_year) FROM Pet",
     "SELECT birth_year FROM Pet ORDER BY birth_year ASC LIMIT 1"),
    ("extreme_as_sorted_first", None, "SELECT max(weight) FROM Pet WHERE species = 'emu'",
     "SELECT weight FROM Pet WHERE species = 'emu' ORDER BY weight DESC LIMIT 1"),
    ("distinct_count_as_subquery", None, "SELECT count(DISTINCT species) FROM Pet",
     "SELECT COUNT(*) FROM (SELECT DISTINCT species FROM Pet)"),
    ("negation_keeps_nulls", None, "SELECT name FROM Pet WHERE species != 'dog'",
     "SELECT name FROM Pet WHERE (species <> 'dog' OR species IS NULL)"),
    ("negation_keeps_nulls", None, "SELECT name FROM Owner WHERE city NOT IN ('Lyon', 'Porto')",
     "SELECT name FROM Owner WHERE (NOT city IN ('Lyon', 'Porto') OR city IS NULL)"),
    ("null_test_as_empty_text", None, "SELECT name FROM Owner WHERE city IS NULL", "SELECT name FROM Owner WHERE city = ''"),
    ("null_test_as_empty_text", None, "SELECT name FROM Owner WHERE city IS NOT NULL", "SELECT name FROM Owner WHERE city <> ''"),
    ("aggregate_nulls_as_zero", None, "SELECT avg(age) FROM Owner", "SELECT AVG(COALESCE(age, 0)) FROM Owner"),
    ("not_null_filter_added", None, "SELECT name FROM Pet ORDER BY birth_year LIMIT 1",
     "SELECT name FROM Pet WHERE NOT birth_year IS NULL ORDER BY birth_year LIMIT 1"),
    ("text_number_cast", "lettings", "SELECT street, number FROM Flat WHERE rooms > 2",
     "SELECT street, number FROM Flat WHERE CAST(rooms AS REAL) > 2"),
    ("text_number_cast", "lettings", "SELECT street FROM Flat ORDER BY rooms DESC LIMIT 1",
     "SELECT street FROM Flat ORDER BY CAST(rooms AS REAL) DESC LIMIT 1"),
    ("date_compared_by_year", "lettings", "SELECT street FROM Flat WHERE listed < '2022-07-01'",
     "SELECT street FROM Flat WHERE STRFTIME('%Y', listed) < '2022'"),
    ("date_compared_by_year", "lettings", "SELECT street FROM Flat WHERE listed BETWEEN '2021-01-01' AND '2022-06-30'",
     "SELECT street FROM Flat WHERE STRFTIME('%Y', listed) BETWEEN '2021' AND '2022'"),
    ("coded_value_spelled", "lettings", "SELECT street FROM Flat WHERE furnished = 'T'",
     "SELECT street FROM Flat WHERE furnished = 'True'"),
    ("coded_value_spelled", None, "SELECT name FROM Owner WHERE city = 'USA'", "SELECT name FROM Owner WHERE city = 'United States'"),
    ("text_spacing_changed", None, "SELECT name FROM Owner WHERE city = 'NorthCarolina'",
     "SELECT name FROM Owner WHERE city = 'North Carolina'"),
    ("text_spacing_changed", None, "SELECT name FROM Owner WHERE city = 'Data base'", "SELECT name FROM Owner WHERE city = 'Database'"),
    ("text_spacing_changed", None, "SELECT name FROM Owner WHERE city = 'Saint-Malo'", "SELECT name FROM Owner WHERE city = 'Saint Malo'"),
    ("text_number_inflected", None, "SELECT name FROM Pet WHERE species = 'cat'", "SELECT name FROM Pet WHERE species = 'cats'"),
    ("text_number_inflected", None, "SELECT name FROM Pet WHERE species = 'puppies'", "SELECT name FROM Pet WHERE species = 'puppy'"),
    ("text_punctuation_dropped", None, "SELECT city FROM Owner WHERE name = 'St. Paul (Lyon)!'",
     "SELECT city FROM Owner WHERE name = 'St. Paul!'"),
    ("text_punctuation_dropped", None, "SELECT city FROM Owner WHERE name = 'St. Paul (Lyon)!'",
     "SELECT city FROM Owner WHERE name = 'St Paul (Lyon)'"),
]


def _build(path: Path, script: str, base: Path | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if base is not None:
        shutil.copy(base, path)
    with sqlite3.connect(path) as conn:  # the rows added keep the declared keys, NOT NULLs and foreign keys
        conn.execute("PRAGMA foreign_keys = ON")
        conn.executescript(script)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    return path


@pytest.fixture(scope="module")
def dbs(fixture_dbs, tmp_path_factory) -> dict[str, Path]:
    """The sample's databases, lettings, and the witnesses: {db_id: path}, {db_id + "+witness": path}."""
    out = tmp_path_factory.mktemp("blind2")
    made = dict(fixture_dbs)
    made["lettings"] = _build(out / "lettings.sqlite", LETTINGS)
    made["lettings+witness"] = _build(out / "lettings_witness.sqlite", LETTINGS_WITNESS, made["lettings"])
    made["pets_club+witness"] = _build(out / "pets_witness.sqlite", PETS_WITNESS, made["pets_club"])
    made["school_sports+witness"] = made["school_sports"]  # its games already tell the case's near miss apart
    return made


def _rows(db: Path, sql: str) -> list[tuple] | None:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.Error:
            return None


@pytest.mark.parametrize("family, db_id, gold, expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_family_makes_its_edit(dbs, family, db_id, gold, expected):
    found = near_misses(gold, dbs[db_id] if db_id else None, families=[family])
    assert expected in [m.sql for m in found]
    assert all(m.family == family and m.note for m in found)


@pytest.mark.parametrize("family, db_id, gold, expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_near_miss_changes_the_gold_s_meaning(dbs, family, db_id, gold, expected):
    """On a witness database (the case's, with rows that keep its keys and NOT NULLs) the gold returns rows and
    the near miss other rows (another order where the gold orders them); the near miss runs on the original too."""
    db = dbs[(db_id or "pets_club") + "+witness"]
    gold_rows, miss_rows = _rows(db, gold), _rows(db, expected)
    assert gold_rows and miss_rows is not None
    ordered = "ORDER BY" in gold.upper()
    assert (gold_rows != miss_rows) if ordered else (sorted(map(repr, gold_rows)) != sorted(map(repr, miss_rows)))
    assert _rows(dbs[db_id or "pets_club"], expected) is not None


def test_every_family_is_tested_and_described():
    assert {c[0] for c in CASES} == set(ALL)
    assert list(DESCRIPTIONS) == list(ALL) and all(DESCRIPTIONS.values())
    assert set(NEEDS_DATABASE) <= {c[0] for c in CASES if c[1]}


def test_at_least_20_families_none_named_as_an_existing_one():
    assert len(ALL) >= 20 and len(set(ALL)) == len(ALL)
    assert not set(ALL) & (set(families.ALL) | set(blind.ALL))


@pytest.mark.parametrize("family", NEEDS_DATABASE)
def test_what_reads_the_database_is_not_made_without_one(family):
    for _f, _db, gold, _e in (c for c in CASES if c[0] == family):
        assert near_misses(gold, None, families=[family]) == []


def test_the_interface_is_the_families_one():
    found = near_misses("SELECT name FROM emp WHERE dept != 'sales'", families=["negation_keeps_nulls", "text_number_inflected"])
    assert found == [
        NearMiss("negation_keeps_nulls", "SELECT name FROM emp WHERE (dept <> 'sales' OR dept IS NULL)",
                 "dept <> 'sales' -> (dept <> 'sales' OR dept IS NULL)"),
        NearMiss("text_number_inflected", "SELECT name FROM emp WHERE dept <> 'sale'", "'sales' -> 'sale'")]
    with pytest.raises(ValueError, match="unknown blind2 near-miss families"):
        near_misses("SELECT 1", families=["boundary"])  # an existing family is not one of this set
    with pytest.raises(ValueError, match="unknown blind2 near-miss families"):
        near_misses("SELECT 1", families=["nocase_compare"])  # nor is a blind one
    assert near_misses("There are 4 teams.") == []
    assert near_misses("SELECT name FROM Owner", database=None) == []


@pytest.mark.parametrize("family, db_id, gold", [
    ("negation_keeps_nulls", "pets_club", "SELECT city FROM Owner WHERE name != 'Chen Wei'"),  # name is NOT NULL
    ("negation_keeps_nulls", None, "SELECT name FROM Pet WHERE species != 'dog' AND species != 'cat'"),  # each keeps NULL out
    ("aggregate_nulls_as_zero", None, "SELECT avg(weight) FROM Pet WHERE weight > 1"),
    ("aggregate_nulls_as_zero", "pets_club", "SELECT min(pet_id) FROM Pet"),  # a key
    ("not_null_filter_added", "pets_club", "SELECT species FROM Pet ORDER BY name LIMIT 1"),  # name is NOT NULL
    ("distinct_count_as_subquery", "pets_club", "SELECT count(DISTINCT owner_id) FROM Owner"),
    ("distinct_count_as_subquery", None, "SELECT count(DISTINCT species) FROM Pet WHERE species LIKE 'd%'"),
    ("group_by_shown_column", None,  # the shown column equals the key along the ON
     "SELECT T2.owner_id, count(*) FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id GROUP BY T1.owner_id"),
    ("group_by_selected_added", "pets_club",  # the key determines the name
     "SELECT T1.name, count(*) FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id GROUP BY T1.owner_id"),
    ("group_by_selected_added", "pets_club",  # through the ON, Pet's owner_id determines the owner's name
     "SELECT T2.name, count(*) FROM Pet AS T1 JOIN Owner AS T2 ON T1.owner_id = T2.owner_id GROUP BY T1.owner_id"),
    ("having_pushed_to_where", None, "SELECT species FROM Pet GROUP BY species HAVING max(weight) > 10"),  # same groups
    ("subquery_column_captured", "pets_club",  # owner_id is the subquery's own column, equal to T1.owner_id
     "SELECT name FROM Owner WHERE owner_id IN (SELECT T1.owner_id FROM Pet AS T1 JOIN Owner AS T2 ON T1.owner_id = T2.owner_id)"),
    ("except_as_negated_join", None,  # one table: families.py's set_operation_as_condition
     "SELECT name FROM Pet WHERE weight > 3 EXCEPT SELECT name FROM Pet WHERE species = 'dog'"),
    ("extreme_as_sorted_first", None, "SELECT max(weight), min(weight) FROM Pet"),
    ("top_n_with_ties", None, "SELECT name FROM Pet ORDER BY weight DESC LIMIT 1"),  # argmax_as_subquery's
    ("text_number_inflected", None, "SELECT name FROM Owner WHERE city = 'Lyon'"),  # a name, not a noun
    ("text_number_cast", "pets_club", "SELECT name FROM Pet WHERE weight > 3"),  # a REAL column
    ("coded_value_spelled", None, "SELECT name FROM Pet WHERE species LIKE 'T'"),
])
def test_edits_outside_a_family_s_scope_are_not_made(dbs, family, db_id, gold):
    assert near_misses(gold, dbs[db_id] if db_id else None, families=[family]) == []


def _sample_golds(dbs) -> list[tuple[str, Path | None]]:
    golds = [(row["query"], dbs[row["db_id"]]) for split in ("train", "validation") for row in sample_rows(split)]
    return golds + [(gold, dbs[db_id] if db_id else None) for _f, db_id, gold, _e in CASES]


def test_no_duplicates_none_equal_to_the_gold_same_output_twice(dbs):
    for gold, db in _sample_golds(dbs):
        first = near_misses(gold, db)
        assert first == near_misses(gold, db)
        sqls = [m.sql for m in first]
        assert len(sqls) == len(set(sqls))
        tree = sqlglot.parse_one(gold.strip().rstrip(";"), read="sqlite")
        assert gold.strip() not in sqls and generate(tree) not in sqls
        order = [ALL.index(m.family) for m in first]
        assert order == sorted(order)


def test_a_family_gives_the_same_whichever_others_are_asked_for(dbs):
    for gold, db in _sample_golds(dbs)[::4]:
        every = near_misses(gold, db)
        for family in ALL:
            assert near_misses(gold, db, families=[family]) == [m for m in every if m.family == family]


def test_no_near_miss_is_one_the_other_sets_make(dbs):
    made = 0
    for gold, db in _sample_golds(dbs):
        mine = {m.sql for m in near_misses(gold, db)}
        made += len(mine)
        assert not mine & {m.sql for m in families.near_misses(gold, db)}, gold
        assert not mine & {m.sql for m in blind.near_misses(gold, db)}, gold
    assert made > 60


def test_a_near_miss_the_other_sets_make_is_left_to_them(dbs):
    gold = "SELECT T1.name, count(*) FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id GROUP BY T1.owner_id"
    by_name = "SELECT T1.name, COUNT(*) FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id GROUP BY T1.name"
    assert by_name in [m.sql for m in near_misses(gold, None, families=["group_by_shown_column"])]
    # on the database, families.py's group_key_changed makes it (name is another column of the key's table)
    assert by_name in [m.sql for m in families.near_misses(gold, dbs["pets_club"], families=["group_key_changed"])]
    assert by_name not in [m.sql for m in near_misses(gold, dbs["pets_club"], families=["group_by_shown_column"])]


def test_every_near_miss_of_the_sample_runs_on_its_database(dbs):
    made = set()
    for gold, db in _sample_golds(dbs):
        db = db or dbs["pets_club"]  # the cases without a database read pets_club's tables
        for miss in near_misses(gold, db):
            assert _rows(db, miss.sql) is not None, (gold, miss)
            made.add(miss.family)
    assert len(made) >= 20


def test_an_edit_that_does_not_run_on_the_database_is_dropped(dbs):
    gold = "SELECT name FROM Pet WHERE born < '2019-06-01'"  # Pet has no column born
    assert near_misses(gold, None, families=["date_compared_by_year"])
    assert near_misses(gold, dbs["pets_club"], families=["date_compared_by_year"]) == []


def test_the_families_read_no_other_set_s_families():
    """Only NearMiss, near_misses (to leave out their near misses) and the shared tree helpers come from the
    other modules: none of their families is called."""
    text = Path(blind2.__file__).read_text(encoding="utf-8") + Path(blind2.__file__).with_name("blind2_edits.py").read_text(encoding="utf-8")
    for module in ("nearstructure", "nearshapes", "nearvalues", "blind_edits"):
        assert f"harness.audit.{module}" not in text
    assert "second._FAMILIES" not in text and "first._FAMILIES" not in text


# The three sets' dev-gold tests share one worker: a set's near misses of a gold are made once a
# process (harness/audit/nearmiss/context.remembered), and each set asks the ones before it for theirs.
@pytest.mark.xdist_group("near-misses-of-the-dev-golds")
@pytest.mark.real_data
@pytest.mark.slow
def test_every_near_miss_of_every_dev_gold_runs_and_none_is_the_other_sets(spider_dir):
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
        for miss in found:
            assert _rows(db, miss.sql) is not None, (item["query"], miss)
            made[miss.family] = made.get(miss.family, 0) + 1
        if len(seen) % 5 == 0:
            others = {m.sql for module in (families, blind) for m in module.near_misses(item["query"], db)}
            assert not set(sqls) & others, item["query"]
    # dev has no IS NULL, no date text and no several-column ON: those families are tested on the cases only
    assert len(made) >= 20, sorted(set(ALL) - set(made))
    assert sum(made.values()) >= len(seen) // 2


def test_the_context_is_closed_and_the_gold_s_tree_untouched(dbs):
    gold = "SELECT T2.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T1.city = 'Lyon' ORDER BY T2.weight DESC LIMIT 1"
    tree = sqlglot.parse_one(gold, read="sqlite")
    before = generate(tree)
    ctx = Context(dbs["pets_club"])
    try:
        for name in ALL:
            list(blind2._FAMILIES[name][1](tree, ctx))
    finally:
        ctx.close()
    assert generate(tree) == before
