"""The sandbox: the hostile suite (fixtures/hostile/cases.json) and the guarantees around it.

The suite runs once, in a process of its own with a private TMPDIR, HOME and working directory
(tests/hostile_runner.py); each case then asserts its score and outcome (decided by counted work),
the generous CPU guard, byte-identical databases, no file created in any watched folder and no
stray file held open.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.sql import functions as sql_functions
from bundle.sql import guard as sql_guard
from bundle.verify import verify
from harness.emulator import hostile

HERE = Path(__file__).resolve().parent
CASE_IDS = [c.id for c in hostile.load_cases("t", "/scratch")]


def _run_suite(sample_bundle, tmp_path_factory, *mode: str) -> dict:
    work = tmp_path_factory.mktemp("hostile")
    for name in ("tmp", "home", "cwd", "scratch"):
        (work / name).mkdir()
    out = work / "report.json"
    env = dict(os.environ, TMPDIR=str(work / "tmp"), SQLITE_TMPDIR=str(work / "tmp"), HOME=str(work / "home"),
               TRAINER_BUNDLE_ROOT=str(sample_bundle), PYTHONDONTWRITEBYTECODE="1")
    subprocess.run([sys.executable, str(HERE / "hostile_runner.py"), str(sample_bundle), str(work / "scratch"),
                    str(out), *mode], env=env, cwd=work / "cwd", check=True, timeout=3600)  # a guard against a hang only
    report = json.loads(out.read_text())
    return {case["id"]: case for case in report["cases"]} | {"_max_rss_mb": report["max_rss_mb"]}


@pytest.fixture(scope="module")
def suite_report(sample_bundle, tmp_path_factory):
    return _run_suite(sample_bundle, tmp_path_factory)


@pytest.fixture(scope="module")
def explore_report(sample_bundle, tmp_path_factory):
    """The suite through the multi-turn environment's exploration tool (bundle/scoring/episode.py)."""
    return _run_suite(sample_bundle, tmp_path_factory, "explore")


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_hostile_case(suite_report, case_id):
    case = suite_report[case_id]
    assert case["score"] == 0.0, case
    assert case["outcome"] in case["allowed_outcomes"], case
    assert case["cpu_seconds"] <= case["guard_cpu_seconds"], case  # a guard only: the outcome decides
    assert case["changed_databases"] == [], case
    assert case["new_files"] == [], case
    assert case["opened_files"] == [], case


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_hostile_case_through_the_exploration_tool(explore_report, case_id):
    """What the tool shows is what the verdict would be, or over the tool's smaller budget; every call
    within its budget and its text's cap, nothing written, nothing but the database opened."""
    case = explore_report[case_id]
    allowed = {*case["allowed_outcomes"], "prediction_over_budget"}  # the tool's budget is a quarter of a prediction's
    not_read = {"no_query", "prediction_over_cap"}  # a text too long to read, whether a completion or a query
    assert case["outcome"] in (allowed | not_read if allowed & not_read else allowed), case
    assert case["steps"] <= DEFAULT_LIMITS.explore_steps, case
    assert case["shown_chars"] <= DEFAULT_LIMITS.explore_chars + 200, case  # the text and the budget's line
    assert case["cpu_seconds"] <= case["guard_cpu_seconds"], case
    assert case["changed_databases"] == [] and case["new_files"] == [] and case["opened_files"] == [], case


@pytest.mark.slow
def test_the_exploration_tool_s_memory_stays_bounded(explore_report):
    assert explore_report["_max_rss_mb"] < 512


@pytest.mark.slow
def test_suite_memory_stays_bounded(suite_report):
    # The whole suite, runaway sorts and 500 MB blobs included, in one process.
    peaks = [(case_id, case["max_rss_mb"]) for case_id, case in suite_report.items() if case_id != "_max_rss_mb"]
    rises = sorted(((after - before, case_id) for (_, before), (case_id, after) in zip([("", 0.0)] + peaks, peaks)),
                   reverse=True)
    assert suite_report["_max_rss_mb"] < 512, f"cases that raised the peak RSS most (MB): {rises[:6]}"


def test_every_prior_art_category_is_covered():
    categories = {c.category for c in hostile.load_cases("t", "/s")}
    assert {"side effects", "time", "resources", "comparison", "extraction", "hidden work", "preparation",
            "determinism"} <= categories


@pytest.fixture
def pets_db(fixture_dbs):
    yield str(fixture_dbs["pets_club"])
    sql_guard.forget_connections()


RUNAWAY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


