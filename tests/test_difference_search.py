"""The search aimed at the difference (bundle/difference_*.py, bundle/sql/sandbox.py): edits of the original
where an answer differs from its gold reject near misses no list names, never a right answer, and the
verdict is a pure function of (answer, gold, database, settings)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours.invariants import open_read_only
from bundle.search import difference as difference_search
from bundle.search import edits as difference_edits
from bundle.search.edits import edits
from bundle.sql import connection as sql_connection
from bundle.sql import guard as sql_guard
from bundle.sql import sandbox as sql_sandbox
from bundle.sql.reading import difference
from bundle.verify import MATCH, MISMATCH, gold_result

LIMITS = DEFAULT_LIMITS

INN = """
CREATE TABLE Rooms (RoomId TEXT PRIMARY KEY, roomName TEXT, beds INTEGER, bedType TEXT, basePrice INTEGER);
CREATE TABLE Reservations (Code INTEGER PRIMARY KEY, Room TEXT REFERENCES Rooms(RoomId), Kids INTEGER);
INSERT INTO Rooms VALUES ('RND', 'Recluse and defiance', 1, 'King', 150), ('IBS', 'Interim but salutary', 1, 'King', 150),
  ('AOB', 'Abscond or bolster', 2, 'Queen', 175), ('MWC', 'Mendicant with cryptic', 2, 'Double', 125),
  ('HBB', 'Harbinger but bequest', 1, 'Queen', 100), ('IBD', 'Immutable before decorum', 2, 'Queen', 150),
  ('TAA', 'Thrift and accolade', 1, 'Double', 75), ('CAS', 'Convoke and sanguine', 2, 'King', 175);
INSERT INTO Reservations VALUES (1, 'RND', 0), (2, 'IBS', 1), (3, 'AOB', 2), (4, 'MWC', 0), (5, 'HBB', 0),
  (6, 'IBD', 1), (7, 'TAA', 0), (8, 'CAS', 2), (9, 'RND', 1), (10, 'AOB', 0);
"""

SHOP = """
CREATE TABLE entrepreneur (Entrepreneur_ID INTEGER PRIMARY KEY, Company TEXT, Money REAL, Investor TEXT);
INSERT INTO entrepreneur VALUES (1, 'Umbrolly', 150000.0, 'Duncan Bannatyne'), (2, 'Grails Ltd', 120000.0, 'Doug Richard'),
  (3, 'Le Beanock', 54000.0, 'Rachel Elnaugh'), (4, 'IV Cam', 50000.0, 'Peter Jones'),
  (5, 'Mycorrhizal Systems', 75000.0, 'Simon Woodroffe'), (6, 'Elizabeth Galton Ltd', 110000.0, 'Duncan Bannatyne');
