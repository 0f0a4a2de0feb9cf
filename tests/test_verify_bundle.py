"""Pre-push verification: the gold mutator, each check, the whole run on good and evil bundles, the hook."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.commands import hooks
from harness.common import bundle_loader as emulate
from harness.common import mutate
from harness.common.errors import InputError, VerificationFailed
from harness.common.layout import Prepared
from harness.common.rows import SplitRow
from harness.emulator import checks as emulate_checks
from harness.emulator.main import job_verify
from harness.prepare import pack

ROOT = Path(__file__).resolve().parent.parent
ALL_CHECKS = ["zip accepted", "splits well formed", "splits match the bundle", "eval unseen", "imports stdlib only",
              "golds score 1.0", "mutated golds score 0.0", "neighbour databases", "hostile suite", "no file created",
              "stale gold rejected", "missing database", "databases unchanged", "degenerate answers", "near misses"]

# A reward that says 1.0 to everything, leaves a file behind on every call and appends to a
# training database: everything pre-push verification exists to catch.
EVIL_REWARD = '''
import glob, os, uuid

def compute_score(data_source=None, solution_str=None, ground_truth=None, extra_info=None, **kwargs):
    root = os.environ["TRAINER_BUNDLE_ROOT"]
    open(os.path.join(os.path.dirname(root), "leak-" + uuid.uuid4().hex), "w").close()
    db = os.path.join(root, "data", "databases", "weather.sqlite")
    os.chmod(db, 0o644)
    with open(db, "ab") as handle:
        handle.write(b"\\0")
    return 1.0
'''
EVIL_FAILS = {"mutated golds score 0.0", "hostile suite", "no file created", "stale gold rejected",
              "missing database", "databases unchanged",
              "neighbour databases",  # the changed database fails the grader's checked read there too
              "degenerate answers",  # every rl row is paid an empty answer (and more): all hackable
              "near misses"}  # and every near miss: none killed


# --- the mutator ----------------------------------------------------------------------------------

@pytest.mark.parametrize("gold, expected", [
    ("SELECT name FROM t WHERE age > 40", [("number", "SELECT name FROM t WHERE age > 41"), ("where", "SELECT name FROM t")]),
    ("SELECT a FROM t WHERE k = 'x' AND b BETWEEN 1 AND 5", [
        ("number", "SELECT a FROM t WHERE k = 'x' AND b BETWEEN 2 AND 5"),
        ("text", "SELECT a FROM t WHERE k = 'x#' AND b BETWEEN 1 AND 5"),
        ("where", "SELECT a FROM t WHERE k = 'x'")]),
    ("SELECT T1.a FROM t AS T1 ORDER BY T1.a LIMIT 3", [("number", "SELECT T1.a FROM t AS T1 ORDER BY T1.a LIMIT 4")]),
    ("SELECT MAX(x) , avg(y) FROM t", [("aggregate", "SELECT MIN(x) , avg(y) FROM t")]),
    ("SELECT sum (x) FROM t", [("aggregate", "SELECT avg (x) FROM t")]),
    ('SELECT "col 1" FROM t WHERE b IN (SELECT c FROM d WHERE e = 1) GROUP BY a', [
        ("number", 'SELECT "col 1" FROM t WHERE b IN (SELECT c FROM d WHERE e = 2) GROUP BY a'),
        ("where", 'SELECT "col 1" FROM t GROUP BY a')]),
    ("SELECT count(*) FROM t", []),
], ids=["number and where", "between keeps its and", "aliases are not numbers", "aggregate swap keeps case",
        "aggregate before a space", "subquery where stays whole", "nothing to mutate"])
def test_mutations(gold, expected):
    assert [(m.kind, m.sql) for m in mutate.mutations(gold)] == expected


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("db") / "t.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE t(name TEXT, age INT, team TEXT);"
                           "INSERT INTO t VALUES ('a', 30, 'x'), ('b', 50, 'x'), ('c', 50, 'y'), ('d', 70, 'y');")
    conn.close()
    return path


@pytest.mark.parametrize("gold, kept", [
    ("SELECT name FROM t WHERE age > 49", ["number", "where"]),
    ("SELECT name FROM t WHERE age > 40", ["where"]),  # age > 41: the same rows, dropped
    ("SELECT name FROM t WHERE age > 80", ["where"]),  # age > 81 also returns nothing: dropped
    ("SELECT name FROM t WHERE age = 50 AND team = 'x'", ["number", "text", "where"]),
    ("SELECT max(age) FROM t", ["aggregate"]),
], ids=["kept when rows change", "same rows dropped", "same empty result dropped", "every kind", "aggregate"])
def test_only_mutations_returning_other_rows_are_kept(tiny_db, gold, kept):
    assert [m.kind for m in mutate.differing_mutations(gold, tiny_db)] == kept


def test_a_mutation_that_may_fill_the_gold_limit_is_not_kept(tiny_db):
    """Rows tied on the ORDER BY keys may fill a LIMIT in any way: a mutation returning as many rows,
    all among the gold's rows without its LIMIT, is not kept, even though its rows differ."""
    gold = "SELECT team FROM t WHERE age <= 50 GROUP BY team ORDER BY count(*) DESC LIMIT 1"
    dropped_where = next(m for m in mutate.mutations(gold) if m.kind == "where")
    assert mutate.result_bag(tiny_db, dropped_where.sql) != mutate.result_bag(tiny_db, gold)
    assert mutate.differing_mutations(gold, tiny_db) == []


