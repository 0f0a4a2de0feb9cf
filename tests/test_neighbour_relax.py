"""Invariants that hide a question: a gold asking what a kept invariant rules out gets a neighbour
that relaxes exactly that invariant, recorded in the index and accepted by the proof, and by nothing
else (harness/prepare/neighbours/relax.py, bundle/neighbours/proof.py)."""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.neighbours import invariants as inv
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours import proof as neighbour_proof
from bundle.sql import gold_results
from bundle.sql import guard as sql_guard
from bundle.verify import MATCH, Neighbour, judge, verify
from harness.emulator import neighbour_checks
from harness.prepare import bundle_data
from harness.prepare import summary as prepare_summary
from harness.prepare.neighbours import attach, distil, relax

HOTEL = """
CREATE TABLE Rooms (RoomId TEXT PRIMARY KEY, roomName TEXT, beds INTEGER, basePrice INTEGER);
CREATE TABLE Reservations (Code INTEGER PRIMARY KEY, Room TEXT, CheckIn TEXT, Rate REAL, LastName TEXT,
                           FOREIGN KEY (Room) REFERENCES Rooms(RoomId));
CREATE TABLE Readings (id INTEGER PRIMARY KEY, station TEXT, rain REAL);
INSERT INTO Rooms VALUES ('RND', 'Recluse and defiance', 1, 150), ('IBS', 'Interim but salutary', 1, 150),
  ('AOB', 'Abscond or bolster', 2, 175), ('MWC', 'Mendicant with cryptic', 2, 125),
  ('HBB', 'Harbinger but bequest', 1, 100), ('TAA', 'Thrift and accolade', 1, 75);
INSERT INTO Readings VALUES (1, 'north', 2.5), (2, 'north', 0.0), (3, 'south', 1.25), (4, 'south', 7.5),
  (5, 'east', 0.5), (6, 'east', 3.0), (7, 'west', 4.0), (8, 'west', 0.25);
"""
NAMES = ["SMITH", "JONES", "KLEIN", "ROSS", "DIAZ", "CHEN", "NOVAK", "LEE"]
ROOMS = ["RND", "IBS", "AOB", "MWC", "HBB", "TAA"]
UNBOOKED = "SELECT count(*) FROM Rooms WHERE RoomId NOT IN (SELECT DISTINCT Room FROM Reservations)"
DRY = "SELECT count(*) FROM Readings WHERE rain IS NULL"
GOLDS = [UNBOOKED, DRY, "SELECT roomName FROM Rooms WHERE basePrice > 120", "SELECT count(*) FROM Reservations",
         "SELECT station, avg(rain) FROM Readings GROUP BY station"]