def test_the_step_budget_stops_a_runaway_and_frees_the_cpu(pets_db):
    limits = DEFAULT_LIMITS.replace(budget_floor_steps=300_000)
    verdict = verify(RUNAWAY, "SELECT 1", pets_db, limits=limits, is_sql=True)
    assert (verdict.outcome, verdict.score) == ("prediction_over_budget", 0.0)
    # Stopped at the first report past the budget: exactly one reporting unit over it.
    assert verdict.budget_steps == 300_000 and 300_000 < verdict.steps <= 300_000 + 2 * limits.progress_steps
    cpu_before = time.process_time()
    time.sleep(0.3)
    assert time.process_time() - cpu_before < 0.05  # nothing keeps running after the call returned


def test_over_budget_is_exact_at_the_boundary_however_often_a_statement_ran(pets_db):
    # SQLite counts a reused statement's steps from where its last run stopped; the verdict must not
    # change with that. A budget of exactly the steps a query takes is enough, one unit less is not.
    query = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 4321) SELECT count(*) FROM r"
    unit = DEFAULT_LIMITS.progress_steps
    steps = sql_guard.run_query(pets_db, query, DEFAULT_LIMITS, budget_steps=10**9, wall_s=60, fresh=True).steps
    charged = sql_functions.compile_charge(query, DEFAULT_LIMITS.charge_base_steps) + sql_functions.CELL_STEPS  # one cell
    assert (steps - charged) % unit == 0 and steps > 2 * unit
    outcomes: dict[str, set] = {"enough": set(), "short": set()}
    for i in range(40):  # every finished run moves the reused statement's count to another phase
        name, budget = ("short", steps - unit) if i % 7 == 6 else ("enough", steps)
        try:
            sql_guard.run_query(pets_db, query, DEFAULT_LIMITS, budget_steps=budget, wall_s=60)
            outcomes[name].add("within")
        except sql_guard.QueryFailed as failed:
            outcomes[name].add(failed.kind)
    assert outcomes == {"enough": {"within"}, "short": {sql_guard.OVER_BUDGET}}


def test_the_wall_clock_guard_is_unscored_never_zero(pets_db):
    # A budget no machine reaches in a millisecond, and a 1 ms guard: the guard fires first.
    limits = DEFAULT_LIMITS.replace(budget_floor_steps=10**12, wall_guard_s=0.001)
    verdict = verify(RUNAWAY, "SELECT 1", pets_db, limits=limits, is_sql=True)
    assert (verdict.outcome, verdict.score) == ("infrastructure_timeout", None)
    assert "wall-clock guard" in verdict.detail and verdict.steps < 10**12


def test_the_budget_grows_with_the_gold(pets_db):
    # A gold that takes more steps than the floor gets a budget a multiple of its own steps.
    gold = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 50000) SELECT count(*) FROM r"
    limits = DEFAULT_LIMITS.replace(budget_floor_steps=1000, budget_gold_multiple=3)
    verdict = verify(gold, gold, pets_db, limits=limits, is_sql=True)
    assert verdict.outcome == "match" and verdict.gold_steps == verdict.steps > 1000
    assert verdict.budget_steps == 3 * verdict.gold_steps


def test_database_opened_read_only_even_without_the_authorizer(pets_db, tmp_path):
    conn = sqlite3_connect_guarded_without_authorizer(pets_db)
    with pytest.raises(Exception) as failed:
        conn.execute("DELETE FROM Owner")
    assert "readonly" in str(failed.value).lower() or "read-only" in str(failed.value).lower()


def sqlite3_connect_guarded_without_authorizer(path):
    import sqlite3
    return sqlite3.connect(sql_guard.database_uri(path), uri=True)


SCHEMA_TRAPS = """
CREATE TABLE t(a INTEGER, b TEXT);
INSERT INTO t VALUES (1, 'x'), (2, 'y');
CREATE VIEW clocked AS SELECT a, date('now') AS d FROM t;
CREATE VIEW loader AS SELECT a, load_extension('nothing') AS l FROM t;
CREATE VIEW charged AS SELECT a, upper(b) AS u FROM t;
CREATE TRIGGER noisy AFTER INSERT ON t BEGIN SELECT load_extension('nothing'); END;
"""