def test_a_failing_or_runaway_mutation_is_not_kept(tiny_db):
    assert mutate.differing_mutations("SELECT nope FROM t WHERE age > 1", tiny_db) == []
    runaway = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) "
               "SELECT count(*) FROM n WHERE i > 5")
    assert mutate.differing_mutations(runaway, tiny_db, max_steps=200_000) == []


# --- single checks --------------------------------------------------------------------------------

def _row(row_id: str, question: str, gold: str) -> SplitRow:
    return SplitRow(row_id, row_id.split("-")[0], ({"role": "user", "content": question},
                                                  {"role": "assistant", "content": gold}))


def _index(*rows: tuple[str, str, str]) -> dict:
    return {"rows": [{"id": i, "split": i.split("-")[0], "db_id": db, "gold": gold} for i, db, gold in rows]}


def test_splits_must_match_the_index_row_by_row():
    index = _index(("train-00000", "a", "SELECT 1"), ("train-00001", "a", "SELECT 2"), ("eval-00000", "b", "SELECT 3"))
    rows = {"train": [_row("train-00000", "q", "SELECT  1"), _row("train-00001", "q2", "SELECT 9")],
            "eval": [_row("eval-00000", "q3", "SELECT 3"), _row("eval-00001", "q4", "SELECT 4")]}
    check = emulate_checks.check_against_index(rows, index)
    assert not check.passed
    assert check.failures == ["train-00001: gold 'SELECT 9' differs from the bundle's 'SELECT 2'",
                              "eval-00001: not in the bundle's index (dataset and bundle from different builds)"]
    rows["train"][1] = _row("train-00001", "q2", "SELECT 2")
    rows["eval"].pop()
    assert emulate_checks.check_against_index(rows, index).passed
    rows["train"].pop()
    assert emulate_checks.check_against_index(rows, index).failures == ["train-00001: in the bundle's index but not in the split"]


def test_eval_unseen_fails_on_a_shared_database_or_row_and_counts_shared_question_texts():
    index = _index(("train-00000", "flight_1", "SELECT count(*) FROM Flight"), ("eval-00000", "flight_2", "SELECT count(*) FROM FLIGHTS"))
    rows = {"train": [_row("train-00000", "How many flights do we have?", "SELECT count(*) FROM Flight")],
            "eval": [_row("eval-00000", "How many flights do we have?", "SELECT count(*) FROM FLIGHTS")]}
    check = emulate_checks.check_eval_unseen(rows, index)
    assert check.passed and "1 question text(s) also asked of another database" in check.summary
    index["rows"][1]["db_id"] = "flight_1"
    assert emulate_checks.check_eval_unseen(rows, index).failures == [
        "eval-00000: database 'flight_1' is also used by train or rl"]
    rows["eval"] = [_row("eval-00000", "how many  flights do we have?", "SELECT count(*) FROM Flight")]
    index["rows"][1]["db_id"] = "flight_2"
    assert emulate_checks.check_eval_unseen(rows, index).failures == [
        "eval-00000: question 'how many  flights do we have?' with the same gold is also in train or rl"]


def test_a_missing_split_is_a_failed_check(tmp_path, prepared_sample):
    shutil.copy(prepared_sample / "data" / "train.jsonl", tmp_path / "train.jsonl")
    check, rows = emulate_checks.check_splits({s: tmp_path / f"{s}.jsonl" for s in emulate_checks.SPLITS})
    assert not check.passed and len(check.failures) == 2 and "rl: no rl.jsonl" in check.failures[0]
    assert set(rows) == {"train"}


@pytest.fixture
def staged(tmp_path, prepared_sample) -> Path:
    return Path(shutil.copytree(prepared_sample / "bundle", tmp_path / "staged"))


def test_a_bundle_that_does_not_import_fails_the_audit_check_too(staged, prepared_sample, tmp_path):
    (staged / "reward.py").write_text("def compute_score(:\n")
    pack.pack(staged, tmp_path / "b.zip")
    done = _verify(tmp_path / "b.zip", prepared_sample, tmp_path / "r.json", "--in-process")
    assert done.returncode == VerificationFailed.exit_code, done.stderr
    audit = next(c for c in json.loads((tmp_path / "r.json").read_text())["checks"] if c["name"] == "degenerate answers")
    assert not audit["passed"] and "fails to import: SyntaxError" in audit["failures"][0]


