"""Neighbours that keep what the original's data implies where two fair readings differ, and vary what it
does not fix: a gold's BETWEEN bounds, codes beside names, entities a gold groups by a parent the original
never repeats, and categories repeated no more than the original repeats one (bundle/neighbours/plan.py,
neighbours/links.py, neighbours/fuzz.py; docs/neighbours.md, "What a neighbour keeps")."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours import proof as neighbour_proof
from bundle.neighbours.fuzz import Fuzzer
from bundle.neighbours.source import Draw, read_original
from harness.prepare.neighbours import distil

BUILDS = 16


def _db(path: Path, script: str) -> Path:
    with sqlite3.connect(path) as conn:
        conn.executescript(script)
    return path


def _builds(db: Path, golds: list[str], tmp: Path, **plan) -> list[Path]:
    """``BUILDS`` neighbours drawn for ``golds``, each proved to keep every invariant."""
    conn = neighbour_invariants.open_read_only(str(db))
    try:
        profile = neighbour_mining.mine(conn)
        focus = dataclasses.replace(distil.focus_for(golds, profile), **plan)
        fuzzer = Fuzzer(read_original(conn), profile, focus)
    finally:
        conn.close()
    out = []
    for i in range(BUILDS):
        path = tmp / f"n{i}.sqlite"
        assert fuzzer.build(str(path), Draw(f"readings:{i}")) == []
        out.append(path)
    return out


def _values(paths: list[Path], sql: str) -> list:
    found = []
    for path in paths:
        with sqlite3.connect(path) as conn:
            found += [r[0] for r in conn.execute(sql)]
    return found


CARS = "CREATE TABLE car(id INTEGER PRIMARY KEY, year INTEGER NOT NULL, weight INTEGER NOT NULL);" + "".join(
    f"INSERT INTO car VALUES ({i}, {1970 + i % 5}, {1800 + 173 * i});" for i in range(24))


@pytest.mark.parametrize("gold, extra, held", [
    ("SELECT DISTINCT year FROM car WHERE weight BETWEEN 3000 AND 4000", "", False),
    ("SELECT DISTINCT year FROM car WHERE weight > 3000 AND weight < 4000", "", True),
    ("SELECT DISTINCT year FROM car WHERE weight BETWEEN 3000 AND 4000", "INSERT INTO car VALUES (99, 1972, 3000);"
     "INSERT INTO car VALUES (98, 1973, 4000);", True),
], ids=["a BETWEEN bound the original lacks is never held, the values beside it are",
        "a bound of a strict comparison is held: the question's words decide there",
        "a BETWEEN bound the original holds is held"])
def test_a_gold_s_between_bounds_are_held_only_where_the_original_holds_them(tmp_path, gold, extra, held):
    db = _db(tmp_path / "cars.sqlite", CARS + extra)
    weights = _values(_builds(db, [gold], tmp_path, special_share=0.6, max_rows=40), "SELECT weight FROM car")
    assert (3000 in weights or 4000 in weights) is held
    assert {2999, 3001, 3999, 4001} & set(weights)  # the values next to a bound: drawn as for any literal


COUNTRIES = ("CREATE TABLE country(code TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
             "CREATE TABLE language(code TEXT NOT NULL REFERENCES country(code), lang TEXT NOT NULL);"
             "INSERT INTO country VALUES ('ABW', 'Aruba'), ('AFG', 'Afghanistan'), ('AGO', 'Angola'), "
             "('ALB', 'Albania'), ('AND', 'Andorra'), ('ARG', 'Argentina');"
             "INSERT INTO language VALUES ('ABW', 'Dutch'), ('ABW', 'English'), ('AFG', 'Pashtu'), ('AGO', 'Kongo'), "
             "('ALB', 'Greek'), ('AND', 'Catalan'), ('ARG', 'Spanish'), ('ARG', 'Italian');")


def test_a_text_key_beside_a_name_is_a_code_that_changes_and_its_rows_follow_it(tmp_path):
    db = _db(tmp_path / "world.sqlite", COUNTRIES)
    gold = "SELECT count(*) FROM country AS T1 JOIN language AS T2 ON T1.code = T2.code WHERE T1.name = 'Aruba'"
    built = _builds(db, [gold], tmp_path, special_share=0.6)
    codes = _values(built, "SELECT code FROM country WHERE name = 'Aruba'")
    assert codes and any(c != "ABW" for c in codes)  # 'ABW' hard-coded for Aruba is told apart somewhere
    moved = [p for p in built if _values([p], "SELECT code FROM country WHERE name = 'Aruba'") not in ([], ["ABW"])]
    assert any(_values([p], "SELECT count(*) FROM language JOIN country USING (code) WHERE name = 'Aruba'") != [0]
               for p in moved)  # its languages follow it under its new code


def test_a_text_key_that_is_its_table_s_only_name_stays_with_its_entity(tmp_path):
    db = _db(tmp_path / "cars.sqlite", "CREATE TABLE model(model TEXT PRIMARY KEY, maker TEXT NOT NULL);"
             "CREATE TABLE car(id INTEGER PRIMARY KEY, model TEXT NOT NULL REFERENCES model(model));"
             "INSERT INTO model VALUES ('volvo', 'volvo'), ('amc', 'amc'), ('bmw', 'bmw'), ('fiat', 'fiat');"
             "INSERT INTO car VALUES (1, 'volvo'), (2, 'amc'), (3, 'bmw'), (4, 'fiat'), (5, 'volvo');")
    gold = "SELECT count(*) FROM car WHERE model = 'volvo'"
    built = _builds(db, [gold], tmp_path, special_share=0.6)
    assert set(_values(built, "SELECT maker FROM model WHERE model = 'volvo'")) == {"volvo"}


ORCHESTRAS = ("CREATE TABLE conductor(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
              "CREATE TABLE orchestra(id INTEGER PRIMARY KEY, title TEXT NOT NULL UNIQUE, "
              "conductor_id INTEGER NOT NULL REFERENCES conductor(id));"  # orchestras are entities: performed
              "CREATE TABLE performance(id INTEGER PRIMARY KEY, orchestra_id INTEGER NOT NULL REFERENCES orchestra(id));"
              + "".join(
                  f"INSERT INTO conductor VALUES ({i}, 'Conductor {chr(65 + i)}'); "
                  f"INSERT INTO orchestra VALUES ({i}, 'Orchestra {chr(65 + i)}', {i}); "
                  f"INSERT INTO performance VALUES ({i}, {i % 7});" for i in range(10)))
TWO_ORCHESTRAS = ("SELECT T1.name FROM conductor AS T1 JOIN orchestra AS T2 ON T1.id = T2.conductor_id "
                  "GROUP BY T2.conductor_id HAVING count(*) > 1")


@pytest.mark.parametrize("gold, some_repeat", [
    (TWO_ORCHESTRAS, True),
    ("SELECT T1.name FROM conductor AS T1 JOIN orchestra AS T2 ON T1.id = T2.conductor_id", False),
], ids=["a gold grouping orchestras by conductor gets a conductor of two",
        "without such a gold an orchestra keeps its conductor"])
def test_entities_a_gold_groups_by_a_parent_the_original_never_repeats_get_one_repeated(tmp_path, gold, some_repeat):
    db = _db(tmp_path / "orchestra.sqlite", ORCHESTRAS)
    built = _builds(db, [gold], tmp_path)
    repeats = _values(built, "SELECT count(*) FROM (SELECT 1 FROM orchestra GROUP BY conductor_id HAVING count(*) > 1)")
    assert any(repeats) is some_repeat
    if some_repeat:
        assert any(_values([p], TWO_ORCHESTRAS) for p in built)
    conn = neighbour_invariants.open_read_only(str(db))
    try:
        profile = neighbour_mining.mine(conn)
    finally:
        conn.close()
    for path in built:  # every conductor still leads an orchestra, as in the original
        with sqlite3.connect(path) as c:
            assert neighbour_proof.violations(profile, c, frozenset({"conductor_id"})) == []


def test_a_category_repeats_no_value_more_than_the_original_where_another_is_left(tmp_path):
    writers = ["Todd Casey", "Steven Melching", "Joseph Kuhr", "Michael Jelenic", "James Krieg", "Adam Beechen"]
    db = _db(tmp_path / "tv.sqlite", "CREATE TABLE cartoon(id INTEGER PRIMARY KEY, title TEXT NOT NULL UNIQUE, "
             "written_by TEXT NOT NULL);" + "".join(
                 f"INSERT INTO cartoon VALUES ({i}, 'Episode {i}', '{writers[i % 6]}');" for i in range(12)))
    gold = "SELECT title FROM cartoon WHERE written_by = 'Todd Casey'"
    for path in _builds(db, [gold], tmp_path, special_share=0.6, scale=(1.0, 1.0)):
        most = _values([path], "SELECT max(n) FROM (SELECT count(*) AS n FROM cartoon GROUP BY written_by)")
        assert most == [2]  # twelve cartoons, as in the original: no writer more than twice
