"""The search's databases built once per gold (bundle/search/cache.py): a warm store gives
the verdicts of a cold one in any order of predictions, what a prediction adds to its gold is still
tried, the store keeps to its bounds and leaves no file behind."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bundle.contract.errors import ScoringInfrastructureError
from bundle.contract.limits import DEFAULT_LIMITS
from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours.source import read_original
from bundle.search import cache
from bundle.search import counterexample as neighbour_search
from bundle.verify import verify

ROOT = Path(__file__).resolve().parent.parent
GOLD = "SELECT name FROM Pet WHERE species = 'dog' AND weight > 10"
PREDICTIONS = [
    "SELECT name FROM Pet WHERE weight > 10 AND species = 'dog'",  # right: the gold's databases only
    "SELECT name FROM Pet WHERE species = 'dog'",  # wrong: told apart early
    "SELECT name FROM Pet WHERE species = 'dog' AND weight > 10 AND name <> 'Zorro'",  # wrong by its own literal
    "SELECT name FROM Pet WHERE species = 'dog' AND weight >= 10.5",  # adds a literal the gold lacks
    "SELECT name FROM Pet WHERE species IN ('dog') AND weight > 10 ORDER BY birth_year",  # sorts where the gold does not
]


def _task(path: Path, gold: str = GOLD) -> neighbour_search.Task:
    conn = neighbour_invariants.open_read_only(str(path))
    try:
        return neighbour_search.Task("pets_club", "fixture", gold, neighbour_mining.mine(conn), read_original(conn))
    finally:
        conn.close()


def _verdict(task: neighbour_search.Task, path: Path, prediction: str, store: cache.Store, **limits: object) -> tuple:
    lim = DEFAULT_LIMITS.replace(**limits)
    v = verify(prediction, task.gold, str(path), is_sql=True, limits=lim,
               search=lambda sql, known: neighbour_search.search(task, sql, known, lim, store))
    return v.outcome, v.score, v.detail, v.decided_on, v.searched


@pytest.fixture(scope="module")
def pets(fixture_dbs) -> Path:
    return fixture_dbs["pets_club"]


@pytest.fixture(scope="module")
def cold(pets, tmp_path_factory) -> dict[str, tuple]:
    """Each prediction's verdict, each searched on an empty store of its own."""
    task = _task(pets)
    return {p: _verdict(task, pets, p, cache.Store(folder=str(tmp_path_factory.mktemp("cold")))) for p in PREDICTIONS}


def test_the_cases_cover_a_match_and_mismatches_of_both_kinds(cold):
    assert cold[PREDICTIONS[0]][:2] == ("match", 1.0) and cold[PREDICTIONS[0]][4] == DEFAULT_LIMITS.search_databases
    assert cold[PREDICTIONS[1]][0] == "mismatch" and cold[PREDICTIONS[2]][0] == "mismatch"


@pytest.mark.parametrize("order_seed", [1, 2, 3])
def test_a_warm_store_gives_every_verdict_a_cold_one_gives_in_any_order(pets, cold, tmp_path, order_seed):
    task = _task(pets)  # another sample of the original: the same databases
    store = cache.Store(folder=str(tmp_path))
    order = random.Random(order_seed).sample(PREDICTIONS, len(PREDICTIONS))
    warm = {p: _verdict(task, pets, p, store) for p in order}
    assert warm == cold
    built = store.built
    again = {p: _verdict(task, pets, p, store) for p in reversed(order)}  # every database found built
    assert (again, store.built) == (cold, built)


def test_a_prediction_adding_nothing_builds_nothing_once_its_gold_was_searched(pets, tmp_path):
    task, store = _task(pets), cache.Store(folder=str(tmp_path))
    first = _verdict(task, pets, PREDICTIONS[0], store)
    built = store.built
    other = _verdict(task, pets, "SELECT T.name FROM Pet AS T WHERE T.species = 'dog' AND NOT T.weight <= 10", store)
    assert (first[0], other[0], other[4]) == ("match", "match", DEFAULT_LIMITS.search_databases)
    assert 0 < built == store.built and len(store.keys()) == 1


def _names(paths: list[str]) -> set[str]:
    out: set[str] = set()
    for path in paths:
        with sqlite3.connect(path) as conn:
            out |= {name for (name,) in conn.execute("SELECT name FROM Pet")}
    return out


def test_a_literal_only_the_prediction_has_is_tried_on_databases_of_its_own(pets, tmp_path):
    task, store = _task(pets), cache.Store(folder=str(tmp_path))
    outcome, _score, _detail, decided_on, _searched = _verdict(task, pets, PREDICTIONS[2], store)
    gold_set, own_set = store.keys()
    with store.lease(gold_set) as shared, store.lease(own_set) as mine:
        assert "Zorro" not in _names(shared.paths())  # the gold's databases cannot tell them apart
        assert "Zorro" in _names(mine.paths())
    shared_count = DEFAULT_LIMITS.search_databases - DEFAULT_LIMITS.search_databases // neighbour_search.OWN_SHARE
    number = int(decided_on.split()[2])
    assert (outcome, decided_on.endswith(" of pets_club")) == ("mismatch", True) and number > shared_count


def test_what_a_prediction_adds_is_the_same_whatever_its_wording(pets):
    task = _task(pets)
    gold = neighbour_search.focus(task, GOLD)
    one = neighbour_search.own(task, "SELECT name FROM Pet WHERE species = 'dog' AND weight > 10 AND weight <> 17 "
                                     "AND name <> 'Zorro'", gold)
    two = neighbour_search.own(task, "SELECT p.name FROM Pet p WHERE p.name != 'Zorro' AND p.weight != 17 AND "
                                     "p.weight > 10 AND p.species = 'dog'", gold)
    assert one == two == neighbour_search.Own((("name", ("Zorro",)), ("weight", (17,))), (), ())
    assert neighbour_search.own(task, PREDICTIONS[0], gold) is None


