"""What a newcomer met on fresh clones with real Spider data (issue 27), each with the behaviour or the
message the README promises: a port in use for `serve`; `test-grader` and `check-cpu` on a real
bundle; the stale-gold check's own warnings on a passing `verify`; `make -n bundle` after a change;
`audit` printing its rows. (Spider's own files for `prepare`: tests/test_prepare_offline.py; OpenRLHF
and an unscored row: tests/test_service_openrlhf.py.)"""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, SPIDER_PREPARE_ARGS
from harness.audit import catalogue, report
from harness.cli import main
from harness.commands import emulate
from harness.common import ports
from harness.common.bundle_loader import load_bundle
from harness.common.errors import CHECKS_FAILED, UNEXPECTED, InputError, PortUnavailable
from harness.common.results import RowResult
from harness.common.rows import read_split
from harness.emulator import checks
from harness.emulator.calls import call_score
from test_docs import made, scratch_make

SAMPLE_COMPLETIONS = ROOT / "fixtures" / "sample" / "completions-eval.jsonl"
AUDIT_FIGURES = ROOT / "docs" / "figures" / "audit-after.json"  # an audit of real Spider (docs/audit.md)


# -- serve on a port already in use -------------------------------------------------------------------
@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other program listens on, on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


@pytest.mark.parametrize("mode", [["--local"], [], ["--public"]], ids=["serve --local", "serve (docker)", "serve --public"])
def test_serve_on_a_port_in_use_names_the_port_and_serve_port(sample_zip, taken_port, mode, capsys):
    code = main(["serve", *mode, "--zip", str(sample_zip), "--port", str(taken_port)])
    err = capsys.readouterr().err
    assert code == PortUnavailable.exit_code != UNEXPECTED, err  # before: a traceback, exit 10
    assert f"port {taken_port} on 127.0.0.1 is already in use" in err and f"SERVE_PORT={taken_port + 1}" in err
    assert "bug of the harness" not in err and "Traceback" not in err


@pytest.mark.parametrize("cause, message", [
    (OSError(errno.EADDRINUSE, "Address already in use"), "port 8000 on 127.0.0.1 is already in use"),
    (OSError(errno.EACCES, "Permission denied"), "port 8000 on 127.0.0.1 needs root"),
    (OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"), "127.0.0.1 is not an address of this machine"),
], ids=["in use", "privileged", "not this machine's address"])
def test_a_failed_bind_is_read_as_the_port_s_problem(cause, message):
    found = ports.from_bind_error(cause, "127.0.0.1", 8000)
    assert found is not None and message in str(found) and found.exit_code == 11


@pytest.mark.parametrize("text, taken", [
    ("driver failed programming external connectivity on endpoint x: Bind for 127.0.0.1:8000 failed: port is "
     "already allocated", True),
    ("listen tcp4 127.0.0.1:8000: bind: address already in use", True),
    ("No such image: spider-scoring-grader:abc", False),
], ids=["another container publishes it", "another program listens", "another engine error"])
def test_the_engine_s_refusal_to_publish_is_read_as_the_port_s_problem(text, taken):
    assert (ports.from_engine_error(Exception(text), "127.0.0.1", 8000) is not None) == taken


@pytest.mark.docker
@pytest.mark.slow
def test_the_service_container_on_a_port_in_use_is_port_unavailable(docker_engine, sample_zip, taken_port):
    """Past the check (a port taken in between): the engine's APIError becomes PortUnavailable."""
    from harness.containers.service import ServiceContainer
    with pytest.raises(PortUnavailable, match=f"port {taken_port} on 127.0.0.1 is already in use"):
        with ServiceContainer(sample_zip, host_port=taken_port, say=lambda line: None):
            pass


# -- test-grader and check-cpu on any bundle ----------------------------------------------------------
@pytest.mark.parametrize("target", ["test-grader", "check-cpu"])
def test_the_grader_targets_answer_with_the_golds_by_default(tmp_path, target):
    (tmp_path / "default").mkdir()
    (tmp_path / "given").mkdir()
    done = scratch_make(tmp_path / "default", "-n", target, "OUT=new")
    assert done.returncode == 0, done.stderr
    assert "--gold-completions" in done.stdout and "completions-eval.jsonl" not in done.stdout
    given = scratch_make(tmp_path / "given", "-n", target, "OUT=new", f"GRADER_COMPLETIONS={SAMPLE_COMPLETIONS}")
    assert f"--completions {SAMPLE_COMPLETIONS}" in given.stdout and "--gold-completions" not in given.stdout
    assert made(tmp_path / "default") == made(tmp_path / "given") == []


def _emulate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "emulate", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)