"""


MOVIES = """
CREATE TABLE Reviewer (rID INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE Rating (rID INTEGER REFERENCES Reviewer(rID), mID INTEGER, stars INTEGER);
INSERT INTO Reviewer VALUES (201, 'Sarah Martinez'), (202, 'Daniel Lewis'), (203, 'Brittany Harris'), (204, 'Mike Anderson');
INSERT INTO Rating VALUES (201, 101, 2), (201, 101, 4), (202, 106, 4), (203, 103, 2), (203, 108, 4), (204, 101, 3);
"""


def _database(tmp_path: Path, name: str, script: str) -> Path:
    path = tmp_path / f"{name}.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(script)
    conn.close()
    return path


def _task(path: Path, gold: str) -> difference_search.Task:
    conn = open_read_only(str(path))
    try:
        profile = neighbour_mining.mine(conn)
    finally:
        conn.close()
    return difference_search.Task(path.stem, path.stem + "-sha", str(path), gold, profile,
                                  difference_search.grouped(profile, gold))


def _search(path: Path, gold: str, answer: str, limits=LIMITS):
    task = _task(path, gold)
    difference_search.forget()
    return difference_search.search(task, answer, gold_result(gold, str(path), limits), limits)


@pytest.fixture
def inn(tmp_path) -> Path:
    return _database(tmp_path, "inn", INN)


@pytest.fixture
def shop(tmp_path) -> Path:
    return _database(tmp_path, "shop", SHOP)


@pytest.fixture
def movies(tmp_path) -> Path:
    return _database(tmp_path, "movies", MOVIES)


@pytest.mark.parametrize("gold, answer", [
    pytest.param("SELECT rID FROM Reviewer WHERE name = 'Daniel Lewis'", "SELECT 202", id="an id written out"),
    pytest.param("SELECT T1.stars FROM Rating AS T1 JOIN Reviewer AS T2 ON T1.rID = T2.rID WHERE T2.name = 'Daniel Lewis'",
                 "SELECT stars FROM Rating WHERE rID = 202", id="a name's key hard-coded for the join"),
])
def test_an_answer_that_hard_codes_a_key_is_told_apart(movies, gold, answer):
    found = _search(movies, gold, answer)
    assert found.outcome == MISMATCH and found.decided_on.startswith("edit "), found


KING = "SELECT sum(beds) FROM Rooms WHERE bedType = 'King'"
TOP_INVESTOR = "SELECT Investor FROM entrepreneur GROUP BY Investor ORDER BY count(*) DESC LIMIT 1"


@pytest.mark.parametrize("gold, answer", [
    pytest.param(KING, "SELECT sum(beds) FROM Rooms WHERE bedType LIKE '%King%'", id="a substring for an equality"),
    pytest.param(KING, "SELECT 4", id="the gold's value written out"),
    pytest.param(KING, "SELECT sum(beds) FROM Rooms WHERE bedType >= 'King' AND bedType < 'L'", id="a range for an equality"),
    pytest.param(KING, "SELECT sum(beds) FROM Rooms WHERE bedType <> 'Queen' AND bedType <> 'Double'",
                 id="the other categories excluded"),
    pytest.param("SELECT count(*) FROM Rooms WHERE basePrice > 150", "SELECT count(*) FROM Rooms WHERE basePrice >= 175",
                 id="a bound moved to the next value the data holds"),
    pytest.param("SELECT count(*) FROM Rooms WHERE bedType = 'King'",
                 "SELECT count(*) FROM Rooms WHERE bedType = 'King' GROUP BY bedType",
                 id="grouped where the gold counts: no row at all once no room is King"),
    pytest.param(TOP_INVESTOR, TOP_INVESTOR.replace("GROUP BY Investor", "GROUP BY Company"), id="grouped by another column"),
    pytest.param("SELECT Investor FROM entrepreneur GROUP BY Investor HAVING count(*) >= 2",
                 "SELECT Investor FROM entrepreneur GROUP BY Investor HAVING count(*) >= 2 LIMIT 1", id="LIMIT 1 added"),
    pytest.param("SELECT count(DISTINCT Investor) FROM entrepreneur", "SELECT count(*) - 1 FROM entrepreneur",
                 id="a count of rows for a count of distinct values"),
    pytest.param("SELECT avg(Money) FROM entrepreneur", "SELECT sum(Money) / 6 FROM entrepreneur", id="a sum over a fixed count"),
])
def test_a_near_miss_the_original_accepts_is_rejected_on_an_edit(inn, shop, gold, answer):
    path = inn if "Rooms" in gold else shop
    assert sql_guard.run_query(str(path), answer, LIMITS, budget_steps=10 ** 6, wall_s=60).rows == \
        sql_guard.run_query(str(path), gold, LIMITS, budget_steps=10 ** 6, wall_s=60).rows  # the original accepts it
    found = _search(path, gold, answer)
    assert found.outcome == MISMATCH and found.decided_on.startswith("edit "), found


@pytest.mark.parametrize("gold, answer", [
    pytest.param(KING, "SELECT sum(T.beds) FROM Rooms AS T WHERE T.bedType = 'King'", id="an alias"),
    pytest.param(KING, "SELECT total(beds) FROM Rooms WHERE 'King' = bedType", id="total and the comparison turned"),
    pytest.param(KING, "SELECT sum(beds) FROM (SELECT * FROM Rooms WHERE bedType IN ('King'))", id="a subquery and IN"),
    pytest.param("SELECT count(*) FROM Rooms WHERE basePrice > 150", "SELECT count(RoomId) FROM Rooms WHERE NOT basePrice <= 150",
                 id="a negated bound and a key counted"),
    pytest.param("SELECT count(*) FROM Rooms WHERE basePrice > 150", "SELECT count(*) FROM Rooms WHERE basePrice >= 151",
                 id="a strict bound written inclusive one above, where prices are whole numbers"),
    pytest.param(TOP_INVESTOR, "SELECT Investor FROM entrepreneur GROUP BY 1 ORDER BY count(Entrepreneur_ID) DESC LIMIT 1",
                 id="grouped by position"),
    pytest.param("SELECT DISTINCT Investor FROM entrepreneur", "SELECT Investor FROM entrepreneur GROUP BY Investor",
                 id="DISTINCT as GROUP BY"),
    pytest.param("SELECT min(Money), Company FROM entrepreneur",
                 "SELECT Money, Company FROM entrepreneur WHERE Money = (SELECT min(Money) FROM entrepreneur)",
                 id="every row at the least value for the gold's bare column: no edit ties the minimum"),
    pytest.param("SELECT T1.roomName FROM Rooms AS T1 JOIN Reservations AS T2 ON T1.RoomId = T2.Room WHERE T2.Kids > 1",
                 "SELECT roomName FROM Rooms WHERE RoomId IN (SELECT Room FROM Reservations WHERE Kids > 1)",
                 id="a join as IN, where a room's rows cannot repeat"),
])
def test_a_right_answer_in_other_words_is_never_rejected(inn, shop, gold, answer):
    path = inn if "Rooms" in gold else shop
    found = _search(path, gold, answer)
    assert found.decided_on is None and found.outcome == MATCH, found
    assert found.databases >= 1  # it was searched, and no edit told it apart


def test_the_verdict_is_the_same_computed_or_found_in_any_order(inn):
    answers = ["SELECT sum(beds) FROM Rooms WHERE bedType LIKE '%King%'", "SELECT sum(T.beds) FROM Rooms AS T WHERE T.bedType = 'King'",
               "SELECT 4", "SELECT sum(beds) FROM Rooms WHERE bedType >= 'King' AND bedType < 'L'"]
    task, original = _task(inn, KING), gold_result(KING, str(inn), LIMITS)
    alone = []
    for answer in answers:
        difference_search.forget()
        alone.append(difference_search.search(task, answer, original, LIMITS))
    difference_search.forget()
    together = [difference_search.search(task, a, original, LIMITS) for a in reversed(answers)][::-1]
    difference_search.KEPT.verdicts.clear()
    again = [difference_search.search(task, a, original, LIMITS) for a in answers]
    assert alone == together == again


def test_the_budget_counts_edits_and_work_and_its_end_never_rejects(inn):
    answer = "SELECT sum(beds) FROM Rooms WHERE bedType LIKE '%King%'"
    full = _search(inn, KING, answer)
    one = _search(inn, KING, answer, LIMITS.replace(difference_edits=1))
    assert full.outcome == MISMATCH and full.databases > 1
    assert one.outcome == MATCH and one.decided_on is None and one.databases == 1
    starved = _search(inn, KING, answer, LIMITS.replace(difference_steps=10))
    assert starved.outcome == MATCH and starved.steps >= 10


def test_an_edit_that_breaks_an_invariant_of_the_original_is_never_judged(shop, tmp_path):
    """Investors repeat at most twice on the original; a third row of one never judges anything."""
    gold = "SELECT count(*) FROM entrepreneur WHERE Investor = 'Duncan Bannatyne'"
    task = _task(shop, gold)
    diff = difference(gold, "SELECT 2", difference_search._schema(task.profile))
    box = sql_sandbox.sandbox(task.path, LIMITS)
    made = edits(box.plain, task.profile, diff, gold, 48)
    assert made
    third = [e for e in made if "most common value in Investor" in e.what or
             ("Investor" in e.what and "its most common value" in e.what)]
    original = gold_result(gold, str(shop), LIMITS)
    for edit in third:
        outcome, judged = difference_search._try(task, edit, "SELECT 2", original, box, LIMITS, 10 ** 9)
        assert outcome.gold is None and judged is None, edit.what


def test_the_reading_names_where_two_queries_differ():
    names = {"t": ("a", "b", "c"), "u": ("a", "d")}
    same = difference("SELECT a FROM t WHERE b = 1", "select A from T where B = 1", names)
    assert same.lanes == () and not same.shape_differs
    moved = difference("SELECT a FROM t WHERE b = 1", "SELECT a FROM t WHERE c = 1", names)
    assert [(lane.table, lane.column) for lane in moved.lanes] == [("t", "b"), ("t", "c")]
    joined = difference("SELECT t.a FROM t JOIN u ON t.a = u.a", "SELECT a FROM t", names)
    assert joined.tables == ("t", "u") and joined.shape_differs
    assert ("u", "a") in [(lane.table, lane.column) for lane in joined.lanes]


class TestSandbox:
    def test_an_edit_is_undone_and_a_query_cannot_write(self, inn):
        box = sql_sandbox.Sandbox(str(inn), LIMITS)
        try:
            box.apply([("UPDATE Rooms SET beds = 9 WHERE RoomId = 'RND'", ())])
            assert box.conn.execute("SELECT beds FROM Rooms WHERE RoomId = 'RND'").fetchone() == (9,)
            for hostile in ["DELETE FROM Rooms", "UPDATE Rooms SET beds = 0", "PRAGMA query_only = 0", "ROLLBACK",
                            "RELEASE difference_edit", "CREATE TABLE x(a)", "ATTACH ':memory:' AS y", "VACUUM", "REINDEX"]:
                with pytest.raises(sql_guard.QueryFailed):
                    sql_guard.run_query(str(inn), hostile, LIMITS, budget_steps=10 ** 6, wall_s=60, sandbox=box)
            assert box.conn.execute("SELECT count(*), sum(beds) FROM Rooms").fetchone() == (8, 20)
            box.undo()
            assert box.conn.execute("SELECT beds FROM Rooms WHERE RoomId = 'RND'").fetchone() == (1,)
            assert box.plain.execute("SELECT beds FROM Rooms WHERE RoomId = 'RND'").fetchone() == (1,)
        finally:
            box.close()

    def test_a_closed_copy_is_made_again_with_the_edit_it_held(self, inn):
        box = sql_sandbox.Sandbox(str(inn), LIMITS)
        held = sql_connection.cached_bytes()
        try:
            box.apply([("DELETE FROM Reservations WHERE Code = 10", ())])
            assert sql_connection.cached_bytes() > held
            box.close()
            assert sql_connection.cached_bytes() == held
            rows = sql_guard.run_query(str(inn), "SELECT count(*) FROM Reservations", LIMITS, budget_steps=10 ** 6,
                                       wall_s=60, sandbox=box).rows
            assert rows == [(9,)]
            box.undo()
            assert box.conn.execute("SELECT count(*) FROM Reservations").fetchone() == (10,)
        finally:
            box.close()
        assert sql_connection.cached_bytes() == held

    def test_the_file_is_never_written(self, inn):
        before = inn.read_bytes()
        box = sql_sandbox.Sandbox(str(inn), LIMITS)
        box.apply([("DELETE FROM Rooms", ())])
        box.undo()
        box.close()
        assert inn.read_bytes() == before


FILMS = """
CREATE TABLE Movie (mID INTEGER PRIMARY KEY, title TEXT, director TEXT);
CREATE TABLE Reviewer (rID INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE Rating (rID INTEGER REFERENCES Reviewer(rID), mID INTEGER REFERENCES Movie(mID), stars INTEGER);
INSERT INTO Movie VALUES (101, 'Gone with the Wind', 'Victor Fleming'), (102, 'Star Wars', 'George Lucas'),
  (103, 'Titanic', 'James Cameron'), (104, 'Avatar', 'James Cameron');
INSERT INTO Reviewer VALUES (201, 'Sarah Martinez'), (202, 'Daniel Lewis');
INSERT INTO Rating VALUES (201, 101, 2), (201, 103, 4), (202, 104, 3), (202, 102, 5);
"""


def test_a_copy_with_its_children_adds_each_parent_once(tmp_path):
    """A copied movie's ratings name the new movie: the copy adds it once, never a second row with
    the same key for the ratings to name (the edit would fail and be spent)."""
    path = _database(tmp_path, "films", FILMS)
    gold = "SELECT title FROM Movie WHERE director = 'James Cameron'"
    task = _task(path, gold)
    diff = difference(gold, "SELECT title FROM Movie WHERE director <= 'James Cameron'",
                      difference_search._schema(task.profile))
    box = sql_sandbox.sandbox(task.path, LIMITS)
    copies = [e for e in edits(box.plain, task.profile, diff, gold, 48) if "its rows in other tables" in e.what]
    assert copies
    for edit in copies:
        movies = [args for text, args in edit.statements if text.startswith('INSERT INTO "Movie"')]
        assert len({args[0] for args in movies}) == len(movies), edit.statements
        box.apply(edit.statements)  # raises on a repeated key
        box.undo()


CARS = """
CREATE TABLE model_list (ModelId INTEGER PRIMARY KEY, Model TEXT UNIQUE);
CREATE TABLE car_names (MakeId INTEGER PRIMARY KEY, Model TEXT REFERENCES model_list(Model), Make TEXT);
INSERT INTO model_list VALUES (1, 'amc'), (2, 'audi'), (3, 'bmw'), (4, 'volkswagen');
INSERT INTO car_names VALUES (1, 'amc', 'amc hornet'), (2, 'audi', 'audi 100ls'), (3, 'bmw', 'bmw 2002'),
  (4, 'amc', 'amc gremlin'), (5, ' volkswagen', 'vw rabbit');
"""


def test_an_edit_may_copy_what_the_original_breaks_never_break_it_further(tmp_path):
    """car_1 already holds a car whose model no model row names (' volkswagen'): a copy of that car
    adds no value the link misses and may judge; a model renamed under its cars adds one and never
    judges (the gold would be judged on a database the original's facts do not allow)."""
    path = _database(tmp_path, "cars", CARS)
    gold = "SELECT count(*) FROM car_names WHERE Model = 'amc'"
    task = _task(path, gold)
    box = sql_sandbox.sandbox(task.path, LIMITS)
    original = gold_result(gold, str(path), LIMITS)
    copy = difference_edits.Edit("the orphan car copied", (
        ("INSERT INTO car_names VALUES (6, ' volkswagen', 'vw golf')", ()),), ("car_names",))
    renamed = difference_edits.Edit("amc renamed under its cars", (
        ("UPDATE model_list SET Model = 'amc motors' WHERE ModelId = 1", ()),), ("model_list",))
    difference_search.forget()
    judged, _ = difference_search._try(task, copy, "SELECT 2", original, box, LIMITS, 10 ** 9)
    assert judged.gold is not None
    refused, _ = difference_search._try(task, renamed, "SELECT 2", original, box, LIMITS, 10 ** 9)
    assert refused.gold is None


PETS = """
CREATE TABLE Student (StuID INTEGER PRIMARY KEY, LName TEXT, Age INTEGER);
CREATE TABLE Pets (PetID INTEGER PRIMARY KEY, PetType TEXT, pet_age INTEGER, weight REAL);
CREATE TABLE Has_Pet (StuID INTEGER REFERENCES Student(StuID), PetID INTEGER REFERENCES Pets(PetID));
INSERT INTO Student VALUES (1001, 'Smith', 18), (1002, 'Kim', 19), (1003, 'Jones', 21), (1004, 'Lee', 20);
INSERT INTO Pets VALUES (2001, 'cat', 3, 12.0), (2002, 'dog', 2, 13.4), (2003, 'dog', 1, 9.3);
INSERT INTO Has_Pet VALUES (1001, 2001), (1002, 2002), (1002, 2003);
"""


def test_a_copy_may_repeat_a_number_unique_by_chance(tmp_path):
    """Three pets have three ages by chance, not by a key: a copied cat keeps its age 3 under another
    type and shows an answer that forgets the type (labelled pair edit-005, pets_1; the search's rows
    keep only the original's facts, not its coincidences)."""
    path = _database(tmp_path, "pets", PETS)
    gold = ("SELECT T1.LName FROM Student AS T1 JOIN Has_Pet AS T2 ON T1.StuID = T2.StuID JOIN Pets AS T3"
            " ON T3.PetID = T2.PetID WHERE T3.pet_age = 3 AND T3.PetType = 'cat'")
    answer = ("SELECT Student.LName FROM Student JOIN Has_Pet ON Student.StuID = Has_Pet.StuID"
              " JOIN Pets ON Has_Pet.PetID = Pets.PetID WHERE Pets.pet_age = 3")
    found = _search(path, gold, answer)
    assert found.outcome == MISMATCH and found.decided_on.startswith("edit "), found


def test_under_an_or_a_new_row_copies_one_the_gold_does_not_read(tmp_path):
    """Every King room has two beds here: a new room copied from a read row is counted by both sides
    of the OR whatever its bed type; one copied from a room the gold leaves out tells `LIKE` from `=`."""
    rooms = """
    CREATE TABLE Rooms (RoomId TEXT PRIMARY KEY, beds INTEGER, bedType TEXT);
    INSERT INTO Rooms VALUES ('RND', 2, 'King'), ('IBS', 2, 'King'), ('AOB', 1, 'Queen'), ('MWC', 1, 'Double'),
      ('HBB', 1, 'Queen'), ('IBD', 3, 'Queen');
    """
    path = _database(tmp_path, "rooms", rooms)
    gold = "SELECT count(*) FROM Rooms WHERE bedType = 'King' OR beds = 2"
    found = _search(path, gold, "SELECT count(*) FROM Rooms WHERE bedType LIKE '%King%' OR beds = 2")
    assert found.outcome == MISMATCH and found.decided_on.startswith("edit "), found
    assert _search(path, gold, "SELECT count(*) FROM Rooms WHERE beds = 2 OR bedType = 'King'").outcome == MATCH
