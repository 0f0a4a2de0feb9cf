"""Neighbour databases: distillation keeps what separates and what the golds presuppose, ties and value sets
are judged per gold, prepare proves what it writes, and the bundle judges a match on every neighbour
(harness/prepare/neighbours, bundle/verify.py)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours import proof as neighbour_proof
from bundle.neighbours.fuzz import Fuzzer
from bundle.neighbours.source import read_original
from bundle.scoring import entry as scoring_entry
from bundle.sql import compare as sql_compare
from bundle.sql import gold_results
from bundle.verify import MATCH, MISMATCH, Neighbour, gold_result, judge, verify
from harness.prepare.neighbours import attach, distil, variants

PETS_GOLDS = ["SELECT count(*) FROM Owner", "SELECT name FROM Pet WHERE species = 'dog'",
              "SELECT T1.name, count(*) FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id GROUP BY T1.owner_id",
              "SELECT name FROM Pet WHERE weight > 100"]


@pytest.fixture(scope="module")
def pets(fixture_dbs) -> Path:
    return fixture_dbs["pets_club"]


@pytest.fixture(scope="module")
def pets_distilled(pets, tmp_path_factory) -> distil.Distilled:
    return distil.distil("pets_club", pets, PETS_GOLDS, tmp_path_factory.mktemp("pets_neighbours"))


def _rows(path: Path, sql: str) -> list:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute(sql).fetchall()


def _master(path: Path) -> list:
    return _rows(path, "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")


# --- generation -------------------------------------------------------------------------------------

def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_data(pets, tmp_path):
    first = distil.distil("pets_club", pets, PETS_GOLDS, tmp_path / "a")
    again = distil.distil("pets_club", pets, PETS_GOLDS, tmp_path / "b")
    other = distil.distil("pets_club", pets, PETS_GOLDS, tmp_path / "c", distil.Settings(seed=1))
    assert first.files and [f.read_bytes() for f in first.files] == [f.read_bytes() for f in again.files]
    assert [f.read_bytes() for f in first.files] != [f.read_bytes() for f in other.files]


def test_a_neighbour_keeps_the_schema_keys_and_what_the_data_implies(pets, pets_distilled):
    for path in pets_distilled.files:
        assert _master(path) == _master(pets)  # every table, column type, constraint and index
        assert _rows(path, "PRAGMA foreign_key_check") == []  # every reference points at a generated parent
        conn = neighbour_invariants.open_read_only(str(path))
        try:
            assert neighbour_proof.violations(pets_distilled.profile, conn, pets_distilled.repeats_allowed) == []
        finally:
            conn.close()


def test_a_column_a_gold_needs_repeated_is_not_kept_unique(tmp_path):
    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript("CREATE TABLE teacher(id INTEGER PRIMARY KEY, hometown TEXT NOT NULL);"
                           "INSERT INTO teacher VALUES (1, 'Ely'), (2, 'Bath'), (3, 'York'), (4, 'Hull');")
    gold = "SELECT hometown FROM teacher GROUP BY hometown HAVING count(*) >= 2"
    found = distil.distil("teachers", db, [gold], tmp_path / "work")
    assert found.files and any(r is not None and r.shape.rows for r in found.results[gold])


def test_values_come_from_the_original_and_the_golds_literals(pets):
    conn = neighbour_invariants.open_read_only(str(pets))
    try:
        profile = neighbour_mining.mine(conn)
        fuzzer = Fuzzer(read_original(conn), profile, distil.focus_for(["SELECT name FROM Pet WHERE species = 'ferret'"],
                                                                        profile))
    finally:
        conn.close()
    col = fuzzer._col("Pet", "species")
    assert "ferret" in col.special and {"dog", "cat", "fish", "bird"} <= set(col.pool)


def test_variants_change_one_thing_and_never_repeat_the_gold():
    gold = "SELECT name FROM Pet WHERE weight > 10 ORDER BY name LIMIT 2"
    found = variants.variants(gold, ["name", "weight"])
    assert gold not in found and len(found) == len(set(found))
    assert "SELECT name FROM Pet WHERE weight < 10 ORDER BY name LIMIT 2" in found
    assert "SELECT name FROM Pet WHERE weight > 10" in found  # ORDER BY and its LIMIT dropped


# --- distillation ----------------------------------------------------------------------------------

def _tied(tmp_path: Path) -> tuple[Path, Path]:
    """An original with one top score, and a neighbour of it whose top score is tied."""
    original, tied = tmp_path / "o.sqlite", tmp_path / "t.sqlite"
    for path, rows in ((original, [(1, 9), (2, 5), (3, 4)]), (tied, [(1, 9), (2, 9), (3, 9), (4, 1)])):
        with sqlite3.connect(path) as conn:
            conn.executescript("CREATE TABLE p(id INTEGER PRIMARY KEY, score INT NOT NULL);")
            conn.executemany("INSERT INTO p VALUES (?, ?)", rows)
    return original, tied


TIE_GOLD = "SELECT id FROM p ORDER BY score DESC LIMIT 1"
TIE_ANSWERS = [
    pytest.param("SELECT id FROM p WHERE score = (SELECT max(score) FROM p)", MATCH, id="the whole tie, as max() reads it"),
    pytest.param("SELECT id FROM p ORDER BY score DESC, id DESC LIMIT 1", MATCH, id="one of the tie, as the LIMIT reads it"),
    pytest.param("SELECT id FROM p WHERE score > 8", MATCH, id="rows that happen to be the whole tie"),
    pytest.param("SELECT id FROM p WHERE score = 9 AND id < 3", MISMATCH, id="part of the tie, more than the LIMIT"),
    pytest.param("SELECT id FROM p WHERE score > 8 OR score < 2", MISMATCH, id="the tie and a row beside it"),
]


@pytest.mark.parametrize("answer, outcome", TIE_ANSWERS)
def test_a_tie_its_limit_cuts_is_judged_per_gold_on_a_neighbour(tmp_path, answer, outcome):
    original, tied = _tied(tmp_path)
    limits = distil.build_limits()
    assert judge(str(original), answer, gold_result(TIE_GOLD, str(original), limits), limits).outcome == MATCH
    assert judge(str(tied), answer, gold_result(TIE_GOLD, str(tied), limits), limits, neighbour=True).outcome == outcome


def test_a_value_set_read_once_matches_on_a_neighbour_only(tmp_path):
    db = tmp_path / "v.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript("CREATE TABLE channel(id INT, country TEXT); CREATE TABLE show(channel INT);"
                           "INSERT INTO channel VALUES (1, 'Italy'), (2, 'Italy'), (3, 'Peru');"
                           "INSERT INTO show VALUES (1), (2), (3);")
    gold = "SELECT c.country FROM channel AS c JOIN show AS s ON c.id = s.channel"  # Italy twice
    limits = distil.build_limits()
    found = gold_result(gold, str(db), limits)
    once = "SELECT DISTINCT country FROM channel"
    assert judge(str(db), once, found, limits).outcome == MISMATCH  # the original's own rule: a bag of rows
    assert judge(str(db), once, found, limits, neighbour=True).outcome == MATCH
    twice_peru = "SELECT country FROM channel UNION ALL SELECT 'Peru'"
    assert judge(str(db), twice_peru, found, limits, neighbour=True).outcome == MISMATCH  # another repetition


def _result(rows: list[tuple], null_keys: bool | None = None) -> gold_results.GoldResult:
    return gold_results.GoldResult(sql_compare.bag_shape(rows, 1), 1, None, null_keys)


PRESUPPOSED = [
    pytest.param([(3,)], [(4,)], None, id="other rows: judged"),
    pytest.param([(3,)], [], "no rows", id="no rows where the original has some"),
    pytest.param([], [(1,)], None, id="rows where the original has none: judged"),
    pytest.param([(3,)], [(None,)], "row of NULLs", id="max() over nothing"),
    pytest.param([(None,)], [(None,)], None, id="a row of NULLs the original has too"),
]


@pytest.mark.parametrize("there, here, why", PRESUPPOSED)
def test_a_gold_is_judged_only_where_what_it_presupposes_holds(there, here, why):
    found = neighbour_proof.judges(_result(there), _result(here))
    assert (found is None) if why is None else why in found


def test_a_null_sort_key_the_original_never_sorts_by_is_no_place_to_judge():
    assert "NULL key" in neighbour_proof.judges(_result([(1,)], False), _result([(1,)], True))
    assert neighbour_proof.judges(_result([(1,)], True), _result([(1,)], True)) is None


def test_the_kept_neighbours_separate_constant_answers(pets_distilled):
    assert pets_distilled.constants and pets_distilled.constants_separated == pets_distilled.constants
    assert len(pets_distilled.files) <= distil.Settings().max_keep


def _candidate(name: str, golds: dict, separated: set, rows: set) -> distil.Candidate:
    return distil.Candidate(Path(name), golds, separated, rows, set())


def test_a_gold_is_judged_on_every_neighbour_where_it_may_be():
    """A neighbour chosen for one gold's look-alikes tells other answers apart too (issue 37): a gold is
    judged wherever it may be, not on the fewest that separate its own look-alikes."""
    g, h = "SELECT g", "SELECT h"
    res = {k: _result([(k,)]) for k in (g, h)}
    kept = [_candidate("1", {g: res[g], h: res[h]}, {(g, "a"), (h, "x")}, {g, h}),
            _candidate("2", {g: res[g]}, {(g, "b")}, {g}),
            _candidate("3", {g: res[g]}, {(g, "a"), (g, "b")}, {g})]
    judged = distil._judged_on(kept, [g, h], {g: res[g], h: res[h]})
    assert [r is not None for r in judged[g]] == [True, True, True]
    assert [r is not None for r in judged[h]] == [True, False, False]  # not judged on 2 and 3: it may not be


ROUNDS = [
    pytest.param(dict(enough=1.01, min_gain=0), 12, id="never enough, every round gains: every round is built"),
    pytest.param(dict(enough=0.0), 4, id="enough after the first round: one round"),
    pytest.param(dict(enough=1.01, min_gain=10_000), 4, id="a round that gains too little ends the rounds"),
]


@pytest.mark.parametrize("change, built", ROUNDS)
def test_more_candidates_are_built_where_the_kept_ones_separate_too_little(pets, tmp_path, change, built):
    settings = distil.Settings(candidates=4, max_candidates=12, **change)
    assert distil.distil("pets_club", pets, PETS_GOLDS, tmp_path, settings).candidates_built == built


def test_prepare_writes_nothing_when_a_neighbour_breaks_an_invariant(pets, pets_distilled, tmp_path):
    import dataclasses
    broken = tmp_path / "broken.sqlite"
    shutil.copy(pets_distilled.files[0], broken)
    with sqlite3.connect(broken) as conn:
        conn.execute("INSERT INTO Pet (pet_id, owner_id, name) VALUES (999, 4242, 'Ghost')")  # an owner nobody is
    data = tmp_path / "data"
    data.mkdir()
    index = {"databases": {"pets_club": {}}}
    with pytest.raises(attach.NeighbourInvariantError, match="pets_club"):
        attach.attach(data, index, {"pets_club": dataclasses.replace(pets_distilled, files=[broken])},
                      distil.Settings(), ["eval"])
    assert not (data / attach.FOLDER).exists() and index == {"databases": {"pets_club": {}}}


def test_a_constant_answer_repeats_the_rows():
    from bundle.sql.guard import RawResult
    assert distil.constant_answer(RawResult(("n",), [(6,)], 0, 0.0)) == "SELECT 6"
    assert distil.constant_answer(RawResult(("a", "b"), [], 0, 0.0)) == "SELECT NULL, NULL WHERE 0"


# --- scoring -----------------------------------------------------------------------------------------

def _grade(root: Path, output: str, expected: str, semantics: str = "neighbours", db_id: str | None = None):
    limits = scoring_entry.current_limits().replace(semantics=semantics)
    call = scoring_entry.read_call({"output": output, "expected": expected, "extra_info": {"db_id": db_id}})
    return scoring_entry.score_call(call, limits, root=str(root))


def test_right_by_wording_wrong_by_rows_scores_zero_on_a_neighbour(neighbour_bundle):
    gold = "SELECT count(*) FROM Owner"
    constant = f"SELECT {_rows(neighbour_bundle / 'data' / 'databases' / 'pets_club.sqlite', gold)[0][0]}"
    on_neighbours = _grade(neighbour_bundle, constant, gold)
    assert (on_neighbours.outcome, on_neighbours.score, on_neighbours.original_score) == ("mismatch", 0.0, 1.0)
    assert on_neighbours.decided_on.startswith("neighbour ") and on_neighbours.detail.startswith("on neighbour ")
    original_only = _grade(neighbour_bundle, constant, gold, "original")
    assert (original_only.score, original_only.decided_on, original_only.neighbours_checked) == (1.0, "original", 0)


def test_every_gold_matches_itself_on_all_its_neighbours(neighbour_bundle):
    index = json.loads((neighbour_bundle / "data" / "index.json").read_text())
    checked = 0
    for row in index["rows"]:
        verdict = _grade(neighbour_bundle, row["gold"], row["gold"], db_id=row["db_id"])
        assert verdict.outcome == "match", (row, verdict.detail)
        checked += verdict.neighbours_checked
    assert checked > len(index["rows"])  # most golds were checked on more than one database


def test_a_wrong_answer_costs_nothing_extra(neighbour_bundle):
    verdict = _grade(neighbour_bundle, "SELECT name FROM Owner", "SELECT count(*) FROM Owner")
    assert verdict.outcome == "mismatch" and verdict.neighbours_checked == 0 and verdict.decided_on == "original"


def test_a_bundle_without_neighbours_scores_as_before(sample_bundle):
    verdict = _grade(sample_bundle, "SELECT 6", "SELECT count(*) FROM Owner")
    assert (verdict.score, verdict.decided_on, verdict.neighbours_checked) == (1.0, "original", 0)


def test_a_changed_neighbour_file_is_an_infrastructure_error(neighbour_bundle, tmp_path):
    copy = Path(shutil.copytree(neighbour_bundle, tmp_path / "copy"))
    victim = sorted((copy / "data" / "neighbours").glob("pets_club-*.sqlite"))[0]
    victim.write_bytes(victim.read_bytes() + b"\0")
    from bundle.contract.errors import DatabaseUnavailableError
    with pytest.raises(DatabaseUnavailableError, match="neighbour"):
        _grade(copy, "SELECT count(*) FROM Owner", "SELECT count(*) FROM Owner")


def test_verify_stops_at_the_first_neighbour_that_differs(pets, pets_distilled):
    gold = "SELECT count(*) FROM Owner"
    nbs = [Neighbour(f"n{i}", str(p), r) for i, (p, r) in enumerate(zip(pets_distilled.files,
                                                                         pets_distilled.results[gold])) if r]
    count = _rows(pets, gold)[0][0]
    counts = [_rows(Path(n.path), gold)[0][0] for n in nbs]
    first = next(i for i, c in enumerate(counts) if c != count)
    verdict = verify(f"SELECT {count}", gold, str(pets), is_sql=True, neighbours=nbs)
    assert verdict.outcome == "mismatch" and verdict.neighbours_checked == first + 1
    assert verdict.decided_on == nbs[first].name


def test_a_runaway_on_the_neighbours_is_stopped_by_the_budget_they_share(pets, pets_distilled):
    # Right on the original, a runaway wherever the count differs: every neighbour run together may
    # do neighbour_budget_steps, so the whole call stays bounded however many neighbours there are.
    gold = "SELECT count(*) FROM Owner"
    nbs = [Neighbour(f"n{i}", str(p), r) for i, (p, r) in enumerate(zip(pets_distilled.files,
                                                                         pets_distilled.results[gold])) if r]
    count = _rows(pets, gold)[0][0]
    runaway = ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r")
    sql = f"SELECT CASE WHEN (SELECT count(*) FROM Owner) = {count} THEN {count} ELSE ({runaway}) END"
    limits = DEFAULT_LIMITS.replace(neighbour_budget_steps=300_000)
    verdict = verify(sql, gold, str(pets), is_sql=True, neighbours=nbs, limits=limits)
    assert (verdict.outcome, verdict.score, verdict.original_score) == ("prediction_over_budget", 0.0, 1.0)
    assert "budget of 300,000" in verdict.detail and verdict.decided_on.startswith("n")