def test_the_golds_as_completions_score_1_on_every_row(sample_zip, prepared_sample, tmp_path):
    done = _emulate("grader", "--in-process", "--gold-completions", "--zip", str(sample_zip), "--data",
                    str(prepared_sample), "--output", str(tmp_path / "r.jsonl"))
    assert done.returncode == 0, done.stderr
    assert "golds as completions: 20 of 20 rows score 1.0" in done.stdout


def test_a_gold_not_scoring_1_fails_the_check():
    row = dict(row_id="eval-00003", db_id="bakery", question="q", gold="SELECT 1", completion="SELECT 1", sql="SELECT 1",
               detail="")
    results = [RowResult(**row, score=1.0, outcome="match"), RowResult(**row, score=0.0, outcome="mismatch")]
    assert emulate.golds_checked(results) == CHECKS_FAILED
    assert emulate.golds_checked(results[:1]) == 0


def test_completions_for_other_rows_name_grader_completions_and_the_way_out(sample_zip, prepared_sample, tmp_path):
    """The sample's file given for a bundle with other eval rows (here: half of them answered)."""
    half = tmp_path / "half.jsonl"
    half.write_text("".join(line + "\n" for line in SAMPLE_COMPLETIONS.read_text().splitlines()[:10]))
    done = _emulate("grader", "--in-process", "--completions", str(half), "--zip", str(sample_zip), "--data",
                    str(prepared_sample), "--output", str(tmp_path / "r.jsonl"))
    assert done.returncode == InputError.exit_code
    assert "no completion for 10 of the split's 20 rows" in done.stderr
    assert "GRADER_COMPLETIONS=FILE" in done.stderr and "--gold-completions" in done.stderr


@pytest.mark.parametrize("args, message", [
    (["grader", "--gold-completions", "--completions", str(SAMPLE_COMPLETIONS)], "give one"),
    (["reward", "--gold-completions"], "for the grader and verdicts modes"),
], ids=["both answers", "reward mode"])
def test_gold_completions_conflicts_are_clear(sample_zip, prepared_sample, args, message, capsys):
    code = main(["emulate", *args, "--in-process", "--zip", str(sample_zip), "--data", str(prepared_sample)])
    assert code == InputError.exit_code and message in capsys.readouterr().err


@pytest.mark.real_data
@pytest.mark.slow
def test_on_a_real_bundle_the_golds_pass_and_the_sample_s_file_says_what_to_do(prepared_spider, tmp_path):
    zip_path = tmp_path / "spider-scoring.zip"
    assert main(["pack", "--data", str(prepared_spider), "--output", str(zip_path)]) == 0
    golds = _emulate("grader", "--in-process", "--gold-completions", "--zip", str(zip_path), "--data",
                     str(prepared_spider), "--output", str(tmp_path / "r.jsonl"))
    eval_rows = SPIDER_PREPARE_ARGS[SPIDER_PREPARE_ARGS.index("--eval-rows") + 1]
    assert golds.returncode == 0, golds.stdout[-2000:] + golds.stderr[-2000:]
    assert f"golds as completions: {eval_rows} of {eval_rows} rows score 1.0" in golds.stdout
    sample = _emulate("grader", "--in-process", "--completions", str(SAMPLE_COMPLETIONS), "--zip", str(zip_path),
                      "--data", str(prepared_spider), "--output", str(tmp_path / "s.jsonl"))
    assert sample.returncode == InputError.exit_code and "GRADER_COMPLETIONS=FILE" in sample.stderr


# -- the stale-gold check's own warnings ----------------------------------------------------------------
def test_the_stale_gold_check_passes_without_a_warning(sample_zip, prepared_sample, tmp_path):
    rows = {split: read_split(prepared_sample / "data" / f"{split}.jsonl", split) for split in ("train", "rl", "eval")}
    with load_bundle(sample_zip, tmp_path) as loaded:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check = checks.check_stale_gold(loaded, rows)
        assert check.passed, check.failures
        assert [str(w.message) for w in caught] == []  # before: six RuntimeWarnings telling the user to rebuild
        # A stale gold met outside the check still warns, as the bundle promises.
        with pytest.warns(RuntimeWarning, match="stale_bundle"):
            call = call_score(loaded.function("reward"), solution_str="SELECT 1", ground_truth="SELECT 'no such gold'")
        assert call.code == "stale_bundle"


