"""The counterexample search (bundle/search/counterexample.py): it finds what the distilled neighbours miss,
never a right answer's fault, stays a pure function of its inputs, keeps to its budget, and runs where
the settings say (grader by default, reward when asked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours.source import read_original
from bundle.scoring import entry as scoring_entry
from bundle.search import counterexample as neighbour_search
from bundle.verify import verify

ROOT = Path(__file__).resolve().parent.parent
GOLD = "SELECT name FROM Pet WHERE species = 'dog' AND weight > 10"  # every dog of the original weighs more


def _task(path: Path, gold: str) -> neighbour_search.Task:
    conn = neighbour_invariants.open_read_only(str(path))
    try:
        return neighbour_search.Task("pets_club", "fixture", gold, neighbour_mining.mine(conn), read_original(conn))
    finally:
        conn.close()


def _searched(path: Path, prediction: str, **limits: object):
    lim = DEFAULT_LIMITS.replace(**limits)
    task = _task(path, GOLD)
    return verify(prediction, GOLD, str(path), is_sql=True, limits=lim,
                  search=lambda sql, known: neighbour_search.search(task, sql, known, lim))


@pytest.fixture(scope="module")
def pets(fixture_dbs) -> Path:
    return fixture_dbs["pets_club"]


def test_the_search_finds_what_the_original_cannot_see_and_names_the_database(pets):
    verdict = _searched(pets, "SELECT name FROM Pet WHERE species = 'dog'")
    assert (verdict.outcome, verdict.score, verdict.original_score) == ("mismatch", 0.0, 1.0)
    assert verdict.decided_on.startswith("search database ") and verdict.decided_on.endswith(" of pets_club")
    assert verdict.detail.startswith(f"on {verdict.decided_on}: ") and 1 <= verdict.searched <= DEFAULT_LIMITS.search_databases


RIGHT = [
    pytest.param("SELECT name FROM Pet WHERE weight > 10 AND species = 'dog'", id="conditions swapped"),
    pytest.param("SELECT T.name FROM Pet AS T WHERE T.species = 'dog' AND NOT T.weight <= 10", id="a negated bound"),
    pytest.param("SELECT name FROM Pet WHERE species IN ('dog') AND weight > 10 ORDER BY name", id="IN and an order"),
]


@pytest.mark.parametrize("prediction", RIGHT)
def test_a_right_answer_survives_the_whole_search(pets, prediction):
    verdict = _searched(pets, prediction)
    assert (verdict.outcome, verdict.decided_on, verdict.searched) == ("match", "test suite", DEFAULT_LIMITS.search_databases)


def test_the_gold_itself_is_not_searched(pets):
    verdict = _searched(pets, "SELECT  name FROM Pet WHERE species = 'dog' AND weight > 10 ;")
    assert (verdict.outcome, verdict.searched) == ("match", 0)


HEAVY_WRONG = ("SELECT name FROM Pet WHERE species = 'dog' AND "
               "(SELECT count(*) FROM Pet AS a, Pet AS b, Pet AS c, Pet AS d) > 0")  # wrong, and it works hard


def test_the_search_keeps_to_its_databases_and_steps(pets):
    assert _searched(pets, RIGHT[0].values[0], search_databases=2).searched == 2
    assert _searched(pets, HEAVY_WRONG).outcome == "mismatch"
    starved = _searched(pets, HEAVY_WRONG, search_steps=1)  # steps are counted in units of progress_steps
    assert (starved.outcome, starved.score, starved.decided_on) == ("match", 1.0, "test suite")  # the match stands
    assert starved.searched < DEFAULT_LIMITS.search_databases


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {tests!r})
from test_neighbour_search import _searched
from pathlib import Path
v = _searched(Path({db!r}), {sql!r})
print(json.dumps([v.outcome, v.detail, v.decided_on, v.searched]))
"""


def test_the_verdict_is_a_pure_function_whatever_the_process_and_hash_seed(pets):
    sql = "SELECT name FROM Pet WHERE species = 'dog'"
    here = _searched(pets, sql)
    code = _CHILD.format(root=str(ROOT), tests=str(ROOT / "tests"), db=str(pets), sql=sql)
    seen = []
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        seen.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert seen[0] == seen[1] == [here.outcome, here.detail, here.decided_on, here.searched]


# --- where it runs: the settings ----------------------------------------------------------------------

def _call(root: Path, caller: str, search: str | None = None, difference: str = "off") -> int:
    """The databases searched for a right answer (``difference``: the search aimed at the difference,
    off unless asked, so that ``searched`` counts the counterexample search's databases alone)."""
    limits = scoring_entry.current_limits().replace(difference=difference)
    limits = limits.replace(search=search) if search else limits
    call = scoring_entry.read_call({"output": "SELECT count(owner_id) FROM Owner",  # right: it searches everything
                                    "expected": "SELECT count(*) FROM Owner"})
    return scoring_entry.score_call(call, limits, root=str(root), caller=caller).searched


SETTINGS = [
    pytest.param("grader", None, True, id="the grader searches by default"),
    pytest.param("reward", None, False, id="the reward does not by default"),
    pytest.param("reward", "always", True, id="the reward searches when asked"),
    pytest.param("grader", "off", False, id="nobody searches when it is off"),
]


@pytest.mark.parametrize("caller, setting, searches", SETTINGS)
def test_the_setting_says_who_searches(neighbour_bundle, caller, setting, searches):
    assert (_call(neighbour_bundle, caller, setting) > 0) is searches


DIFFERENCE_SETTINGS = [
    pytest.param("reward", "always", True, id="the search aimed at the difference runs for the reward by default"),
    pytest.param("grader", "always", True, id="and for the grader"),
    pytest.param("reward", "grader", False, id="not for the reward when it is the grader's only"),
    pytest.param("grader", "off", False, id="for nobody when it is off"),
]


@pytest.mark.parametrize("caller, setting, searches", DIFFERENCE_SETTINGS)
def test_the_difference_setting_says_who_searches_edits(neighbour_bundle, caller, setting, searches):
    assert scoring_entry.current_limits().difference == "always"  # the default
    assert (_call(neighbour_bundle, caller, "off", difference=setting) > 0) is searches
