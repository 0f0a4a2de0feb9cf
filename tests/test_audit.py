"""The audit end to end: `audit` on the sample's zip, prepare's section and --drop-hackable, verify's
check, and the default Spider splits (real data)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_prepare
from harness.audit import entry, report, run
from harness.audit.catalogue import POLICY_NAMES
from harness.cli import main
from harness.common.bundle_loader import load_bundle
from harness.common.errors import CHECKS_FAILED, InputError
from harness.common.processes import map_in_processes
from harness.common.rows import index_mismatches, read_split
from harness.emulator.calls import call_score
from harness.prepare import job, pack, splits

ORIGINAL_ONLY = "original"  # SPIDER_SCORING_SEMANTICS: judge on the original database alone


def audit_json(tmp_path: Path, *args: str, near_misses: bool = False) -> tuple[int, dict]:
    """`audit` with ``args``; its near misses measured only when asked (tests/test_near_misses.py is about them)."""
    out = tmp_path / "audit.json"
    code = main(["audit", *args, *(() if near_misses else ("--near-miss-families", "none")), "--json", str(out)])
    return code, json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}


def test_the_figures_add_up(sample_zip, tmp_path):
    code, doc = audit_json(tmp_path, "--zip", str(sample_zip))
    assert code == 0 and doc["format"] == report.FORMAT and set(doc["splits"]) == {"rl", "eval"}
    for split in doc["splits"].values():
        assert set(split["policies"]) == set(POLICY_NAMES)
        assert split["hackable_first_seven"] <= split["hackable"] <= split["rows"]
        for entry_ in split["policies"].values():
            assert entry_["paid"] + entry_["set_aside"] <= entry_["applies"] <= split["rows"]
            assert entry_["paid"] <= split["hackable"]
    rows = {name: split["rows"] for name, split in doc["splits"].items()}
    assert rows == {"rl": 17, "eval": 20}
    assert len(doc["hackable"]) == sum(s["hackable"] for s in doc["splits"].values())


def test_the_calls_are_the_same_on_one_process_and_on_one_a_database(sample_zip, tmp_path, monkeypatch):
    spread: list[int] = []

    def spy(function, items, processes=None):
        spread.append(processes)
        return map_in_processes(function, items, processes)

    monkeypatch.setattr(run, "TASKS_A_PROCESS", 1)  # the sample's few calls spread over processes all the same
    monkeypatch.setattr(run, "map_in_processes", spy)
    with load_bundle(sample_zip, tmp_path) as loaded:
        rows = run.index_rows(loaded, ("rl", "eval"))
        made = run.catalogue_of(loaded, rows)
        tasks = sorted({(run.FUNCTION_FOR_SPLIT[r.split], r.db_id, r.gold, sql) for r in rows
                        for sql in [r.gold, *(c.sql for c in made[(r.db_id, r.gold)])]})
        here, spawned = run.score_all(loaded, tasks, 2, processes=1), run.score_all(loaded, tasks, 2, processes=2)
    assert spread == [2] and len({t[1] for t in tasks}) > 1
    assert list(spawned) == list(here) == tasks
    assert spawned == here
    assert {c.outcome for c in here.values()} >= {"match", "mismatch"}


def test_every_answer_counted_is_paid_by_the_zip_and_names_its_witness(sample_zip, tmp_path, monkeypatch):
    monkeypatch.setenv("SPIDER_SCORING_SEMANTICS", ORIGINAL_ONLY)  # many answers paid: much to check
    code, doc = audit_json(tmp_path, "--zip", str(sample_zip), "--max-hackable", "100%")
    assert code == 0 and doc["hackable"]
    with load_bundle(sample_zip, tmp_path) as loaded:
        for row in doc["hackable"]:
            function = loaded.function("grader" if row["split"] == "eval" else "reward")
            for found in row["paid"]:
                assert found["policy"] in POLICY_NAMES and found["witness"]
                call = call_score(function, solution_str=found["sql"], ground_truth=row["gold"],
                                  extra_info={"db_id": row["db_id"]})
                assert call.score == 1.0, (row["id"], found)


def test_judged_on_the_original_alone_most_rows_are_hackable_and_verify_would_fail(sample_zip, tmp_path, monkeypatch,
                                                                                   capsys):
    code, with_neighbours = audit_json(tmp_path, "--zip", str(sample_zip))
    monkeypatch.setenv("SPIDER_SCORING_SEMANTICS", ORIGINAL_ONLY)
    failed, original = audit_json(tmp_path, "--zip", str(sample_zip))
    assert code == 0 and failed == CHECKS_FAILED and "over the threshold of 15.0%" in capsys.readouterr().err
    for name in ("rl", "eval"):
        assert original["splits"][name]["hackable"] > 0.8 * original["splits"][name]["rows"]
        assert with_neighbours["splits"][name]["hackable"] < original["splits"][name]["hackable"]


def test_the_threshold_is_a_share_a_user_sets(sample_zip, tmp_path, monkeypatch):
    monkeypatch.setenv("SPIDER_SCORING_SEMANTICS", ORIGINAL_ONLY)
    assert audit_json(tmp_path, "--zip", str(sample_zip), "--max-hackable", "1")[0] == 0
    assert audit_json(tmp_path, "--zip", str(sample_zip), "--max-hackable", "0.5")[0] == CHECKS_FAILED
    with pytest.raises(SystemExit):
        main(["audit", "--zip", str(sample_zip), "--max-hackable", "150%"])


def test_a_prepared_folder_without_its_zip_is_audited_from_its_staged_bundle(prepared_sample, sample_zip, tmp_path):
    staged = audit_json(tmp_path, "--data", str(prepared_sample), near_misses=True)[1]
    zipped = audit_json(tmp_path, "--zip", str(sample_zip), near_misses=True)[1]

    def without_run(doc: dict) -> dict:
        return {k: without_run(v) if k == "near_misses" else v for k, v in doc.items() if k not in entry.RUN_FIELDS}

    assert staged["near_misses"]["splits"] and without_run(staged) == without_run(zipped)


def test_the_train_split_can_be_audited_too(sample_zip, tmp_path):
    """The sample's train databases have no neighbours (prepare builds them for eval and rl): judged
    on the original alone, nearly every train row is hackable."""
    code, doc = audit_json(tmp_path, "--zip", str(sample_zip), "--splits", "train")
    assert code == CHECKS_FAILED and list(doc["splits"]) == ["train"] and doc["splits"]["train"]["rows"] == 28
    assert doc["splits"]["train"]["hackable"] > 20


def test_an_answer_the_bundle_raises_on_instead_of_scoring_fails_the_audit():
    doc = {"splits": {"rl": {"rows": 10, "hackable": 0}},
           "unscored": [{"id": "rl-00003", "policy": "empty", "sql": "SELECT NULL WHERE 0", "detail": "ScoringTimeoutError: x"}]}
    assert report.problems(doc, 0.15) == ["1 candidate answers raised instead of scoring (first: rl-00003 empty: "
                                          "ScoringTimeoutError: x)"]
    assert report.problems({**doc, "unscored": []}, 0.15) == []


def test_no_zip_and_no_staged_bundle_says_what_to_run(tmp_path, capsys):
    assert main(["audit", "--data", str(tmp_path / "nothing")]) == InputError.exit_code
    assert "make pack" in capsys.readouterr().err


# -- prepare: the summary's section, --drop-hackable ------------------------------------------------

def test_prepare_writes_the_audit_into_its_summary(prepared_sample):
    summary = json.loads((prepared_sample / "prepare-summary.json").read_text(encoding="utf-8"))
    section = summary["audit"]
    assert set(section["splits"]) == {"rl", "eval"} and section["dropped"] == []
    assert not set(entry.RUN_FIELDS) & set(section)  # the summary follows from the inputs alone


def test_no_audit_leaves_the_section_empty_and_cannot_drop(tmp_path):
    assert run_prepare(tmp_path / "out", "--sample", "--no-audit")["audit"] is None
    assert main(["prepare", "--sample", "--no-audit", "--drop-hackable", "--output", str(tmp_path / "x")]) == 3


def test_in_a_bare_interpreter_prepare_says_the_audit_did_not_run_and_cannot_drop(tmp_path):
    """prepare needs only the standard library (tests/test_prepare.py); the audit needs sqlparse and sqlglot."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from harness.cli import main; sys.exit(main(sys.argv[1:]))")
    bare = [sys.executable, "-I", "-S", "-c", code, "prepare", "--sample", "--rows", "3", "--rl-rows", "2", "--eval-rows", "2"]
    done = subprocess.run(bare + ["--output", str(tmp_path / "o")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"audit: not run: (sqlparse|sqlglot) is not importable here", done.stdout)
    assert re.match("sqlparse|sqlglot", json.loads((tmp_path / "o" / "prepare-summary.json").read_text())["audit"]["not_run"])
    refused = subprocess.run(bare + ["--drop-hackable", "--output", str(tmp_path / "p")], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == InputError.exit_code and "needs the audit" in refused.stderr


def test_dropping_every_rl_row_is_refused(tmp_path, capsys):
    """Without neighbours for rl, the reward is judged on the original database alone: every rl row
    is hackable (its value, or its rows written out), and rl would be left empty."""
    code = main(["prepare", "--sample", "--neighbours", "eval", "--drop-hackable", "--output", str(tmp_path / "out")])
    assert code == InputError.exit_code and "leave rl empty" in capsys.readouterr().err


def drop_rows(positions: frozenset[int]):
    return lambda staged, purpose, work: job.Review({"hackable": [], "dropped": sorted(positions)}, positions)


def test_the_rows_left_out_leave_a_bundle_that_matches_its_splits(fixture_dbs, tmp_path):
    """The review's rl rows go; the bundle is staged again with the neighbours as built, ids renumbered."""
    source = job.sample_source()
    rules = splits.Rules(splits.Catalog(fixture_dbs, job.DEFAULT_MAX_SCHEMA), splits.GoldChecker())
    kept = job.prepare(source, rules, job.SAMPLE_SIZES, tmp_path / "all")
    summary = job.prepare(job.sample_source(), rules, job.SAMPLE_SIZES, tmp_path / "out", review=drop_rows(frozenset({0, 5})))
    all_rl = read_split(tmp_path / "all" / "data" / "rl.jsonl", "rl")
    rl = read_split(tmp_path / "out" / "data" / "rl.jsonl", "rl")
    assert [r.gold for r in rl] == [r.gold for i, r in enumerate(all_rl) if i not in (0, 5)]
    assert summary["rows"]["rl"] == kept["rows"]["rl"] - 2 and summary["audit"]["dropped"] == [0, 5]
    index = json.loads((tmp_path / "out" / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    rows = [r for s in ("train", "rl", "eval") for r in read_split(tmp_path / "out" / "data" / f"{s}.jsonl", s)]
    assert index_mismatches(rows, index, ("train", "rl", "eval")) == []
    assert summary["neighbours"]["total"]["kept"] == kept["neighbours"]["total"]["kept"]
    pack.pack(tmp_path / "out" / "bundle", tmp_path / "out.zip")  # every staged file indexed, nothing missing


@pytest.mark.slow
def test_drop_hackable_leaves_out_the_rows_it_names_and_verify_passes(tmp_path, capsys):
    out = tmp_path / "out"
    summary = run_prepare(out, "--sample", "--neighbour-candidates", "2", "--drop-hackable")
    dropped = summary["audit"]["dropped"]
    assert summary["rows"]["rl"] == 17 - len(dropped) and not [e for e in summary["audit"]["hackable"] if e["split"] == "rl"]
    assert summary["warnings"] == []  # rows left out on purpose are no shortfall of the source
    assert "dropped from rl (--drop-hackable)" in capsys.readouterr().out or not dropped
    assert main(["pack", "--data", str(out)]) == 0
    # eval has fewer neighbours here too, and the near misses are measured elsewhere: not this test's point
    assert main(["verify", "--in-process", "--data", str(out), "--json", str(tmp_path / "verify.json"),
                 "--max-hackable", "100%", "--near-miss-families", "none"]) == 0
    report_ = json.loads((tmp_path / "verify.json").read_text(encoding="utf-8"))
    assert report_["audit"]["splits"]["rl"]["hackable"] == 0


# -- verify ------------------------------------------------------------------------------------------

def test_verify_fails_over_the_audit_s_threshold(tmp_path):
    """The audit's threshold is verify's: over it, the degenerate answers check fails (the sample, which
    has no hackable row, passes at 0: tests/test_verify_bundle.py)."""
    section = {"splits": {"rl": {"rows": 10, "hackable": 1}}, "unscored": []}
    assert report.problems(section, 0) and not report.problems(section, 0.15)


# -- the default Spider splits -----------------------------------------------------------------------

@pytest.mark.real_data
def test_the_default_spider_splits_are_audited_within_the_threshold(prepared_spider):
    section = json.loads((prepared_spider / "prepare-summary.json").read_text(encoding="utf-8"))["audit"]
    assert {name: s["rows"] for name, s in section["splits"].items()} == {"rl": 600, "eval": 300}
    assert report.problems(section, report.DEFAULT_THRESHOLD) == []
    assert all(found["witness"] for row in section["hackable"] for found in row["paid"])
    assert section["unscored"] == []
    fair = section["rewrites"]["splits"]  # issue 21: closing holes rejects at most 1% of the equivalent rewrites
    assert fair["eval"]["scored"] >= 100 and sum(s["rejected"] for s in fair.values()) <= 0.01 * sum(
        s["scored"] for s in fair.values())


@pytest.mark.real_data
@pytest.mark.slow
def test_on_spider_the_neighbours_close_most_of_what_the_original_pays(prepared_spider, tmp_path, monkeypatch):
    zip_path = tmp_path / "spider.zip"
    pack.pack(prepared_spider / "bundle", zip_path)
    monkeypatch.setenv("SPIDER_SCORING_SEMANTICS", ORIGINAL_ONLY)
    original = entry.audit_zip(zip_path, near_misses=entry.NearMisses(which=None))  # the near misses: not the point
    section = json.loads((prepared_spider / "prepare-summary.json").read_text(encoding="utf-8"))["audit"]
    for name in ("rl", "eval"):
        assert original["splits"][name]["hackable"] > 0.5 * original["splits"][name]["rows"]
        assert section["splits"][name]["hackable"] < original["splits"][name]["hackable"] / 5