def test_another_warning_inside_the_check_still_goes_out():
    def scores_and_warns(**kwargs: object) -> float:
        warnings.warn("something else", UserWarning, stacklevel=1)
        return 1.0
    with pytest.warns(UserWarning, match="something else"):
        call = checks._call_keeping_stale_warning(scores_and_warns, solution_str="x")
    assert call.score == 1.0


# -- make -n bundle after a change ------------------------------------------------------------------
def _prepared_from(folder: Path, flags: str) -> None:
    """A prepared folder as `make bundle` leaves it: its flags, then the summary (newer than every source)."""
    (folder / "out").mkdir()
    (folder / "out" / "prepared-from").write_text(flags + "\n")
    (folder / "out" / "prepare-summary.json").write_text("{}")


@pytest.mark.parametrize("target, before, given, prepares", [
    ("bundle", "--databases {db} --rows 2000 --rl-rows 600 --eval-rows 300", ["ROWS=200"],
     "prepare --databases {db} --rows 200 --rl-rows 600 --eval-rows 300 --output out"),
    ("bundle", "--databases {db} --rows 2000 --rl-rows 600 --eval-rows 300", [], None),
    ("bundle", "--databases {db} --rows 2000 --rl-rows 600 --eval-rows 300", ["SPIDER_QUESTIONS=/data/spider"],
     "prepare --databases {db} --questions /data/spider --rows 2000"),
    ("bundle", "--databases {db} --rows 2000 --rl-rows 600 --eval-rows 300", ["QUESTIONS_FILE=/data/bird/dev.json"],
     "prepare --databases {db} --questions-file /data/bird/dev.json --rows 2000"),
    ("sample-bundle", "--sample", ["PREPARE_ARGS=--rows 5"], "prepare --sample --rows 5 --output out"),
    ("sample-bundle", "--sample", [], None),
], ids=["a changed size", "nothing changed", "questions given", "a question file given", "sample: changed flags", "sample: nothing changed"])
def test_a_dry_run_of_bundle_shows_the_prepare_step_when_the_flags_changed(tmp_path, target, before, given, prepares):
    databases = tmp_path / "spider" / "database"
    databases.mkdir(parents=True)
    _prepared_from(tmp_path, before.format(db=databases))
    done = scratch_make(tmp_path, "-n", target, f"SPIDER_DATABASES={databases}", *given)
    assert done.returncode == 0, done.stderr
    if prepares is None:
        assert "harness prepare" not in done.stdout
    else:
        assert prepares.format(db=databases) in done.stdout  # before: "'out/prepare-summary.json' is up to date"
    assert (tmp_path / "out" / "prepared-from").read_text() == before.format(db=databases) + "\n"  # nothing written


def test_a_dry_run_of_bundle_on_a_new_folder_ends_and_writes_nothing(tmp_path):
    databases = tmp_path / "database"
    databases.mkdir()
    done = scratch_make(tmp_path, "-n", "bundle", f"SPIDER_DATABASES={databases}", "OUT=new")
    assert done.returncode == 0, done.stderr  # before: make called itself without end
    assert f"harness prepare --databases {databases} --rows 2000" in done.stdout
    assert made(tmp_path) == ["database"]


# -- audit prints its rows ------------------------------------------------------------------------
def test_every_policy_label_is_whole_in_the_table():
    doc = json.loads(AUDIT_FIGURES.read_text(encoding="utf-8"))
    lines = report.table(doc)
    for policy in catalogue.POLICIES:
        assert any(line.startswith(policy.label + " ") for line in lines), policy.label
    assert any(line.startswith("a constant row (SELECT 0 or SELECT 1, the gold's column count) ") for line in lines)


def test_the_rows_behind_the_table_are_listed():
    doc = json.loads(AUDIT_FIGURES.read_text(encoding="utf-8"))
    text = "\n".join(report.rows(doc))
    assert f"hackable rows ({len(doc['hackable'])})" in text and f"set aside ({len(doc['set_aside'])})" in text
    for row in doc["hackable"]:
        assert f"  {row['id']} ({row['db_id']}) gold: {row['gold']}" in text
        for paid in row["paid"]:
            assert f"    {paid['policy']}: {paid['sql']}   [shown wrong on: {paid['witness']}]" in text
    for row in doc["set_aside"]:
        assert f"  {row['id']} ({row['db_id']})" in text


def test_the_audit_command_prints_the_rows_too(sample_zip, prepared_sample, capsys):
    assert main(["audit", "--data", str(prepared_sample), "--zip", str(sample_zip)]) == 0
    out = capsys.readouterr().out
    assert "at least one of these (the union)" in out and "hackable rows: none" in out