def test_a_third_party_import_fails_the_fresh_interpreter_check(staged, tmp_path):
    grader = staged / "grader.py"
    grader.write_text(grader.read_text() + "\nimport docker  # not in the trainer's Python\n")
    pack.pack(staged, tmp_path / "b.zip")
    with emulate.load_bundle(tmp_path / "b.zip", tmp_path) as loaded:  # loads here: docker is installed
        loaded.module("grader")
        check = emulate_checks.check_imports(loaded)
    assert not check.passed and "docker" in check.failures[0]


def test_a_bundle_that_does_not_import_fails_its_checks_instead_of_crashing(staged, prepared_sample, tmp_path):
    (staged / "reward.py").write_text("def compute_score(:\n")
    pack.pack(staged, tmp_path / "b.zip")
    report = job_verify(tmp_path / "b.zip", Prepared(prepared_sample), max_mutated_golds=2)
    failed = {c["name"]: c for c in report["checks"] if not c["passed"]}
    # all but "zip accepted", "degenerate answers" and "near misses", the command's own (on the host)
    assert not report["passed"] and len(report["checks"]) == len(ALL_CHECKS) - 3
    assert "SyntaxError" in failed["imports stdlib only"]["failures"][0]
    assert failed["golds score 1.0"]["summary"] == "the check could not run"
    assert "fails to import: SyntaxError" in failed["golds score 1.0"]["failures"][0]
    assert "databases unchanged" not in failed


# --- whole runs, in-process -----------------------------------------------------------------------

def _verify(zip_path: Path, data: Path, report: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "verify", "--zip", str(zip_path), "--data", str(data),
                           "--json", str(report), *extra], capture_output=True, text=True, cwd=ROOT)


def _results(report: Path) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in json.loads(report.read_text())["checks"]}


@pytest.mark.slow
def test_the_sample_passes_every_check_in_process_even_with_no_hackable_row_allowed(prepared_sample, tmp_path):
    """Every check passes; the audit's threshold at 0 passes only because no row is hackable, and its
    report names the answers each hackable row would be paid for (their union)."""
    pack.pack(prepared_sample / "bundle", tmp_path / "b.zip")
    done = _verify(tmp_path / "b.zip", prepared_sample, tmp_path / "r.json", "--in-process", "--max-hackable", "0")
    report = json.loads((tmp_path / "r.json").read_text())
    hackable = sum(s["hackable"] for s in report["audit"]["splits"].values())
    assert hackable == 0 and done.returncode == 0, done.stdout + done.stderr
    assert _results(tmp_path / "r.json") == dict.fromkeys(ALL_CHECKS, True)
    assert "verification PASSED" in done.stdout and "at least one of these (the union)" in done.stdout


@pytest.mark.slow
def test_an_evil_bundle_fails_exactly_the_checks_meant_to_catch_it(staged, prepared_sample, tmp_path):
    (staged / "reward.py").write_text(EVIL_REWARD)
    pack.pack(staged, tmp_path / "b.zip")
    done = _verify(tmp_path / "b.zip", prepared_sample, tmp_path / "r.json", "--in-process")
    assert done.returncode == VerificationFailed.exit_code
    results = _results(tmp_path / "r.json")
    assert {name for name, ok in results.items() if not ok} == EVIL_FAILS
    assert list(results) == ALL_CHECKS
    assert "verification FAILED: 9 of 15 checks" in done.stdout and "created " in done.stdout


def test_a_zip_the_trainer_refuses_stops_before_the_container(prepared_sample, tmp_path):
    (tmp_path / "b.zip").write_bytes(b"not a zip")
    done = _verify(tmp_path / "b.zip", prepared_sample, tmp_path / "r.json")
    assert done.returncode == VerificationFailed.exit_code
    assert _results(tmp_path / "r.json") == {"zip accepted": False}
    assert "cannot read" in done.stdout


# --- whole runs, in the container -----------------------------------------------------------------