def _hotel(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.executescript(HOTEL)
        conn.executemany("INSERT INTO Reservations VALUES (?, ?, ?, ?, ?)",
                         [(10000 + i, ROOMS[i % 6], f"2010-0{1 + i % 9}-{10 + i % 18}", 100.0 + 5 * (i % 7),
                           NAMES[i % 8]) for i in range(30)])
    return path


@pytest.fixture(scope="module")
def hotel(tmp_path_factory) -> Path:
    return _hotel(tmp_path_factory.mktemp("hotel") / "hotel.sqlite")


@pytest.fixture(scope="module")
def plain(hotel, tmp_path_factory) -> distil.Distilled:
    """The hotel's neighbours as distilled, before any relaxation."""
    return distil.distil("hotel", hotel, GOLDS, tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def relaxed(hotel, plain, tmp_path_factory) -> distil.Distilled:
    return relax.relax(plain, hotel, tmp_path_factory.mktemp("relaxed"))


def _profile(hotel: Path) -> inv.Profile:
    conn = inv.open_read_only(str(hotel))
    try:
        return neighbour_mining.mine(conn)
    finally:
        conn.close()


# --- which invariants a question depends on ------------------------------------------------------------

LINK = "total link Reservations(Room) -> Rooms(RoomId)"


@pytest.mark.parametrize("gold, asks", [
    (UNBOOKED, [LINK]),
    ("SELECT roomName FROM Rooms AS T1 WHERE NOT EXISTS (SELECT 1 FROM Reservations AS T2 WHERE T2.Room = T1.RoomId)",
     [LINK]),
    ("SELECT RoomId FROM Rooms EXCEPT SELECT Room FROM Reservations", [LINK]),
    ("SELECT T1.roomName FROM Rooms AS T1 LEFT JOIN Reservations AS T2 ON T1.RoomId = T2.Room WHERE T2.Code IS NULL",
     [LINK]),
    (DRY, ["column without NULL Readings.rain"]),
    ('SELECT station FROM Readings WHERE "rain" IS NOT NULL', ["column without NULL Readings.rain"]),
    ("SELECT count(*) FROM Rooms WHERE RoomId NOT IN ('RND', 'IBS')", []),
    ("SELECT roomName FROM Rooms WHERE RoomId IN (SELECT Room FROM Reservations)", []),
    ("SELECT RoomId FROM Rooms EXCEPT SELECT 'RND'", []),
    ("SELECT count(*) FROM Rooms WHERE roomName IS NULL AND basePrice > 100", ["column without NULL Rooms.roomName"]),
    ("SELECT T1.LastName FROM Reservations AS T1 JOIN Rooms AS T2 ON T1.Room = T2.RoomId WHERE T2.beds = 1 EXCEPT "
     "SELECT T1.LastName FROM Reservations AS T1 JOIN Rooms AS T2 ON T1.Room = T2.RoomId WHERE T2.basePrice > 100", []),
    ("SELECT T2.roomName FROM Reservations AS T1 JOIN Rooms AS T2 ON T1.Room = T2.RoomId "
     "WHERE T1.Code NOT IN (SELECT Code FROM Reservations WHERE Rate > 110)", []),
    ("SELECT beds FROM Rooms WHERE basePrice > 100 AND RoomId NOT IN (SELECT Room FROM Reservations) ORDER BY beds",
     [LINK]),
], ids=["NOT IN over the child", "NOT EXISTS", "EXCEPT", "LEFT JOIN IS NULL: the link, not the NULL",
        "IS NULL", "IS NOT NULL on a quoted name", "NOT IN a list of literals", "IN, not NOT IN",
        "EXCEPT without the child", "IS NULL beside another condition",
        "EXCEPT reading the child on both sides", "NOT IN where the kept rows read the child too",
        "NOT IN between other clauses"])
def test_questions_name_the_kept_invariants_a_gold_asks_about(hotel, gold, asks):
    assert [q.describe() for q in relax.questions(gold, _profile(hotel))] == asks


def test_an_invariant_the_original_does_not_show_is_no_question(tmp_path):
    db = _hotel(tmp_path / "h.sqlite")
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM Reservations WHERE Room = 'TAA'")  # a room without a reservation: no total link
        conn.execute("UPDATE Readings SET rain = NULL WHERE id = 3")
    profile = _profile(db)
    assert relax.questions(UNBOOKED, profile) == () and relax.questions(DRY, profile) == ()


# --- hidden before, told apart after --------------------------------------------------------------------

def _scores(found: distil.Distilled, original: Path, answer: str, gold: str):
    neighbours = [Neighbour(f"neighbour {k + 1}", str(p), r)
                  for k, (p, r) in enumerate(zip(found.files, found.results[gold])) if r is not None]
    return verify(answer, gold, str(original), is_sql=True, neighbours=neighbours)


@pytest.mark.parametrize("gold", [UNBOOKED, DRY], ids=["every room booked", "no reading without rain"])
def test_a_hidden_gold_pays_a_constant_before_and_refuses_it_after(hotel, plain, relaxed, gold):
    assert _scores(plain, hotel, "SELECT 0", gold).score == 1.0  # the same answer everywhere: paid
    after = _scores(relaxed, hotel, "SELECT 0", gold)
    assert after.score == 0.0 and after.decided_on.startswith("neighbour ")
    assert _scores(relaxed, hotel, gold, gold).score == 1.0


def test_the_relaxed_neighbours_are_recorded_with_their_golds_and_why(plain, relaxed):
    assert not plain.relaxed and len(relaxed.files) == len(plain.files) + 2
    got = {k: [r.to_json() for r in items] for k, items in relaxed.relaxed.items()}
    assert got == {len(plain.files): [{"kind": "total link", "subject": "Reservations(Room) -> Rooms(RoomId)",
                                       "golds": [UNBOOKED]}],
                   len(plain.files) + 1: [{"kind": "column without NULL", "subject": "Readings.rain", "golds": [DRY]}]}
    assert sorted(h.gold for h in relaxed.hidden) == sorted([UNBOOKED, DRY])
    assert all(h.neighbour is not None and ("every neighbour keeps that" in h.why or "nor on any neighbour" in h.why)
               for h in relaxed.hidden)
    for gold, per in relaxed.results.items():  # a relaxed neighbour judges only the golds it was relaxed for
        assert [r is not None for r in per[len(plain.files):]] == [gold == UNBOOKED, gold == DRY]


def test_a_gold_whose_answer_the_neighbours_already_change_is_not_hidden(tmp_path):
    db = _hotel(tmp_path / "h.sqlite")
    found = distil.distil("hotel", db, GOLDS, tmp_path / "w")
    assert found.files
    database = relax._Database(found, db, {}, tmp_path / "r", relax.Settings())
    assert relax.hidden_golds(database, [UNBOOKED]) == [UNBOOKED]
    with sqlite3.connect(found.files[0]) as conn:  # a neighbour with a room nobody booked shows the answer
        conn.execute("DELETE FROM Reservations WHERE Room = (SELECT min(RoomId) FROM Rooms)")
    sql_guard.forget_connections()  # the file changed under the scorer's cached read-only connection
    assert relax.hidden_golds(database, [UNBOOKED]) == []


def test_a_database_gets_at_most_max_relaxed_neighbours_and_says_why_the_rest_stay_hidden(hotel, plain, tmp_path):
    capped = relax.relax(plain, hotel, tmp_path, relax.Settings(max_relaxed=1))
    assert [r.kind for items in capped.relaxed.values() for r in items] == ["total link"]
    left = [h for h in capped.hidden if h.relaxed is None]
    assert [h.gold for h in left] == [DRY] and "1 relaxed neighbours already" in left[0].why


# --- the proof accepts exactly what is recorded -----------------------------------------------------------

def _index(found: distil.Distilled, data: Path, original: Path) -> dict:
    (data / "databases").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(original, data / "databases" / "hotel.sqlite")
    index = {"databases": {"hotel": {"file": "databases/hotel.sqlite"}},
             "gold_results": {"hotel": {g: gold_results.to_json(r) for g, r in found.originals.items()}}}
    return attach.attach(data, index, {"hotel": found}, distil.Settings(), ["rl"])


def test_the_proof_accepts_the_recorded_relaxations(hotel, relaxed, tmp_path):
    index = _index(relaxed, tmp_path / "data", hotel)
    entries = index["databases"]["hotel"]["neighbours"]
    assert [bool(e.get("relaxed")) for e in entries] == [False] * (len(entries) - 2) + [True, True]
    assert neighbour_proof.prove_bundle(index, str(tmp_path / "data")) == []


def _without(index: dict, change) -> dict:
    changed = copy.deepcopy(index)
    change(changed["databases"]["hotel"]["neighbours"], changed["neighbour_results"]["hotel"])
    return changed


@pytest.mark.parametrize("change, refused", [
    (lambda entries, results: entries[-2].pop("relaxed"), "parent rows no row references"),
    (lambda entries, results: entries[-1].pop("relaxed"), "Readings.rain: "),
    (lambda entries, results: entries[-2].update(relaxed=entries[-1]["relaxed"]), "parent rows no row references"),
    (lambda entries, results: entries[-2]["relaxed"][0].update(subject="Reservations(Code) -> Rooms(RoomId)"),
     "which is not one of the original's total links"),
    (lambda entries, results: entries[-1]["relaxed"][0].update(subject="Rooms.nothing"),
     "which is not a column without NULL"),
    (lambda entries, results: entries[-1]["relaxed"][0].update(kind="uniqueness"), "no relaxable invariant"),
    (lambda entries, results: results["SELECT count(*) FROM Reservations"].__setitem__(
        len(entries) - 2, results[UNBOOKED][len(entries) - 2]), "which none of its relaxations names"),
], ids=["a total link relaxed without the record", "a NULL without the record", "the other neighbour's record",
        "a link that is not total", "a column that does not exist", "an invariant not relaxable",
        "a gold judged there that no relaxation names"])
def test_the_proof_refuses_a_relaxation_not_recorded(hotel, relaxed, tmp_path, change, refused):
    index = _index(relaxed, tmp_path / "data", hotel)
    broken = neighbour_proof.prove_bundle(_without(index, change), str(tmp_path / "data"))
    assert broken and any(refused in line for line in broken), broken


def test_a_relaxed_neighbour_keeps_every_other_invariant(relaxed):
    for k, items in relaxed.relaxed.items():
        conn = inv.open_read_only(str(relaxed.files[k]))
        try:
            assert neighbour_proof.violations(inv.relax(relaxed.profile, items), conn) == []
            broken = neighbour_proof.violations(relaxed.profile, conn)
        finally:
            conn.close()
        subject = items[0].subject
        assert broken and all(line.startswith(subject) for line in broken), broken  # only the one relaxed
        for gold in items[0].golds:
            here = relaxed.results[gold][k]
            assert here is not None and judge(str(relaxed.files[k]), gold, here, DEFAULT_LIMITS,
                                                   neighbour=True).outcome == MATCH


# --- reproducible, reported -------------------------------------------------------------------------------

def test_the_same_inputs_give_the_same_relaxed_neighbours_byte_for_byte(hotel, tmp_path):
    runs = [attach.build({"hotel": GOLDS}, {"hotel": hotel}, tmp_path / name) for name in ("a", "b")]
    first, again = runs[0]["hotel"], runs[1]["hotel"]
    assert first.relaxed and first.relaxed == again.relaxed
    assert [f.read_bytes() for f in first.files] == [f.read_bytes() for f in again.files]
    indexes = [bundle_data.dumps_canonical(_index(found, tmp_path / f"data-{k}", hotel))
               for k, found in enumerate((first, again))]
    assert indexes[0] == indexes[1] and b'"relaxed"' in indexes[0]
    none = attach.build({"hotel": GOLDS}, {"hotel": hotel}, tmp_path / "c", relaxation=None)["hotel"]
    assert not none.relaxed and len(none.files) == len(first.files) - 2


def test_the_summary_says_which_invariants_are_relaxed_for_which_golds(hotel, relaxed, tmp_path):
    index = _index(relaxed, tmp_path / "data", hotel)
    for entry in index["databases"]["hotel"]["neighbours"]:
        entry["bytes"] = entry.get("bytes", 0)
    found = prepare_summary.neighbours({"hotel": relaxed}, index, ("rl",))
    assert found["hidden"]["before"] == {"column without NULL": 1, "total link": 1}
    assert found["hidden"]["after"] == {}
    assert [(r["kind"], r["golds"]) for r in found["databases"]["hotel"]["relaxed"]] == \
        [("total link", [UNBOOKED]), ("column without NULL", [DRY])]
    assert "the original references every Rooms(RoomId) from Reservations(Room)" in \
        found["databases"]["hotel"]["relaxed"][0]["why"]
    line = prepare_summary._render_hidden(found)[0]
    assert "2 golds answered alike on every neighbour" in line and "2 told apart by 2 relaxed neighbours" in line
    assert "hotel total link Reservations(Room) -> Rooms(RoomId) (1 gold)" in line and "0 still hidden" in line
    # eight readings of eight amounts of rain: the search aimed at the difference may repeat one (keys never)
    assert [(c["column"], c["rows"]) for c in found["databases"]["hotel"]["unique_by_chance"]] == [("Readings.rain", 8)]
    assert "hotel Readings.rain" in prepare_summary._render_chance(found)[0]
    assert json.loads(json.dumps(found))  # the summary's JSON holds it as is


def test_verification_says_how_many_neighbours_relax_an_invariant():
    plain = {"file": "neighbours/hotel-1.sqlite"}
    loose = {"file": "neighbours/hotel-2.sqlite", "relaxed": [{"kind": "total link", "subject": "s", "golds": ["g"]}]}
    assert neighbour_checks._relaxed({"hotel": {"neighbours": [plain]}}) == ""
    assert neighbour_checks._relaxed({"hotel": {"neighbours": [plain, loose]}, "inn": {}}).startswith(" (1 each but")