def test_the_store_keeps_at_most_its_sets_and_removes_the_files_of_the_others(pets, tmp_path):
    store = cache.Store(max_sets=2, folder=str(tmp_path))
    golds = [GOLD, "SELECT name FROM Pet WHERE species = 'cat'", "SELECT name FROM Pet WHERE weight < 5"]
    kept = {}
    for gold in golds:
        task = _task(pets, gold)
        _verdict(task, pets, gold.replace("SELECT", "SELECT ALL", 1), store, search_databases=3)
        key = store.keys()[-1]
        with store.lease(key) as found:
            kept[gold] = found.paths()
        assert len(store.keys()) <= 2
    files = {str(p) for p in tmp_path.iterdir()}
    assert not files & set(kept[golds[0]]) and files == set(kept[golds[1]]) | set(kept[golds[2]])


def test_a_set_in_use_is_never_removed_under_its_search(tmp_path):
    store = cache.Store(max_bytes=1, folder=str(tmp_path))  # every set is over the bound

    def build(i: int) -> cache.SearchDatabase:
        path = store.path(f"test {i}")
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE t(a)")
        conn.close()
        return cache.SearchDatabase(path, neighbour_search.gold_results.GoldResult(
            neighbour_search.verify_mod.sql_compare.bag_shape([]), 1), 0)

    with store.lease(("first",)) as first:
        made = first.database(1, build)
        with store.lease(("second",)) as second:
            second.database(0, build)
        assert os.path.isfile(made.path) and store.keys() == [("first",)]  # the second went when it was let go
    assert store.keys() == [] and list(tmp_path.iterdir()) == []


def test_forgetting_removes_every_file_and_the_next_search_builds_them_again(pets, tmp_path):
    task, store = _task(pets), cache.Store(folder=str(tmp_path))
    before = _verdict(task, pets, PREDICTIONS[3], store)
    assert list(tmp_path.iterdir())
    built = store.built
    store.forget()
    assert list(tmp_path.iterdir()) == [] and store.keys() == []
    assert _verdict(task, pets, PREDICTIONS[3], store) == before and store.built == 2 * built


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {tests!r})
from pathlib import Path
from bundle.search import cache as neighbour_search_cache
from test_neighbour_search_cache import _task, _verdict, PREDICTIONS
task = _task(Path({db!r}))
verdict = _verdict(task, Path({db!r}), PREDICTIONS[0], neighbour_search_cache.STORE)
folder = neighbour_search_cache.private_folder()
print(json.dumps([folder, len(list(Path(folder).iterdir())), verdict[0]]))
"""


def test_the_process_folder_is_removed_at_exit(pets):
    code = _CHILD.format(root=str(ROOT), tests=str(ROOT / "tests"), db=str(pets))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    folder, files, outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert (files > 0, outcome) == (True, "match") and not os.path.exists(folder)


def test_a_folder_the_search_cannot_write_in_is_an_infrastructure_error(pets, tmp_path):
    store = cache.Store(folder=str(tmp_path / "missing"))
    with pytest.raises(cache.SearchUnavailable, match="cannot write its databases"):
        _verdict(_task(pets), pets, PREDICTIONS[0], store)
    assert issubclass(cache.SearchUnavailable, ScoringInfrastructureError)  # unscored, never a 0.0


def _content_digest(task: neighbour_search.Task, path: Path, predictions: list[str], folder: Path,
                    monkeypatch) -> tuple[int, str]:
    """How many databases the searches of ``predictions`` draw, and a digest of every one's content
    (refused ones too) in the order they are drawn, each named by its seed's digest."""
    monkeypatch.setattr(cache, "remove", lambda path: None)  # keep every file drawn
    store = cache.Store(folder=str(folder))
    for p in predictions:
        _verdict(task, path, p, store)
    files = sorted(folder.glob("*.sqlite"), key=lambda f: int(f.name.split("-")[1]))
    digest = hashlib.sha256()
    for f in files:
        conn = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
        try:
            digest.update(f.name.split("-", 2)[2].encode() + "\n".join(conn.iterdump()).encode())
        finally:
            conn.close()
    return len(files), digest.hexdigest()


# The content of the search's databases for GOLD, a right answer and one adding a literal, as
# 59cd087 drew them (before the build was made faster). A verdict is a pure function of the
# databases a search uses: a change here changes verdicts, and must be made on purpose (and the
# labelled set judged again).
DRAWN_AT_59CD087 = (32, "3dddc522478a38e0f3ca2caebe7dda3669ae9aa35c65ab16bb7904bab83eba14")


def test_the_search_draws_the_databases_it_drew_before_it_was_made_faster(pets, tmp_path, monkeypatch):
    assert _content_digest(_task(pets), pets, [PREDICTIONS[0], PREDICTIONS[3]], tmp_path, monkeypatch) == \
        DRAWN_AT_59CD087


def test_a_long_query_s_tokens_are_never_kept():
    from bundle.neighbours import values as neighbour_values
    before = neighbour_values._code_kept.cache_info().currsize
    long = "SELECT name FROM Pet WHERE " + " OR ".join(f"weight = {i}" for i in range(400))
    assert len(long) > neighbour_values._KEPT_LENGTH
    assert neighbour_values.literals_by_column(long, {"weight", "name"})["weight"][:2] == [0, 1]
    assert neighbour_values._code_kept.cache_info().currsize == before