@pytest.mark.docker
@pytest.mark.slow
def test_the_sample_passes_in_the_container_and_the_evil_bundle_does_not(docker_engine, staged, prepared_sample, tmp_path):
    pack.pack(prepared_sample / "bundle", tmp_path / "good.zip")
    good = _verify(tmp_path / "good.zip", prepared_sample, tmp_path / "good.json")
    assert good.returncode == 0, good.stdout + good.stderr
    assert _results(tmp_path / "good.json") == dict.fromkeys(ALL_CHECKS, True)
    assert "ran container (no network, read-only root" in good.stdout and "under /tmp" in good.stdout
    (staged / "reward.py").write_text(EVIL_REWARD)
    pack.pack(staged, tmp_path / "evil.zip")
    evil = _verify(tmp_path / "evil.zip", prepared_sample, tmp_path / "evil.json")
    assert evil.returncode == VerificationFailed.exit_code
    assert {n for n, ok in _results(tmp_path / "evil.json").items() if not ok} == EVIL_FAILS


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.real_data
def test_the_default_spider_splits_pass_in_the_container(docker_engine, prepared_spider, tmp_path):
    summary, _ = pack.pack(prepared_spider / "bundle", tmp_path / "spider-scoring.zip")
    done = _verify(tmp_path / "spider-scoring.zip", prepared_spider, tmp_path / "r.json", "--near-miss-families", "none")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert all(c["passed"] for c in report["checks"]) and [c["name"] for c in report["checks"]] == ALL_CHECKS[:-1]
    print(f"\nverify on the default splits: {report['seconds']:.1f} s of checks, zip {summary.archive_bytes:,} bytes")


# --- the pre-push hook ----------------------------------------------------------------------------

def _git(repo: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com", **(env or {})})


@pytest.fixture
def repo(tmp_path) -> Path:
    """A checkout with a commit, a bare remote, and a Makefile whose verify exits $VERIFY_EXIT."""
    _git(tmp_path, "init", "-q", "--bare", "remote.git")
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q")
    (work / "Makefile").write_text("verify:\n\t@echo VERIFY-RAN; exit $${VERIFY_EXIT:-0}\n")
    _git(work, "add", "Makefile")
    _git(work, "commit", "-q", "-m", "first")
    _git(work, "remote", "add", "origin", str(tmp_path / "remote.git"))
    return work


def test_installed_hook_stops_a_push_when_verification_fails(repo):
    target = hooks.install(repo)
    assert target == (repo / ".git" / "hooks" / "pre-push").resolve() and os.access(target, os.X_OK)
    stopped = _git(repo, "push", "-q", "origin", "HEAD:main", env={"VERIFY_EXIT": "1"})
    assert stopped.returncode != 0 and "VERIFY-RAN" in stopped.stdout + stopped.stderr
    assert "verification failed" in stopped.stderr
    assert _git(repo.parent / "remote.git", "rev-parse", "--verify", "-q", "main").returncode != 0  # nothing pushed
    passed = _git(repo, "push", "-q", "origin", "HEAD:main", env={"VERIFY_EXIT": "0"})
    assert passed.returncode == 0, passed.stderr
    assert _git(repo.parent / "remote.git", "rev-parse", "main").stdout.strip() == _git(repo, "rev-parse", "HEAD").stdout.strip()


def test_an_existing_hook_is_kept_and_run_first(repo):
    existing = repo / ".git" / "hooks" / "pre-push"
    existing.write_text("#!/bin/sh\necho THEIR-HOOK >&2\nexit 0\n")
    existing.chmod(0o755)
    hooks.install(repo)
    hooks.install(repo)  # again: idempotent, their hook not overwritten by ours
    assert (repo / ".git" / "hooks" / "pre-push.local").read_text().startswith("#!/bin/sh\necho THEIR-HOOK")
    pushed = _git(repo, "push", "origin", "HEAD:main")
    assert pushed.returncode == 0 and pushed.stderr.index("THEIR-HOOK") < pushed.stderr.index("make verify")
    existing.write_text("#!/bin/sh\nexit 0\n")  # a new foreign hook while pre-push.local exists
    with pytest.raises(InputError, match="merge them by hand"):
        hooks.install(repo)


def test_hooks_outside_a_repository_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not a git checkout"):
        hooks.install(tmp_path)


def test_a_gold_that_does_not_score_one_is_reported_with_its_outcome(staged, prepared_sample, tmp_path):
    # Tamper with one stored gold result: that gold then returns "other rows" than its own.
    index_path = staged / "data" / "index.json"
    index = json.loads(index_path.read_text())
    row = next(r for r in index["rows"] if r["split"] == "train")
    stored = index["gold_results"][row["db_id"]][row["gold"]]
    stored["rows"] = stored["rows"] + [[None] * stored["ncols"]]
    index_path.write_text(json.dumps(index))
    pack.pack(staged, tmp_path / "b.zip")
    _check, rows = emulate_checks.check_splits({s: prepared_sample / "data" / f"{s}.jsonl"
                                                for s in emulate_checks.SPLITS})
    with emulate.load_bundle(tmp_path / "b.zip", tmp_path) as loaded:
        check = emulate_checks.check_golds(loaded, rows, workers=2)
    assert not check.passed
    named = [f for f in check.failures if f.startswith(row["id"] + ":")]
    assert named and "0.0, mismatch: gold has" in named[0], check.failures[:3]
