"""Disputed golds (issue 25, item 3; issue 37, item 4): the list, prepare's marks and rl exclusion, the
bundle's verdict against the gold and its accepted answers, the report's breakdown, and the real cases
on Spider (docs/disputed-golds.md)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from bundle import grader as bundle_grader  # noqa: F401 - imported as the trainer imports it, for grade()
from bundle import verify as bundle_verify
from bundle.scoring import batch as scoring_batch
from bundle.scoring import entry as scoring_entry
from bundle.scoring.index import normalize_gold
from conftest import run_prepare, sample_rows
from harness.common import results as results_mod
from harness.common.errors import InputError
from harness.prepare import bundle_data, disputed, disputed_page, splits
from harness.report import compare, render

OWNER_COUNT = "SELECT count(*) FROM Owner"  # pets_club: the neighbours refuse its constant answer


def _write(tmp_path: Path, golds: list[dict], **top) -> Path:
    path = tmp_path / "disputed.json"
    doc = {"format": disputed.FORMAT, "version": disputed.VERSION, "golds": golds, **top}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _entry(**changes) -> dict:
    base = {"id": "pets_club-owners", "db_id": "pets_club", "gold": OWNER_COUNT, "kind": "wrong column",
            "reason": "a reason on one line", "source": {"kind": "read by hand", "detail": "why"},
            "rows": [{"split": "dev", "index": 3, "question": "How many owners?"}]}
    base.update(changes)
    return base


# -- the list ---------------------------------------------------------------------------------------

def test_the_shipped_list_loads_and_every_entry_is_complete():
    found = disputed.load()
    assert len(found.golds) >= 90 and len({g.id for g in found.golds}) == len(found.golds)
    assert all(g.kind in disputed.KINDS and g.reason and g.rows for g in found.golds)
    published = [g for g in found.golds if g.source.kind == "published"]
    assert published and all(g.source.url.startswith("https://github.com/taoyds/spider/issues/") for g in published)
    assert found.match("pets_1", " SELECT weight FROM pets  ORDER BY pet_age LIMIT 1 ;").id == "pets_1-youngest-dog"


@pytest.mark.parametrize("change, problem", [
    ({"reason": ""}, "'reason' must be non-empty text"),
    ({"reason": "two\nlines"}, "the reason must be one line"),
    ({"kind": "wrong vibes"}, "kind 'wrong vibes' is none of"),
    ({"id": "has space"}, "the id must be letters"),
    ({"source": {"kind": "published", "detail": "an issue"}}, "a published source needs its 'url'"),
    ({"source": {"kind": "labelled set", "detail": "pairs"}}, "a labelled-set source needs 'pairs'"),
    ({"source": {"kind": "rumour", "detail": "x"}}, "'source' must be an object whose kind is one of"),
    ({"rows": []}, "'rows' must list the Spider rows"),
    ({"rows": [{"split": "test", "index": 1, "question": "q"}]}, "each row needs a split"),
    ({"right_answer": ""}, "'right_answer', when given, must be a query"),
], ids=["empty reason", "multi-line reason", "unknown kind", "bad id", "published without url",
        "labelled set without pairs", "unknown source kind", "no rows", "unknown split", "empty right answer"])
def test_a_malformed_entry_is_refused_naming_it_and_the_problem(tmp_path, change, problem):
    with pytest.raises(InputError) as refused:
        disputed.load(_write(tmp_path, [_entry(**change)]))
    message = str(refused.value)
    assert f"entry {change.get('id', 'pets_club-owners')!r}" in message
    assert problem in message and "fix that entry" in message


def test_two_entries_for_one_gold_or_one_id_are_refused(tmp_path):
    twin = _entry(id="other", gold=OWNER_COUNT + " ;")
    with pytest.raises(InputError, match="disputes the same gold on pets_club: merge the two"):
        disputed.load(_write(tmp_path, [_entry(), twin]))
    with pytest.raises(InputError, match="the id repeats"):
        disputed.load(_write(tmp_path, [_entry(), _entry(gold="SELECT 1")]))


@pytest.mark.parametrize("text, problem", [
    ("{not json", "cannot read the disputed golds"),
    (json.dumps({"format": "something else", "version": 1, "golds": []}), "is not a spider-scoring-disputed-golds file"),
    (json.dumps({"format": disputed.FORMAT, "version": 1}), "has no 'golds' list"),
], ids=["not JSON", "another format", "no list"])
def test_a_file_that_is_not_a_list_of_disputed_golds_is_refused(tmp_path, text, problem):
    path = tmp_path / "x.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=problem):
        disputed.load(path)


def test_the_docs_page_is_generated_from_the_list_and_current():
    page = disputed_page.PAGE.read_text(encoding="utf-8")
    assert page == disputed_page.render_default(), "docs/disputed-golds.md is stale: run `make docs`"
    for gold in disputed.load().golds:
        assert f"**{gold.id}**" in page


# -- the bundle: judged against the gold and its accepted answers ------------------------------------

def _mark(root: Path, gold: str, entry_id: str = "pets_club-owners", reason: str = "a test's reason",
          accepted: tuple[str, ...] = ()) -> None:
    """Mark every index row of ``gold`` as disputed, as prepare does."""
    path = root / "data" / "index.json"
    index = json.loads(path.read_text(encoding="utf-8"))
    for row in index["rows"]:
        if normalize_gold(row["gold"]) == normalize_gold(gold):
            row["disputed"] = entry_id
    entry: dict = {"kind": "wrong column", "reason": reason}
    if accepted:
        entry["accepted"] = list(accepted)
    index["disputed_golds"] = {entry_id: entry}
    path.write_bytes(bundle_data.dumps_canonical(index))


@pytest.fixture
def disputed_bundle(neighbour_bundle, tmp_path) -> Path:
    """The sample bundle with neighbours, its pets_club owner count marked disputed."""
    root = tmp_path / "bundle"
    shutil.copytree(neighbour_bundle, root)
    _mark(root, OWNER_COUNT)
    return root


def _score(root: Path, output: str, gold: str, caller: str = "grader") -> bundle_verify.Verdict:
    call = scoring_entry.read_call({"output": output, "expected": gold, "extra_info": {"db_id": "pets_club"}})
    return scoring_entry.score_call(call, root=str(root), caller=caller)


def _constant(root: Path) -> str:
    import sqlite3
    conn = sqlite3.connect(root / "data" / "databases" / "pets_club.sqlite")
    try:
        return f"SELECT {conn.execute(OWNER_COUNT).fetchone()[0]}"
    finally:
        conn.close()


@pytest.mark.parametrize("caller", ["reward", "grader"])
def test_a_disputed_golds_constant_is_not_paid_and_every_verdict_names_the_gold(disputed_bundle, caller):
    """Judged on the original only, a disputed gold paid its value written out; now it is judged as any gold."""
    verdict = _score(disputed_bundle, _constant(disputed_bundle), OWNER_COUNT, caller)
    assert (verdict.score, verdict.original_score, verdict.disputed) == (0.0, 1.0, "pets_club-owners")
    assert verdict.decided_on.endswith(" (disputed gold: pets_club-owners)") and not verdict.decided_on.startswith("orig")
    assert bundle_verify.disputed_id(verdict.decided_on) == "pets_club-owners"
    assert verdict.detail.startswith("its gold is disputed (pets_club-owners: a test's reason): ")
    assert _score(disputed_bundle, "select COUNT(*) from Owner", OWNER_COUNT, caller).score == 1.0


ACCEPTED_CANDIDATES = ("SELECT count(*) FROM Owner WHERE age > 20", "SELECT max(owner_id) FROM Owner",
                       "SELECT count(*) FROM Owner WHERE age < 70", "SELECT count(DISTINCT city) + 2 FROM Owner")


@pytest.mark.parametrize("caller", ["reward", "grader"])
def test_an_accepted_answer_is_paid_where_the_gold_differs_and_the_verdict_says_which(
        neighbour_bundle, tmp_path, caller):
    """An answer the original accepts and a neighbour tells from the gold: wrong for the gold, paid once it is
    the disputed gold's accepted answer, and the verdict names it; the gold itself is still paid."""
    found = [sql for sql in ACCEPTED_CANDIDATES
             if (lambda v: (v.original_score, v.score) == (1.0, 0.0))(_score(neighbour_bundle, sql, OWNER_COUNT, caller))]
    assert found, "no candidate the original accepts and a neighbour rejects: change ACCEPTED_CANDIDATES"
    root = tmp_path / "accepted"
    shutil.copytree(neighbour_bundle, root)
    _mark(root, OWNER_COUNT, accepted=(found[0],))
    verdict = _score(root, found[0], OWNER_COUNT, caller)
    assert (verdict.score, verdict.accepted, verdict.disputed) == (1.0, found[0], "pets_club-owners")
    assert "it matches accepted answer 1 of the disputed gold" in verdict.detail
    gold = _score(root, OWNER_COUNT + " ", OWNER_COUNT, caller)
    assert (gold.score, gold.accepted) == (1.0, None)
    constant = _score(root, _constant(root), OWNER_COUNT, caller)
    assert constant.score == 0.0 and constant.accepted is None


