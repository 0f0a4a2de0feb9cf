"""Neighbour databases: generation is deterministic and faithful to the schema, distillation keeps what
separates, and the bundle judges a match on every neighbour (harness/neighbours, bundle/verify.py)."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from bundle import scoring_entry
from bundle.scoring_limits import DEFAULT_LIMITS
from bundle.verify import Neighbour, verify
from conftest import stage_bundle
from harness.prepare import bundle_data
from harness.prepare.neighbours import attach, distil, fuzz, schema, values, variants

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
    original = schema.read_schema(pets)
    for path in pets_distilled.files:
        assert _master(path) == _master(pets)  # every table, column type, constraint and index
        assert _rows(path, "PRAGMA foreign_key_check") == []  # every reference points at a generated parent
        for table in original.tables:
            for i, col in enumerate(table.columns):
                got = [r[i] for r in _rows(path, f'SELECT * FROM "{table.name}"')]
                if not col.has_null:
                    assert None not in got, (path.name, table.name, col.name)
                if col.unique:
                    present = [v for v in got if v is not None]
                    assert len(set(present)) == len(present), (path.name, table.name, col.name)


def test_a_column_a_gold_needs_repeated_is_not_kept_unique(tmp_path):
    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript("CREATE TABLE teacher(id INTEGER PRIMARY KEY, hometown TEXT NOT NULL);"
                           "INSERT INTO teacher VALUES (1, 'Ely'), (2, 'Bath'), (3, 'York'), (4, 'Hull');")
    gold = "SELECT hometown FROM teacher GROUP BY hometown HAVING count(*) >= 2"
    found = distil.distil("teachers", db, [gold], tmp_path / "work")
    assert found.files and any(r is not None and r.shape.rows for r in found.results[gold])


def test_values_come_from_the_original_and_the_golds_literals(pets):
    s = schema.read_schema(pets)
    f = fuzz.Fuzzer(s, values.literals_by_column("SELECT name FROM Pet WHERE species = 'ferret'", {"species"}))
    pool = f.pools[("Pet", "species")] + f.special[("Pet", "species")]
    assert "ferret" in pool and set(s.table("Pet").column("species").values) <= set(pool)


def test_variants_change_one_thing_and_never_repeat_the_gold():
    gold = "SELECT name FROM Pet WHERE weight > 10 ORDER BY name LIMIT 2"
    found = variants.variants(gold, ["name", "weight"])
    assert gold not in found and len(found) == len(set(found))
    assert "SELECT name FROM Pet WHERE weight < 10 ORDER BY name LIMIT 2" in found
    assert "SELECT name FROM Pet WHERE weight > 10" in found  # ORDER BY and its LIMIT dropped


# --- distillation ----------------------------------------------------------------------------------

def test_a_gold_is_not_judged_where_its_limit_cuts_a_tie(tmp_path):
    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as conn:  # two scores only, many rows: the top score ties on most candidates
        conn.executescript("CREATE TABLE p(id INTEGER PRIMARY KEY, score INT NOT NULL);"
                           + "".join(f"INSERT INTO p VALUES ({i}, {1 + i % 2});" for i in range(1, 30)))
    gold = "SELECT id FROM p ORDER BY score DESC LIMIT 1"
    fuzzer = fuzz.Fuzzer(schema.read_schema(db), {}, special_share=0.0)
    judged = tied = 0
    for i in range(12):
        candidate = distil.evaluate(fuzzer, tmp_path / f"c{i}.sqlite", random.Random(i), [gold], {gold: ([], [])},
                                    distil.build_limits())
        scores = sorted((s for (s,) in _rows(tmp_path / f"c{i}.sqlite", "SELECT score FROM p")), reverse=True)
        top_tied = len(scores) > 1 and scores[0] == scores[1]
        assert (gold in candidate.golds) is not top_tied, (i, scores[:3])
        judged, tied = judged + (not top_tied), tied + top_tied
    assert tied > 0  # the rule was exercised


def test_the_kept_neighbours_separate_constant_answers(pets_distilled):
    assert pets_distilled.constants and pets_distilled.constants_separated == pets_distilled.constants
    assert len(pets_distilled.files) <= distil.Settings().max_keep


def test_a_constant_answer_repeats_the_rows():
    from bundle.sql_guard import RawResult
    assert distil.constant_answer(RawResult(("n",), [(6,)], 0, 0.0)) == "SELECT 6"
    assert distil.constant_answer(RawResult(("a", "b"), [], 0, 0.0)) == "SELECT NULL, NULL WHERE 0"


# --- scoring -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def neighbour_bundle(fixture_dbs, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("neighbour_bundle")
    stage_bundle(root, fixture_dbs)
    index = json.loads((root / "data" / "index.json").read_text())
    golds: dict[str, list[str]] = {}
    for row in index["rows"]:
        golds.setdefault(row["db_id"], []).append(row["gold"])
    built = attach.build(golds, {d: root / "data" / "databases" / f"{d}.sqlite" for d in golds},
                         tmp_path_factory.mktemp("neighbour_work"))
    attach.attach(root / "data", index, built, distil.Settings(), ["train", "validation"])
    (root / "data" / "index.json").write_bytes(bundle_data.dumps_canonical(index))
    return root


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
    import shutil
    copy = Path(shutil.copytree(neighbour_bundle, tmp_path / "copy"))
    victim = sorted((copy / "data" / "neighbours").glob("pets_club-*.sqlite"))[0]
    victim.write_bytes(victim.read_bytes() + b"\0")
    from bundle.scoring_errors import DatabaseUnavailableError
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
