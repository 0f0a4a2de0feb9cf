"""When a paid answer counts: witness databases that keep the original's invariants, and the decision.

The decision uses this checkout's bundle ``verify`` (the audit passes the zip's own, the same code).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bundle import verify as bundle_verify
from harness.audit import invariants as inv
from harness.audit.model import Finding
from harness.audit.run import _shown_wrong
from harness.audit.witnesses import WitnessSet

SCHEMA = """
CREATE TABLE team(id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT);
CREATE TABLE player(pid INTEGER PRIMARY KEY, team_id INT REFERENCES team(id), name TEXT, age INT, country TEXT);
INSERT INTO team VALUES (1, 'Lions', 'USA'), (2, 'Bears', 'USA'), (3, 'Owls', 'USA');
INSERT INTO player VALUES (1, 1, 'Ann', 25, 'USA'), (2, 1, 'Bob', 31, 'USA'), (3, 2, 'Cy', 28, 'USA'),
                          (4, 3, 'Dee', 35, 'USA'), (5, 2, 'Eve', 31, 'USA');
"""


@pytest.fixture(scope="module")
def league(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("league") / "league.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA)
    conn.close()
    return path


def witness_set(league: Path, tmp_path: Path, golds: list[str]) -> WitnessSet:
    return WitnessSet("league", league, golds, tmp_path / "witnesses")


def test_the_invariants_are_what_the_data_shows(league):
    found = {str(i) for i in inv.mine(league)}
    assert {"unique team.name", "unique player.name", "not null player.country", "foreign key player.team_id -> team.id",
            "referenced team.id <- player.team_id"} <= found
    assert "unique team.country" not in found and "unique player.age" not in found


def test_a_column_a_gold_needs_repeated_is_not_held_unique(league, tmp_path):
    gold = "SELECT name FROM player GROUP BY name HAVING count(*) > 1"
    assert "unique player.name" not in {str(i) for i in witness_set(league, tmp_path, [gold]).invariants}


FAIRNESS = [
    ("the emptied database keeps every invariant", "emptied", ()),
    ("copies of the child rows with fresh keys and names keep them", "doubled player", ()),
    ("copies moved past every extreme keep them", "varied player (lower)", ()),
    ("copies of a parent leave it unreferenced: not used", "doubled team", ("referenced team.id <- player.team_id",)),
]


@pytest.mark.parametrize("name, broken", [f[1:] for f in FAIRNESS], ids=[f[0] for f in FAIRNESS])
def test_a_witness_is_fair_only_when_it_keeps_every_invariant(league, tmp_path, name, broken):
    built = {w.name: w for w in witness_set(league, tmp_path, []).witnesses(["player", "team"])}
    assert tuple(str(b) for b in built[name].broken) == broken
    assert [str(b) for b in inv.broken(inv.mine(league), built[name].path)] == list(broken)


def test_duplicates_where_only_the_declared_keys_are_fresh_break_the_datas_uniqueness(league, tmp_path):
    (witness,) = witness_set(league, tmp_path, []).keys_only(["player"])
    assert witness.name == "doubled player (keys only)" and "unique player.name" in {str(b) for b in witness.broken}


DECISIONS = [
    ("a constant for a count is shown wrong on the emptied database",
     "SELECT count(*) FROM player", "SELECT 5", "emptied"),
    ("a WHERE that cuts nothing here is shown wrong where the rows vary",
     "SELECT count(*) FROM player WHERE country = 'USA'", "SELECT count(*) FROM player", "shown"),
    ("DISTINCT over a value that repeats nowhere here is shown wrong where rows repeat",
     "SELECT DISTINCT age FROM player WHERE age < 30", "SELECT age FROM player WHERE age < 30", "shown"),
    ("DISTINCT over a column the data keeps unique is set aside, naming the invariant",
     "SELECT DISTINCT name FROM player", "SELECT name FROM player", "unique player.name"),
    ("an equivalent rewrite is set aside, nothing told it apart",
     "SELECT name FROM player WHERE age > 30", "SELECT name FROM player WHERE 30 < age", None),
]


@pytest.mark.parametrize("gold, sql, expected", [d[1:] for d in DECISIONS], ids=[d[0] for d in DECISIONS])
def test_a_paid_answer_counts_only_when_a_fair_witness_shows_it_wrong(league, tmp_path, gold, sql, expected):
    found = _shown_wrong(bundle_verify.verify, witness_set(league, tmp_path, [gold]), gold, sql)
    if expected == "shown":
        assert found.witness is not None and not found.breaks
    elif expected is None:
        assert found == Finding()
    elif expected == "emptied":
        assert found == Finding("emptied")
    else:
        assert found.witness is None and expected in found.breaks


def test_the_decision_is_the_same_in_every_run(league, tmp_path):
    gold, sql = "SELECT count(*) FROM player WHERE country = 'USA'", "SELECT count(*) FROM player"
    first = _shown_wrong(bundle_verify.verify, WitnessSet("league", league, [gold], tmp_path / "a"), gold, sql)
    second = _shown_wrong(bundle_verify.verify, WitnessSet("league", league, [gold], tmp_path / "b"), gold, sql)
    assert first == second and first.witness
