"""Thin databases (docs/neighbours.md, "Thin databases"): a database of no or few rows a table gets
neighbours with rows enough for its golds to return some, keeping its declared keys and links; a
row whose gold returns nothing everywhere is named and never paid an empty answer; a database
that is not thin is drawn and judged exactly as before.

The corpus is the project's own pets_club thinned (harness/bench/thin_corpus.py): two rows a
table, and none.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bundle.neighbours import invariants as inv
from bundle.neighbours import mining, thin
from bundle.neighbours import proof as neighbour_proof
from bundle.scoring import entry as scoring_entry
from bundle.scoring import thin_rows
from conftest import BUNDLE_SRC, default_scoring_env
from harness.audit import invariants as audit_invariants
from harness.bench.thin_corpus import thin as thin_corpus
from harness.prepare import bundle_data, pack, splits, thin_summary
from harness.prepare.neighbours import attach, distil

NOWHERE = "SELECT name FROM Pet WHERE weight > 10 AND weight < 5"  # no rows on any database
GOLDS = (
    "SELECT name FROM Owner WHERE city = 'Leeds'",
    "SELECT count(*) FROM Pet WHERE species = 'bird'",
    "SELECT T1.name FROM Owner AS T1 JOIN Pet AS T2 ON T1.owner_id = T2.owner_id WHERE T2.species = 'fish'",
    "SELECT city FROM Owner GROUP BY city HAVING count(*) >= 2",
    "SELECT name FROM Pet WHERE weight > 25",
    NOWHERE,
)
SETTINGS = distil.Settings(candidates=8, max_candidates=16)  # the defaults' plans, fewer draws: a quick test


def _rows(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {inv.quote(t)}").fetchone()[0] for t in inv.table_names(conn)}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def corpus(fixture_dbs, tmp_path_factory) -> dict[str, Path]:
    """pets_club at two rows a table (``two``) and at none (``none``), and as shipped (``full``)."""
    root = fixture_dbs["pets_club"].parent.parent
    out = {}
    for name, rows in (("two", 2), ("none", 0)):
        out[name] = thin_corpus(root, tmp_path_factory.mktemp(f"thin-{name}"), {"pets_club": rows})["pets_club"]
    out["full"] = fixture_dbs["pets_club"]
    return out


@pytest.fixture(scope="module")
def distilled(corpus, tmp_path_factory) -> dict[str, distil.Distilled]:
    return {name: distil.distil("pets_club", corpus[name], list(GOLDS), tmp_path_factory.mktemp(f"work-{name}"),
                                SETTINGS) for name in ("two", "none")}


def test_the_thinned_corpus_keeps_the_schema_and_at_most_the_rows_asked(corpus, fixture_dbs):
    def schema(path: Path) -> list:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY rowid").fetchall()

    assert schema(corpus["two"]) == schema(corpus["none"]) == schema(fixture_dbs["pets_club"])
    assert _rows(corpus["two"]) == {"Owner": 2, "Pet": 2}
    assert _rows(corpus["none"]) == {"Owner": 0, "Pet": 0}
    with sqlite3.connect(corpus["two"]) as conn:  # rows chosen parents first: the links still hold
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


@pytest.mark.parametrize("counts, expected", [
    ([2, 2], True), ([0, 0, 0], True), ([3, 1], True), ([2, 4], False), ([], False),
], ids=["two rows a table", "no rows at all", "three rows at most", "a table of four", "no table"])
def test_a_database_is_thin_when_no_table_holds_more_than_three_rows(counts, expected):
    assert thin.is_thin(counts) is expected


def test_a_thin_database_keeps_only_what_its_schema_declares(corpus):
    with sqlite3.connect(corpus["two"]) as conn:
        profile = mining.mine(conn)
    assert thin.thin_profile(profile)
    unique = {(t.name, c.name) for t in profile.tables for c in profile.tables[0].columns if c.unique}
    assert {c for _t, c in unique} == {"owner_id"}  # two names are distinct by chance; the key is declared
    assert not any(c.near_unique for t in profile.tables for c in t.columns)
    assert [(k.describe(), k.declared, k.total) for k in profile.links] == [
        ("Pet(owner_id) -> Owner(owner_id)", True, False)]


def test_a_database_that_is_not_thin_is_mined_as_before(corpus):
    with sqlite3.connect(corpus["full"]) as conn:
        profile = mining.mine(conn)
    assert not thin.thin_profile(profile)
    assert profile.table("Owner").column("name").unique  # six distinct names: kept, as before


@pytest.mark.parametrize("name", ["two", "none"], ids=["two rows a table", "no rows"])
def test_every_gold_with_an_answer_returns_rows_on_some_neighbour(distilled, name):
    found = distilled[name]
    assert found.files
    for gold in GOLDS:
        somewhere = any(r is not None and r.shape.rows for r in found.results[gold])
        assert somewhere is (gold != NOWHERE), gold


@pytest.mark.parametrize("name", ["two", "none"], ids=["two rows a table", "no rows"])
def test_thin_neighbours_have_rows_enough_and_keep_keys_and_links(distilled, name):
    found = distilled[name]
    low, high = thin.THIN_SIZES
    for path in found.files:
        assert all(low <= n < high for n in _rows(path).values()), _rows(path)
        conn = inv.open_read_only(str(path))
        try:
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
            assert neighbour_proof.violations(found.profile, conn, found.repeats_allowed) == []
            owners = [r[0] for r in conn.execute("SELECT owner_id FROM Owner")]
        finally:
            conn.close()
        assert len(owners) == len(set(owners))  # the declared primary key


def test_a_gold_literal_the_thin_original_lacks_is_drawn_into_its_neighbours(corpus, distilled):
    with sqlite3.connect(corpus["two"]) as conn:
        assert conn.execute("SELECT count(*) FROM Owner WHERE city = 'Leeds'").fetchone()[0] == 0
    gold = GOLDS[0]
    assert any(r is not None and r.shape.rows for r in distilled["two"].results[gold])


def test_the_summary_names_the_rows_whose_gold_is_empty_everywhere(distilled):
    rows = [{"id": f"rl-{i:05d}", "split": "rl", "db_id": "pets_club", "gold": g} for i, g in enumerate(GOLDS)]
    found = thin_summary.section(distilled["two"], rows)
    assert found is not None
    assert [r["id"] for r in found["empty_everywhere"]] == ["rl-00005"]
    assert found["golds_empty_everywhere"] == 1 and found["tables"] == {"Owner": 2, "Pet": 2}
    line = thin_summary.render({"databases": {"pets_club": {"thin": found}}})
    assert "rl-00005" in line[0]


def _bundle(root: Path, database: Path, found: distil.Distilled) -> Path:
    rows = [bundle_data.IndexRow(f"rl-{i:05d}", "rl", "pets_club", g) for i, g in enumerate(GOLDS)]
    root.mkdir(parents=True, exist_ok=True)
    pack.stage_modules(root, BUNDLE_SRC)
    bundle_data.write_bundle_data(root, rows, {"pets_club": database})
    index = json.loads((root / "data" / "index.json").read_text())
    attach.attach(root / "data", index, {"pets_club": found}, SETTINGS, ["rl"])
    (root / "data" / "index.json").write_bytes(bundle_data.dumps_canonical(index))
    return root


def _score(root: Path, gold: str, answer: str):
    with default_scoring_env():
        return scoring_entry.score_call(scoring_entry.RowCall(f"```sql\n{answer}\n```", gold, "pets_club"),
                                        root=str(root), caller="reward")


@pytest.fixture(scope="module")
def thin_bundle(corpus, distilled, tmp_path_factory) -> Path:
    return _bundle(tmp_path_factory.mktemp("thin-bundle"), corpus["two"], distilled["two"])


def test_an_empty_answer_is_never_paid_where_the_gold_is_empty_everywhere(thin_bundle):
    verdict = _score(thin_bundle, NOWHERE, "SELECT name FROM Pet WHERE 0")
    assert (verdict.outcome, verdict.score, verdict.original_score) == ("mismatch", 0.0, 1.0)
    assert "thin database pets_club" in verdict.detail and verdict.decided_on == "thin database pets_club"


def test_an_empty_answer_is_refused_by_a_neighbour_where_the_gold_has_rows_there(thin_bundle):
    gold = GOLDS[0]  # no Leeds on the thin original: empty there, not on every neighbour
    assert _score(thin_bundle, gold, "SELECT name FROM Owner WHERE 0").score == 0.0
    assert _score(thin_bundle, gold, "SELECT name FROM Owner WHERE city = 'Leeds'").score == 1.0


def test_a_database_that_is_not_thin_pays_as_before(corpus, tmp_path):
    """A gold empty everywhere on pets_club as shipped: the empty answer matches, as it always did."""
    verdict = thin_rows.unpaid(scoring_entry.verify_mod.Verdict("match", 1.0, "same rows", gold_rows=0),
                               "pets_club", str(corpus["full"]), "full-pets-club", ())
    assert (verdict.outcome, verdict.score) == ("match", 1.0)
    assert not thin_rows.thin_database(str(corpus["full"]), "full-pets-club")


def test_the_audit_asks_a_thin_database_only_for_its_declared_keys(corpus):
    found = {str(i) for i in audit_invariants.mine(corpus["two"])}
    assert "unique Owner.owner_id" in found and "unique Owner.name" not in found
    assert not any(i.startswith("referenced") for i in found)
    assert "unique Owner.name" in {str(i) for i in audit_invariants.mine(corpus["full"])}


@pytest.mark.real_data
def test_no_spider_database_with_rows_is_thin(spider_dir):
    """Thin databases alone are drawn otherwise: Spider's own, as shipped, never are (the seven it
    ships without a row aside: music_2, geo, yelp, ...; no default split uses them)."""
    thin_ones = []
    for path in sorted((spider_dir / "database").glob("*/*.sqlite")):
        counts = list(_rows(path).values())
        if thin.is_thin(counts) and any(counts):
            thin_ones.append(path.stem)
    assert thin_ones == []


def test_rl_keeps_a_thin_databases_empty_golds_and_leaves_out_anothers(corpus):
    """An empty gold is a free reward on one database; on a thin one the neighbours give it rows."""
    empty = {"db_id": "pets_club", "question": "Owners in Leeds?", "query": GOLDS[0]}
    picked = {}
    for name in ("two", "full"):
        rules = splits.Rules(splits.Catalog({"pets_club": corpus[name]}, 1000), splits.GoldChecker())
        found = splits.select([empty if name == "two" else {**empty, "query": NOWHERE}], [], splits.Sizes(0, 1, 0),
                              rules)
        picked[name] = [r.gold for r in found.rl]
    assert picked == {"two": [GOLDS[0]], "full": []}