def test_every_verdict_of_a_disputed_row_names_it_and_others_are_unchanged(disputed_bundle):
    for output in ("no query here", "SELECT nope FROM Owner", "SELECT name FROM Owner"):
        verdict = _score(disputed_bundle, output, OWNER_COUNT)
        assert verdict.score == 0.0 and bundle_verify.disputed_id(verdict.decided_on) == "pets_club-owners"
    other = _score(disputed_bundle, "SELECT name FROM Pet", "SELECT name FROM Pet")
    assert other.disputed is None and bundle_verify.disputed_id(other.decided_on) is None


def test_the_grader_and_verls_fields_carry_it(disputed_bundle, monkeypatch):
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", str(disputed_bundle))
    from bundle import grader
    graded = grader.grade(output=OWNER_COUNT + " ", expected=OWNER_COUNT, extra_info={"db_id": "pets_club"})
    assert graded["disputed"] == "pets_club-owners" and graded["score"] == 1.0 and graded["accepted"] is None
    scored = scoring_batch.Scored(1.0, "match", "", graded["decided_on"])
    assert scored.fields()["decided_on"] == graded["decided_on"]


# -- prepare ----------------------------------------------------------------------------------------

def _sample_list(tmp_path: Path, rl_gold: dict, eval_gold: dict) -> Path:
    return _write(tmp_path, [
        _entry(id="sample-rl", db_id=rl_gold["db_id"], gold=rl_gold["query"],
               rows=[{"split": "train", "index": 0, "question": rl_gold["question"]}]),
        _entry(id="sample-eval", db_id=eval_gold["db_id"], gold=eval_gold["query"],
               rows=[{"split": "dev", "index": 0, "question": eval_gold["question"]}])])