@pytest.mark.parametrize("sql, outcome", [
    pytest.param("SELECT * FROM clocked", "forbidden", id="a view reading the clock"),
    pytest.param("SELECT * FROM loader", "forbidden", id="a view loading an extension"),
    pytest.param("SELECT * FROM charged", "forbidden", id="a view calling a function the file may not: trusted_schema off"),
    pytest.param("SELECT a FROM t", "match", id="the table itself reads as usual"),
])
def test_a_database_file_can_call_nothing_through_its_schema(tmp_path, sql, outcome):
    """Defense in depth (issue 38, item 5): every connection trusts nothing the file's schema holds
    (``trusted_schema=OFF``; SQLite's DEFENSIVE flag where Python can set it), beside the authorizer."""
    import sqlite3
    path = tmp_path / "traps.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_TRAPS)
    conn.close()
    gold = "SELECT a FROM t" if outcome == "match" else "SELECT 1, 2"
    verdict = verify(sql, gold, str(path), is_sql=True)
    assert verdict.outcome == outcome, verdict.detail
    guarded = sql_guard.open_guarded(str(path), DEFAULT_LIMITS).conn
    try:
        guarded.set_authorizer(None) if sys.version_info >= (3, 11) else None
        assert guarded.execute("PRAGMA trusted_schema").fetchone() == (0,)
    finally:
        guarded.close()


def test_missing_database_is_infrastructure(tmp_path):
    verdict = verify("SELECT 1", "SELECT 1", str(tmp_path / "absent.sqlite"))
    assert verdict.outcome == "infrastructure_error" and verdict.score is None


def test_corrupt_database_is_infrastructure(tmp_path):
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    verdict = verify("SELECT 1", "SELECT 1", str(path))
    assert verdict.outcome == "infrastructure_error" and verdict.score is None


def test_gold_failure_is_never_a_score(pets_db):
    verdict = verify("SELECT 1", "SELECT nope FROM nowhere", pets_db)
    assert verdict.outcome == "gold_error" and verdict.score is None


def test_many_threads_get_the_same_verdicts(pets_db):
    limits = DEFAULT_LIMITS.replace(budget_floor_steps=2_000_000)
    gold = "SELECT name FROM Pet WHERE species = 'dog'"
    completions = [
        "SELECT name FROM Pet WHERE species = 'dog'",
        "SELECT name FROM Pet WHERE species = 'cat'",
        "SELECT name FROM Pet WHERE species = 'dog' ORDER BY weight",
        "DELETE FROM Pet",
        "SELECT nope FROM Pet",
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
        "SELECT length(zeroblob(900000000))",
    ]
    expected = [verify(c, gold, pets_db, limits=limits).outcome for c in completions]
    assert expected == ["match", "mismatch", "match", "forbidden", "prediction_error", "prediction_over_budget",
                        "prediction_over_cap"]
    got: list[list[str]] = [[] for _ in range(16)]

    def work(slot: int) -> None:
        for i in range(len(completions) * 2):
            k = (i + slot) % len(completions)
            got[slot].append((k, verify(completions[k], gold, pets_db, limits=limits).outcome))
        sql_guard.forget_connections()

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(not t.is_alive() for t in threads)
    assert all(outcome == expected[k] for slot in got for k, outcome in slot)
    assert sum(len(slot) for slot in got) == 16 * len(completions) * 2


def test_the_threads_page_caches_stay_within_one_process_wide_bound(fixture_dbs, tmp_path, monkeypatch):
    # Eight threads, each opening every database: together they may keep at most the process-wide
    # bound (plus the one connection a thread always keeps), and a thread that ends gives its share
    # back. Eight audit threads once kept more than SQLite's heap ceiling open between them.
    from bundle.sql import connection as sql_connection
    paths = []
    for i in range(24):  # copies: a connection per file
        path = tmp_path / f"copy{i}.sqlite"
        path.write_bytes(Path(fixture_dbs["pets_club"]).read_bytes())
        paths.append(str(path))
    weight = os.path.getsize(paths[0]) + sql_connection._CONNECTION_BYTES
    monkeypatch.setattr(sql_connection, "_MAX_CACHE_BYTES", 10 * weight)
    start = sql_connection.cached_bytes()
    peaks: list[int] = []
    ready, done = threading.Barrier(8), threading.Event()

    def work() -> None:
        for path in paths:
            assert verify("SELECT count(*) FROM Pet", "SELECT count(*) FROM Pet", path).outcome == "match"
            peaks.append(sql_connection.cached_bytes() - start)
        ready.wait(60)
        done.wait(60)  # hold the connections while the others count

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    while len(peaks) < 8 * len(paths) and all(t.is_alive() for t in threads):
        time.sleep(0.05)
    held = sql_connection.cached_bytes() - start
    done.set()
    for t in threads:
        t.join(60)
    assert max(peaks) <= 10 * weight + 8 * weight and held <= 10 * weight + 8 * weight, (max(peaks), held, weight)
    assert held >= 8 * weight  # each thread keeps its last connection open
    assert sql_connection.cached_bytes() == start  # the ended threads gave their shares back