@pytest.fixture
def sample_choice(prepared_sample) -> tuple[dict, dict]:
    """A gold the default sample run puts in rl (and nowhere else) and one it puts in eval."""
    index = json.loads((prepared_sample / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    splits_of: dict[str, set[str]] = {}
    for row in index["rows"]:
        splits_of.setdefault(normalize_gold(row["gold"]), set()).add(row["split"])
    train = sample_rows("train")
    rl_gold = next(r for r in train if splits_of.get(normalize_gold(r["query"])) == {"rl"})
    eval_gold = next(r for r in sample_rows("validation") if "eval" in splits_of.get(normalize_gold(r["query"]), ()))
    return rl_gold, eval_gold


def test_prepare_keeps_disputed_golds_out_of_rl_marks_eval_and_names_them(tmp_path, sample_choice):
    rl_gold, eval_gold = sample_choice
    listed = _sample_list(tmp_path, rl_gold, eval_gold)
    out = tmp_path / "out"
    summary = run_prepare(out, "--sample", "--no-audit", "--neighbours", "none", "--disputed-golds", str(listed))
    index = json.loads((out / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    assert not [r for r in index["rows"] if normalize_gold(r["gold"]) == normalize_gold(rl_gold["query"])]
    marked = [r for r in index["rows"] if r.get("disputed")]
    assert marked and {r["disputed"] for r in marked} == {"sample-eval"} and {r["split"] for r in marked} == {"eval"}
    assert all(normalize_gold(r["gold"]) == normalize_gold(eval_gold["query"]) for r in marked)
    assert index["disputed_golds"] == {"sample-eval": {"kind": "wrong column", "reason": "a reason on one line"}}
    section = summary["disputed"]
    assert [r["disputed"] for r in section["left_out_of_rl"]] == ["sample-rl"] * len(section["left_out_of_rl"])
    assert section["left_out_of_rl"] and {r["row"] for r in section["rows"]["eval"]} == {r["id"] for r in marked}
    assert summary["skips_total"][splits.SKIP_GOLD_DISPUTED] == len(section["left_out_of_rl"])


def test_keep_disputed_lets_them_into_rl_still_marked(tmp_path, sample_choice):
    rl_gold, eval_gold = sample_choice
    listed = _sample_list(tmp_path, rl_gold, eval_gold)
    out = tmp_path / "out"
    summary = run_prepare(out, "--sample", "--no-audit", "--neighbours", "none", "--disputed-golds", str(listed),
                          "--keep-disputed")
    index = json.loads((out / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    rl = [r for r in index["rows"] if normalize_gold(r["gold"]) == normalize_gold(rl_gold["query"])]
    assert rl and all(r["split"] == "rl" and r["disputed"] == "sample-rl" for r in rl)
    assert summary["settings"]["keep_disputed"] and not summary["disputed"]["left_out_of_rl"]


def test_a_run_without_disputed_golds_writes_the_index_as_before(prepared_sample):
    index = json.loads((prepared_sample / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    assert "disputed_golds" not in index and not any("disputed" in r for r in index["rows"])


def test_a_disputed_row_needs_its_reason_in_the_index(tmp_path, fixture_dbs):
    rows = [bundle_data.IndexRow("eval-00000", "eval", "pets_club", OWNER_COUNT, "no-reason")]
    with pytest.raises(ValueError, match="no reason given for disputed gold"):
        bundle_data.write_bundle_data(tmp_path, rows, fixture_dbs, precompute=False)


# -- results and the report -------------------------------------------------------------------------

def test_results_read_the_bundles_marker():
    assert results_mod.DISPUTED_MARK == bundle_verify.DISPUTED_MARK
    row = _results(["edit 2 of pets_1 (a row copied) (disputed gold: pets_1-youngest-dog)"], [0.0])[0]
    assert (row.disputed, row.decided_place, row.beyond_original) == ("pets_1-youngest-dog", "edit 2 of pets_1 (a row copied)", True)


def _results(decided: list[str], scores: list[float]) -> list[results_mod.RowResult]:
    return [results_mod.RowResult(f"eval-{i:05d}", "pets_1", "q", "SELECT 1", "c", "SELECT 1", s, "match" if s else
                                  "mismatch", "", s, d) for i, (d, s) in enumerate(zip(decided, scores))]


def test_the_report_counts_rows_on_disputed_golds_apart(tmp_path):
    disputed_on = "original (disputed gold: pets_1-youngest-dog)"
    rows = _results([disputed_on, "original", "original"], [1.0, 0.0, 1.0])
    stages = []
    for label, rs in (("base", rows), ("sft", [dataclasses.replace(r, score=1.0, original_score=1.0) for r in rows])):
        path = tmp_path / f"{label}.jsonl"
        results_mod.write_results(path, rs)
        stages.append(compare.Stage(label, str(path), results_mod.read_results(path)))
    report = compare.build_report(stages)
    assert not report.test_suite  # judged on the original: no test-suite column
    assert report.by_gold is not None and report.breakdowns()[-1] is report.by_gold
    groups = dict(report.by_gold.groups)
    assert groups[compare.DISPUTED][0].n == 1 and groups[compare.UNDISPUTED][0].n == 2
    assert "By gold" in render.terminal(report) and compare.DISPUTED in render.markdown(report)
    plain = compare.build_report([compare.Stage("base", stages[0].path, _results(["original"] * 3, [1.0, 0.0, 1.0]))])
    assert plain.by_gold is None and len(plain.breakdowns()) == 2


# -- on real Spider ---------------------------------------------------------------------------------

def _spider_rows(spider: Path) -> dict[str, list[dict]]:
    return {"dev": json.loads((spider / "dev.json").read_text(encoding="utf-8")),
            "train": json.loads((spider / "train_spider.json").read_text(encoding="utf-8"))}


@pytest.mark.real_data
def test_every_listed_row_is_the_spider_question_and_gold_it_names(spider_dir):
    rows = _spider_rows(spider_dir)
    for gold in disputed.load().golds:
        for row in gold.rows:
            found = rows[row.split][row.index]
            assert (found["db_id"], found["question"]) == (gold.db_id, row.question), (gold.id, row)
            assert normalize_gold(found["query"]) == normalize_gold(gold.gold), (gold.id, row)


@pytest.mark.real_data
def test_every_disputed_gold_matches_itself_on_the_original_and_its_right_answer_runs(spider_dir):
    ran = 0
    for gold in disputed.load().golds:
        database = spider_dir / "database" / gold.db_id / f"{gold.db_id}.sqlite"
        if not database.is_file():
            continue  # wta_1, baseball_1: absent from this copy (their entries say so)
        mark = bundle_verify.Disputed(gold.id, gold.reason)
        itself = bundle_verify.verify(gold.gold + "\n-- itself", gold.gold, str(database), is_sql=True, disputed=mark)
        assert (itself.outcome, itself.disputed) == ("match", gold.id), (gold.id, itself.detail)
        if gold.right_answer:
            right = bundle_verify.verify(gold.right_answer, gold.gold, str(database), is_sql=True, disputed=mark)
            assert right.outcome in ("match", "mismatch"), (gold.id, right.detail)  # it runs
        ran += 1
    assert ran >= 90


LABELLED = Path(__file__).resolve().parents[1] / "fixtures" / "labels" / "spider-dev-labels.json"


def _written_out(database: Path, gold: str) -> str | None:
    """The gold's rows on ``database`` written out as one constant query (None: no rows, or over 20)."""
    import sqlite3
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        rows = conn.execute(gold).fetchall()
    finally:
        conn.close()
    if not rows or len(rows) > 20:
        return None
    return " UNION ALL ".join("SELECT " + ", ".join(repr(v) if v is not None else "NULL" for v in row) for row in rows)


@pytest.mark.real_data
@pytest.mark.slow
def test_right_answers_to_disputed_golds_are_paid_and_not_overturned(spider_dir, tmp_path):
    # Published predictions labelled right answers to pets_1 dev 47/48 ("the youngest dog", filtering
    # PetType = 'dog') and car_1 dev 154 (strict bounds, or INTERSECT): without the mark, the search
    # overturns most of them where the gold's mistake shows; judged against the gold and its accepted
    # answers, every one is paid, every accepted answer is paid, and no gold's value written out is.
    from harness.bench import neighbours as bench_neighbours
    pairs = [p for p in json.loads(LABELLED.read_text(encoding="utf-8"))["pairs"]
             if p["dev_index"] in (47, 48, 154) and p["label"] != "wrong answer"]
    assert len(pairs) >= 8
    (tmp_path / "plain").mkdir()
    bench_neighbours.stage_dev_bundle(spider_dir, tmp_path / "plain", databases={"pets_1", "car_1"})
    staged = bench_neighbours.with_neighbours(tmp_path / "plain", tmp_path / "staged", tmp_path / "work")
    control = tmp_path / "control"
    shutil.copytree(staged, control)
    index = json.loads((control / "data" / "index.json").read_text(encoding="utf-8"))
    assert {r.get("disputed") for r in index["rows"] if r["db_id"] == "pets_1" and "pet_age LIMIT 1" in r["gold"]
            and "pettype" not in r["gold"].lower()} == {"pets_1-youngest-dog"}
    for row in index["rows"]:
        row.pop("disputed", None)
    index.pop("disputed_golds")
    (control / "data" / "index.json").write_bytes(bundle_data.dumps_canonical(index))
    overturned = 0
    for pair in pairs:
        call = scoring_entry.read_call({"solution_str": pair["prediction"], "ground_truth": pair["gold"],
                                        "extra_info": {"db_id": pair["db_id"]}})
        verdict = scoring_entry.score_call(call, root=str(staged), caller="grader")
        assert verdict.score == 1.0 and verdict.disputed is not None, (pair["id"], verdict.detail)
        assert bundle_verify.disputed_id(verdict.decided_on) == verdict.disputed
        before = scoring_entry.score_call(call, root=str(control), caller="grader")
        overturned += before.original_score == 1.0 and before.score == 0.0
    assert overturned >= len(pairs) // 2  # without the mark, the search enforced the gold's mistake
    staged_index = json.loads((staged / "data" / "index.json").read_text(encoding="utf-8"))
    marked = {(r["db_id"], r["gold"], r["disputed"]) for r in staged_index["rows"] if r.get("disputed")}
    assert marked
    for db_id, gold, entry in sorted(marked):
        hint = {"db_id": db_id}
        for answer in staged_index["disputed_golds"][entry].get("accepted", ()):
            for caller in ("reward", "grader"):
                verdict = scoring_entry.score_call(scoring_entry.read_call(
                    {"solution_str": answer, "ground_truth": gold, "extra_info": hint}), root=str(staged), caller=caller)
                assert verdict.score == 1.0, (entry, caller, answer, verdict.detail)
        constant = _written_out(staged / "data" / "databases" / f"{db_id}.sqlite", gold)
        if constant is not None:
            for caller in ("reward", "grader"):
                verdict = scoring_entry.score_call(scoring_entry.read_call(
                    {"solution_str": constant, "ground_truth": gold, "extra_info": hint}), root=str(staged), caller=caller)
                assert verdict.score == 0.0 and verdict.original_score == 1.0, (entry, caller, constant, verdict.detail)
